package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// earlyCloseCalls is how many calls TestAuditCompleteWhenClientsCloseEarly
// makes.
const earlyCloseCalls = 300

// TestAuditCompleteWhenClientsCloseEarly checks "no audit record, no
// call" against a client that goes away: through a real `usher serve` on
// PostgreSQL, earlyCloseCalls tools/call requests whose client closes the
// response as soon as its headers arrive. Every call the upstream ran has
// its decision (which records the execution's start) and its outcome in
// the log, each once, and the chain verifies — a client that leaves early
// loses no record.
func TestAuditCompleteWhenClientsCloseEarly(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	// Each call takes a while upstream, so that the client is gone before
	// it ends: the headers of the streamed answer come first.
	u := startBenchUsher(t, startEchoUpstream(t, &ran))
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range earlyCloseCalls {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__echo","arguments":{"text":"call %d"}}}`, i, i)
		req, err := http.NewRequest(http.MethodPost, u.url+"/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+u.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: status %d", i, resp.StatusCode)
		}
		resp.Body.Close() // the headers arrived: gone, without reading the answer
	}

	// The outcome of a call is written after its answer, so the log may
	// take a moment to hold them all.
	var kinds map[string]int
	deadline := time.Now().Add(20 * time.Second)
	for {
		kinds = auditKinds(t, u.config)
		if kinds["executed"]+kinds["execution_failed"]+kinds["outcome_unknown"] >= int(ran.Load()) && ran.Load() > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	n := int(ran.Load())
	if n == 0 {
		t.Fatal("the upstream ran no call")
	}
	if n > earlyCloseCalls {
		t.Errorf("the upstream ran %d calls for %d requests", n, earlyCloseCalls)
	}
	outcomes := kinds["executed"] + kinds["execution_failed"] + kinds["outcome_unknown"]
	if kinds["decision"] != earlyCloseCalls || outcomes != n {
		t.Errorf("%d requests, the upstream ran %d calls; the log has %d decisions and %d outcomes (%v), want a decision for each request and an outcome for each call",
			earlyCloseCalls, n, kinds["decision"], outcomes, kinds)
	}
	if out := benchCLI(t, "audit", "verify", "--config", u.config); !strings.Contains(out, "intact") {
		t.Errorf("usher audit verify: %s", out)
	}
	t.Logf("%d requests closed early; the upstream ran %d calls; the log: %v", earlyCloseCalls, n, kinds)
}

// auditKinds counts the records of the log of the Usher configured by
// config, by kind (`usher audit export`).
func auditKinds(t *testing.T, config string) map[string]int {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"audit", "export", "--config", config}, getenv(nil), &out, &errOut); err != nil {
		t.Fatalf("usher audit export: %v\n%s", err, errOut.String())
	}
	kinds := map[string]int{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var r struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("usher audit export: a line is not a record: %v: %s", err, sc.Text())
		}
		kinds[r.Kind]++
	}
	return kinds
}

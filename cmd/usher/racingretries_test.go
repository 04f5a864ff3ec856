package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
)

// TestRacingRetriesAfterAnApproval: ten identical keyed calls of
// notes_write at once, right after the person approved it, through the
// embedded default's /mcp: one execution, and not one new pending
// approval — every retry that lost the race is answered from the
// execution's record.
func TestRacingRetriesAfterAnApproval(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	userTok, _, mcpTok := userAndMCPTokens(t, s, "alice")
	call := map[string]any{"name": "notes_write", "arguments": map[string]any{"name": "race", "body": "once"},
		"_meta": map[string]any{"usher/idempotency_key": "race-1"}}
	res := mcpCall(t, s.url, mcpTok, "tools/call", call)
	appr, _ := res["_meta"].(map[string]any)["usher/approval"].(map[string]any)
	id, _ := appr["id"].(string)
	if id == "" {
		t.Fatalf("notes_write = %v, want an approval", res)
	}
	if code, body := post(t, s.url+"/api/approvals/"+id+"/decision", userTok, `{"decision":"approve"}`); code != 200 {
		t.Fatalf("decision = %d %s", code, body)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]map[string]any, 10)
	for i := range results {
		wg.Go(func() {
			<-start
			results[i] = mcpCall(t, s.url, mcpTok, "tools/call", call)
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if meta, _ := r["_meta"].(map[string]any); meta["usher/approval"] != nil {
			t.Errorf("retry %d asked for an approval again: %v", i, r)
		}
	}
	if code, list := apitest.Call(t, "GET", s.url+"/api/approvals", userTok, ""); code != 200 || len(list["approvals"].([]any)) != 0 {
		t.Errorf("pending approvals after the retries = %d %v, want none", code, list)
	}
	export, err := s.cli(t, "audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for line := range strings.Lines(export) {
		if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"kind":"approval_consumed"`) {
			started++
		}
	}
	if started != 1 {
		t.Errorf("notes_write approvals used = %d, want 1", started)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// TestKilledReplicaHoldingCall: in the default (stateless) mode, a caller
// of protocol 2026-07-28 calls a tool of a stateful upstream that speaks
// 2025-11-25 and elicits: replica A holds the upstream's call open and
// answers the caller with an input_required round. A is killed (SIGKILL).
// The caller's retry with the answer reaches replica B, which no replica
// confirms holding the call for: it is told the call is no longer open;
// the call's execution record never says it succeeded; the same retry
// under the call's idempotency key again gets the same answer from the
// record; and the tool ran once: nothing ran it again.
func TestKilledReplicaHoldingCall(t *testing.T) {
	t.Parallel()
	c, a, b, mcpTok, calls := startKilledPair(t, func(ctx context.Context, ss *mcp.ServerSession) (*mcp.CallToolResult, error) {
		el, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "user chose " + el.Action}}}, nil
	})

	// A caller that runs the rounds itself, and offers elicitation.
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, nil // never asked: the rounds are the test's
		},
	})
	hc := &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: mcpTok})}}
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: c.lb.url + "/mcp", HTTPClient: hc,
		DisableStandaloneSSE: true, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // ends only a test that would hang
	defer cancel()
	meta := mcp.Meta{"usher/idempotency_key": "held-1"}
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{}, Meta: meta})
	if err != nil || !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("the call gave %+v, %v: want a round asking for the upstream's elicitation", first, err)
	}
	var id string
	for k, ir := range first.InputRequests {
		if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "Your name?" {
			t.Fatalf("the round asks %#v, want the upstream's elicitation", ir)
		}
		id = k
	}

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	c.lb.set(b.url)
	retry := &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{}, Meta: meta,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}},
		RequestState:   first.RequestState}
	started := time.Now()
	res, err := cs.CallTool(ctx, retry)
	if err != nil || !res.IsError || len(res.Content) != 1 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "no longer open") {
		t.Fatalf("the retry through B gave %+v, %v: want a tool error saying the call is no longer open", res, err)
	}
	told := res.Content[0].(*mcp.TextContent).Text
	t.Logf("the retry through B, after %v: %s", time.Since(started).Round(time.Millisecond), told)

	var records, succeeded int
	queryRow(t, c.db.url, `SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM tool_executions WHERE tool = 'up__ask'`,
		nil, &records, &succeeded)
	if records != 1 || succeeded != 0 {
		t.Errorf("execution records of the call: %d (%d succeeded), want one, not succeeded", records, succeeded)
	}
	// The same retry again, on a new connection: answered from the
	// record, the same.
	again, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: c.lb.url + "/mcp", HTTPClient: hc,
		DisableStandaloneSSE: true, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	res, err = again.CallTool(ctx, retry)
	if err != nil || !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != told {
		t.Errorf("the retry again under the call's key gave %+v, %v: want %q again", res, err, told)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}

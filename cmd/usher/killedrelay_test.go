//lint:file-ignore SA1019 the test relays sampling, which protocol 2026-07-28 deprecates.

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// TestKilledReplicaDuringSampling: in the stateful mode, an upstream's
// tool asks the caller's model (sampling) through replica A, which holds
// the upstream's stream, and A is killed (SIGKILL) while the request waits
// for its answer. The caller's answer reaches replica B, which has no use
// for it; the caller's call ends with an error, not a result; asked again
// under the call's idempotency key through B, the call is answered from
// its execution record, one that never says it succeeded; and the tool
// ran once: nothing ran it again.
func TestKilledReplicaDuringSampling(t *testing.T) {
	t.Parallel()
	asked, switched := make(chan struct{}, 1), make(chan struct{})
	c, a, b, mcpTok, calls := startKilledPair(t, func(ctx context.Context, ss *mcp.ServerSession) (*mcp.CallToolResult, error) {
		msg, err := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "2+2?"}}}})
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "model said " + msg.Content.(*mcp.TextContent).Text}}}, nil
	}, "USHER_MCP_STATEFUL=true")

	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			// A sent the request on the call's stream: A dies, and the
			// answer goes to B.
			asked <- struct{}{}
			if err := a.cmd.Process.Kill(); err != nil {
				t.Error(err)
			}
			<-a.done
			c.lb.set(b.url)
			close(switched)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "four"}}, nil
		},
	})
	hc := &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: mcpTok})}}
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: c.lb.url + "/mcp", HTTPClient: hc,
		DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // ends only a test that would hang
	defer cancel()
	params := &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{}, Meta: mcp.Meta{"usher/idempotency_key": "ask-1"}}
	res, err := cs.CallTool(ctx, params)
	select {
	case <-asked:
	default:
		t.Fatalf("the caller was never asked; the call gave %+v, %v", res, err)
	}
	if err == nil && !res.IsError {
		t.Errorf("the call gave a result, %+v: want it to end with an error once A died", res.Content)
	}
	if ctx.Err() != nil {
		t.Errorf("the call ended only at the test's deadline: %v", err)
	}
	t.Logf("the call ended with %v", err)

	// The caller asks again under the call's key, through B: answered
	// from the execution record A began, never run again.
	<-switched
	again, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: c.lb.url + "/mcp", HTTPClient: hc,
		DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	res, err = again.CallTool(ctx, params)
	if err != nil || !res.IsError {
		t.Errorf("the call again under its key gave %+v, %v: want a tool error", res, err)
	} else {
		t.Logf("the call again under its key: %s", res.Content[0].(*mcp.TextContent).Text)
	}

	var records, succeeded int
	queryRow(t, c.db.url, `SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM tool_executions WHERE tool = 'up__ask'`,
		nil, &records, &succeeded)
	if records != 1 || succeeded != 0 {
		t.Errorf("execution records of the call: %d (%d succeeded), want one, not succeeded", records, succeeded)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}

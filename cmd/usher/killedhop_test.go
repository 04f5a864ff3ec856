package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// slowUpstream is an upstream MCP server (the Go SDK's) with one tool,
// slow, that tells entered when a call of it starts and answers only when
// released (or when its caller goes away). calls counts its executions.
type slowUpstream struct {
	url     string
	entered chan struct{}
	release func()
	calls   atomic.Int32
}

func startSlowUpstream(t *testing.T) *slowUpstream {
	t.Helper()
	released := make(chan struct{})
	var once sync.Once
	u := &slowUpstream{entered: make(chan struct{}, 16), release: func() { once.Do(func() { close(released) }) }}
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	type args struct{}
	mcp.AddTool(srv, &mcp.Tool{Name: "slow", Description: "Takes its time."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ args) (*mcp.CallToolResult, any, error) {
		u.calls.Add(1)
		u.entered <- struct{}{}
		select {
		case <-released:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slow done"}}}, nil, nil
	})
	u.url = serveUpstream(t, srv, &mcp.StreamableHTTPOptions{Stateless: true})
	// Released before the upstream closes, which waits for its calls.
	t.Cleanup(u.release)
	return u
}

// TestKilledReplicaOnTheToolsPath: replica A works a turn whose tool call
// reaches /mcp through replica B (the balancer sends A's MCP requests to
// B), and B is killed (SIGKILL) while the upstream tool runs. A asks
// again under the call's key, now through itself; the model's next request
// carries an outcome that says the call's end is unknown — never that it
// was refused — the tool ran once, and the call has one execution record,
// which says it started (or that its outcome is unknown), never that it
// succeeded.
func TestKilledReplicaOnTheToolsPath(t *testing.T) {
	t.Parallel()
	up := startSlowUpstream(t)
	ms := modeltest.NewServer(t)
	c := newReplicaCluster(t, up.url, ms)
	a := c.start()
	c.lb.set(a.url)

	// A alone claims the run; its model step waits while B starts.
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "up__slow", Arguments: json.RawMessage(`{}`)})
	ms.Reply("done")
	hold := ms.Hold()
	defer hold()
	id := createHeld(t, ms, a.url, c.alice, "take your time")
	b := c.start()
	c.lb.set(b.url)
	hold()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	select {
	case <-up.entered:
	case <-ctx.Done():
		t.Fatal("the tool call did not reach the upstream through B")
	}
	// A's retry goes through A itself; B dies with the call in flight.
	c.lb.set(a.url)
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.done

	reqs, err := ms.WaitRequests(ctx, 2)
	if err != nil {
		t.Fatalf("the model's next request did not come: %v", err)
	}
	msgs := reqs[1].Messages
	last := msgs[len(msgs)-1]
	t.Logf("the model was told: %s", last.Content)
	if last.Role != "tool" || last.ToolCallID != "call-1" || strings.Contains(strings.ToLower(last.Content), "refused") ||
		!strings.Contains(last.Content, "outcome") || strings.Contains(last.Content, "slow done") {
		t.Errorf("the model was told %s %q: want the call's outcome unknown, not refused", last.Role, last.Content)
	}
	var events []map[string]any
	testenv.WaitFor(t, 30*time.Second, func() bool {
		events = apitest.Events(t, a.url, c.alice, id)
		return countType(events, "agent.turn.end") == 1
	})
	for _, e := range events {
		if e["type"] != "message.tool" {
			continue
		}
		d := e["data"].(map[string]any)
		if d["status"] == "succeeded" || strings.Contains(strings.ToLower(d["content"].(string)), "refused") {
			t.Errorf("the run's log records the call as %v %q", d["status"], d["content"])
		}
	}

	// The tool ran once: under its key, A's MCP server answered from the
	// execution record B began, and nothing ran it again.
	up.release()
	if n := up.calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	var records, started, unknown int
	queryRow(t, c.db.url, `SELECT count(*), count(*) FILTER (WHERE status = 'started'), count(*) FILTER (WHERE status = 'outcome_unknown')
		FROM tool_executions WHERE run_id = $1`, []any{id}, &records, &started, &unknown)
	if records != 1 || started+unknown != 1 {
		t.Errorf("execution records of the call: %d (%d started, %d outcome_unknown), want one, started or outcome_unknown", records, started, unknown)
	}
}

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// elicitingUpstream is a stateful upstream whose tool "ask" elicits a
// name and sends what its request came to (the answer, or the error once
// its call is cancelled) on the returned channel, then answers with it.
func elicitingUpstream(t *testing.T) (*featureUpstream, <-chan string) {
	up := newFeatureUpstream(t, "up", true)
	got := make(chan string, 1)
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			el, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
				RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
			out := "cancelled"
			if err == nil {
				out = "answered " + el.Action
			}
			got <- out
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil
		})
	return up, got
}

// heldCallID returns the id of the one call e's catalog holds.
func heldCallID(t *testing.T, e *env) string {
	t.Helper()
	e.catalog.held.mu.Lock()
	defer e.catalog.held.mu.Unlock()
	if len(e.catalog.held.byID) != 1 {
		t.Fatalf("%d calls are held, want 1", len(e.catalog.held.byID))
	}
	for id := range e.catalog.held.byID {
		return id
	}
	return ""
}

// TestHeldCallLateReceipt: a retry whose receipt comes after its replica
// has told the caller that the call is no longer open delivers nothing.
// The retry's replica waits out its receipt (no replica holds the call it
// names), and what it published is then heard by the replica that does
// hold the caller's call, as when the notification comes late: the holder
// confirms the receipt, but the retry's replica has withdrawn the
// delivery instead of saying go, so the answer never reaches the
// upstream, whose call is cancelled as the caller was told.
func TestHeldCallLateReceipt(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			up, got := elicitingUpstream(t)
			shared := eng.open(t)
			one := heldEnv(t, up, envConfig{store: shared})
			two := heldEnv(t, up, envConfig{store: shared})
			first := call(t, one.connect(alice, "", rounds(), "2026-07-28"), "up__ask", map[string]any{}, nil)
			eid, _ := onlyRequest(t, first)
			id := heldCallID(t, one)

			updates, err := shared.Updates(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			two.catalog.handover.receiptWait = time.Millisecond
			res, err := resumeTool(t.Context(), two.catalog.handover, "elsewhere", alice, "up",
				&round{caps: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}, responses: mcp.InputResponseMap{eid: ada}})
			if err != nil || !res.IsError || text(res) != heldGoneText {
				t.Fatalf("the retry answered %+v, %v; want %q", res, err, heldGoneText)
			}
			// Everything the retry's replica published has been heard once
			// the mark that follows it is.
			mark := store.Notification{Kind: store.NotifyHeldOutcome, Session: "mark", From: "test", Text: "{}"}
			if err := shared.Publish(t.Context(), mark); err != nil {
				t.Fatal(err)
			}
			var late []store.Notification
			for n := range updates {
				if n.Kind == store.NotifyHeldInput && n.Session == "elsewhere" {
					late = append(late, n)
				}
				if n.Session == "mark" {
					break
				}
			}
			if len(late) == 0 {
				t.Fatal("the retry's replica published nothing")
			}
			var offer heldDelivery
			if err := json.Unmarshal([]byte(late[0].Text), &offer); err != nil || len(offer.Responses) == 0 {
				t.Fatalf("the first notification is %q, want the answers", late[0].Text)
			}
			for _, n := range late {
				n.Session = id // as if it had named the held call and came late
				if err := shared.Publish(t.Context(), n); err != nil {
					t.Fatal(err)
				}
			}
			for n := range updates {
				var o heldOutcome
				if n.Kind == store.NotifyHeldOutcome && n.Session == offer.Reply && json.Unmarshal([]byte(n.Text), &o) == nil && o.Received {
					break // the holder confirmed the late receipt
				}
			}
			if v := <-got; v != "cancelled" {
				t.Errorf("the upstream's request was %s after the caller was told the call is no longer open", v)
			}
		})
	}
}

// TestHeldCallCallerLeaves: a retry that stops waiting (its caller left,
// or its time ran out) while the upstream works on its answer ends the
// held call wherever the retry came: on the replica that holds the call,
// the round gives up and cancels it; on another replica, the retry is
// withdrawn and the holder cancels it the same way. Either way the retry
// ends with its outcome unknown, and the upstream's call is cancelled.
func TestHeldCallCallerLeaves(t *testing.T) {
	for _, tc := range []struct {
		name   string
		open   func(testing.TB) store.Store
		remote bool
	}{
		{"here", nil, false},
		{"other replica/SQLite", engines[0].open, true},
		{"other replica/PostgreSQL", engines[1].open, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newFeatureUpstream(t, "up", true)
			answered, cancelled := make(chan struct{}), make(chan struct{})
			up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					if _, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
						RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}); err != nil {
						return nil, err
					}
					close(answered)
					<-ctx.Done() // works until it is cancelled
					close(cancelled)
					return nil, ctx.Err()
				})
			// No round times out while the test runs.
			cfg := envConfig{catalog: func(o *CatalogOptions) { o.CallTimeout = time.Hour }}
			if tc.open != nil {
				cfg.store = tc.open(t)
			}
			one := heldEnv(t, up, cfg)
			retrying := one
			if tc.remote {
				retrying = heldEnv(t, up, cfg)
			}
			first := call(t, one.connect(alice, "", rounds(), "2026-07-28"), "up__ask", map[string]any{}, nil)
			eid, _ := onlyRequest(t, first)
			id := heldCallID(t, one)

			ctx, leave := context.WithCancel(t.Context())
			defer leave()
			go func() {
				<-answered
				leave()
			}()
			res, err := toolRound(retrying.catalog.upstreams[0].resumeHeld(ctx, alice, &round{state: heldPrefix + id,
				caps: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}, responses: mcp.InputResponseMap{eid: ada}},
				heldResult[mcp.CallToolResult], refuseTool))
			if !errors.Is(err, errOutcomeUnknown) {
				t.Errorf("the retry whose caller left answered %+v, %v; want its outcome unknown", res, err)
			}
			<-cancelled
		})
	}
}

// resumeTool resumes, through h, a held tool call another replica holds,
// as a tools/call retry does.
func resumeTool(ctx context.Context, h *handover, id, subject, upstream string, r *round) (*mcp.CallToolResult, error) {
	return toolRound(h.resume(ctx, id, subject, upstream, r, heldResult[mcp.CallToolResult], refuseTool))
}

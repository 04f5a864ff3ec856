package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// askingFeatures is a stateful upstream (a Go SDK server, protocol
// 2025-11-25) whose prompt "ask" and resource "test://ask" ask the
// caller's user for a name with a request of their own, and use it.
func askingFeatures(t *testing.T) *featureUpstream {
	up := newFeatureUpstream(t, "up", true)
	name := func(ctx context.Context, ss *mcp.ServerSession) (string, error) {
		el, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
		if err != nil {
			return "", err
		}
		n, _ := el.Content["name"].(string)
		return el.Action + " " + n, nil
	}
	up.server.AddPrompt(&mcp.Prompt{Name: "ask"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		n, err := name(ctx, req.Session)
		if err != nil {
			return nil, err
		}
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Greet " + n}}}}, nil
	})
	up.server.AddResource(&mcp.Resource{URI: "test://ask", Name: "ask", MIMEType: "text/plain"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			n, err := name(ctx, req.Session)
			if err != nil {
				return nil, err
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "for " + n}}}, nil
		})
	return up
}

// featureRules allows the asking prompt and resource.
var featureRules = map[string]Decision{"up__ask": Allow, "up__test://ask": Allow}

// TestHeldPromptRounds: an upstream of protocol 2025-11-25 whose prompt
// asks the caller's user with a request of its own gives a caller of
// 2026-07-28 a round, as a tool call's would (see TestHeldCallRounds):
// prompts/get is held open upstream, the round's input request is the
// upstream's elicitation under Usher's sealed state, and the retry
// delivers the answer and gets the prompt. Audited as a tool call's
// rounds are, under the prompt's action. A retry whose held request is
// gone is refused with an error that says so.
func TestHeldPromptRounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{rules: featureRules, upstreams: []Upstream{{Name: "up", URL: askingFeatures(t).url}}})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	first, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "up__ask"})
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" || len(first.Messages) != 0 {
		t.Fatalf("prompts/get answered %+v, want one input request", first)
	}
	var id string
	for k, ir := range first.InputRequests {
		if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "Your name?" {
			t.Fatalf("the round asks %#v, want the upstream's elicitation", ir)
		}
		id = k
	}
	res, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "up__ask",
		InputResponses: mcp.InputResponseMap{id: ada}, RequestState: first.RequestState})
	if err != nil {
		t.Fatal(err)
	}
	if res.NeedsInput() || len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != "Greet accept Ada" {
		t.Fatalf("the retry got %+v", res)
	}
	// The same state again: the held request has ended.
	_, err = cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "up__ask",
		InputResponses: mcp.InputResponseMap{id: ada}, RequestState: first.RequestState})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || rpcErr.Message != heldGoneText {
		t.Errorf("a retry of the ended request: %v, want %q", err, heldGoneText)
	}
	want := []string{
		KindDecision, KindElicitationRequested, KindInputRequired,
		KindDecision, KindRequestAnswered, KindExecuted,
		KindDecision, KindRequestAnswered, KindExecutionFailed,
	}
	if got := e.auditKinds("up__ask"); !slices.Equal(got, want) {
		t.Errorf("audit %v,\nwant %v", got, want)
	}
	for _, ev := range e.events() {
		if ev.Tool == "up__ask" && ev.Action != ActionGetPrompt {
			t.Errorf("a record of the prompt's rounds has the action %q: %+v", ev.Action, ev)
		}
	}
}

// TestHeldResourceOtherReplica: a resources/read held open on one server
// for its upstream's elicitation (see TestHeldPromptRounds) is resumed by
// its caller's retry on another server over the same store: the answer
// goes to the server that holds it, which hands the resource back.
func TestHeldResourceOtherReplica(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := askingFeatures(t)
		cfg := envConfig{rules: featureRules, upstreams: []Upstream{{Name: "up", URL: up.url}}}
		cfg.store = st
		one := newEnv(t, cfg)
		cfg.store = other
		two := newEnv(t, cfg)
		first, err := one.connect(alice, "", rounds(), "2026-07-28").ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "up__test://ask"})
		if err != nil {
			t.Fatal(err)
		}
		if !first.NeedsInput() || len(first.InputRequests) != 1 || len(first.Contents) != 0 {
			t.Fatalf("resources/read answered %+v, want one input request", first)
		}
		var id string
		for k := range first.InputRequests {
			id = k
		}
		res, err := two.connect(alice, "", rounds(), "2026-07-28").ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "up__test://ask",
			InputResponses: mcp.InputResponseMap{id: ada}, RequestState: first.RequestState})
		if err != nil {
			t.Fatal(err)
		}
		if res.NeedsInput() || len(res.Contents) != 1 || res.Contents[0].Text != "for accept Ada" || res.Contents[0].URI != "up__test://ask" {
			t.Fatalf("the retry on the other server got %+v", res)
		}
		if got := one.auditKinds("up__test://ask"); !slices.Equal(got, []string{KindDecision, KindElicitationRequested, KindInputRequired}) {
			t.Errorf("the holder's audit %v", got)
		}
		if got := two.auditKinds("up__test://ask"); !slices.Equal(got, []string{KindDecision, KindRequestAnswered, KindExecuted}) {
			t.Errorf("the other server's audit %v", got)
		}
	})
}

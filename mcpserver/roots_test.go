//lint:file-ignore SA1019 the tests pass roots on, which protocol 2026-07-28 deprecates.

package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// workRoots is the caller's answer to a roots/list.
var workRoots = &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///work", Name: "work"}}}

// rootsText is what the test upstreams' tools answer with roots.
func rootsText(r *mcp.ListRootsResult) string {
	var uris []string
	for _, root := range r.Roots {
		uris = append(uris, root.URI)
	}
	return "roots: " + strings.Join(uris, " ")
}

// noRoots is the options of a caller of protocol 2026-07-28 that runs the
// rounds itself and declares no roots (the SDK's client declares them
// unless told otherwise).
func noRoots() *mcp.ClientOptions {
	o := rounds()
	o.Capabilities = &mcp.ClientCapabilities{}
	return o
}

// rootsAsker is a stateless upstream of protocol 2026-07-28 whose tool
// "where" asks for the caller's roots with an incomplete result when the
// request declares roots, and "where_anyway" asks whatever it declares.
func rootsAsker(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "roots", Version: "1"}, nil)
	for _, always := range []bool{false, true} {
		name := "where"
		if always {
			name = "where_anyway"
		}
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if caps := req.ClientCapabilities(); !always && (caps == nil || caps.RootsV2 == nil) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no roots offered"}}}, nil
				}
				if r, ok := req.Params.InputResponses["roots"].(*mcp.ListRootsResult); ok && req.Params.RequestState == "roots-1" {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: rootsText(r)}}}, nil
				}
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}, RequestState: "roots-1"}, nil
			})
	}
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// listingUpstream is a stateful upstream (protocol 2025-11-25) whose tool
// "where" asks the caller for its roots with a roots/list request of its
// own and reports what it got.
func listingUpstream(t *testing.T) *featureUpstream {
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "where", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "roots failed: " + err.Error()}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: rootsText(r)}}}, nil
		})
	return up
}

// TestRootsInputRequest: an upstream of protocol 2026-07-28 asking for the
// caller's roots during a tool call passes the request on to a caller of
// 2026-07-28 that declared roots, audited before it goes out, and the
// retry's answer reaches the upstream; a caller that declared none is not
// offered to the upstream as having roots, and a request for them all the
// same fails the call, audited, naming roots/list.
func TestRootsInputRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{rules: map[string]Decision{"rt__where": Allow, "rt__where_anyway": Allow},
		upstreams: []Upstream{{Name: "rt", URL: rootsAsker(t)}}})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	first := call(t, cs, "rt__where", map[string]any{}, nil)
	id, ir := onlyRequest(t, first)
	if _, ok := ir.(*mcp.ListRootsParams); !ok || id != "roots" {
		t.Fatalf("the first round asks %q: %#v, want the upstream's roots/list", id, ir)
	}
	res := retry(t, cs, "rt__where", map[string]any{}, nil, mcp.InputResponseMap{"roots": workRoots}, first.RequestState)
	if res.IsError || res.NeedsInput() || text(res) != "roots: file:///work" {
		t.Fatalf("the retry answered %q (needs input %v)", text(res), res.NeedsInput())
	}
	want := []string{KindDecision, KindRootsRequested, KindInputRequired, KindDecision, KindRequestAnswered, KindExecuted}
	if got := e.auditKinds("rt__where"); !slices.Equal(got, want) {
		t.Errorf("audit %v, want %v", got, want)
	}
	for _, ev := range e.events() {
		for _, r := range ev.Reasons {
			if strings.Contains(r, "file:///work") {
				t.Errorf("an audit record holds the answer's content: %+v", ev)
			}
		}
	}

	plain := e.connect(bob, "", noRoots(), "2026-07-28")
	if got := text(call(t, plain, "rt__where", map[string]any{}, nil)); got != "no roots offered" {
		t.Errorf("the upstream saw roots offered for a caller that declared none: %q", got)
	}
	anyway := call(t, plain, "rt__where_anyway", map[string]any{}, nil)
	if !anyway.IsError || anyway.NeedsInput() || !strings.Contains(text(anyway), "roots/list") {
		t.Errorf("a roots/list the caller did not declare: %+v", anyway)
	}
	if got := e.auditKinds("rt__where_anyway"); !slices.Equal(got, []string{KindDecision, KindRequestRefused, KindExecutionFailed}) {
		t.Errorf("audit %v", got)
	}
}

// TestRootsHeldRound: an upstream of protocol 2025-11-25 that sends
// roots/list during a tool call gives a caller of 2026-07-28 that
// declared roots a round asking for them, while its call is held open;
// the retry's answer reaches the upstream's waiting request. For a caller
// that declared none, Usher's session with the upstream offers no roots
// and refuses the request rather than answer it with an empty list.
func TestRootsHeldRound(t *testing.T) {
	t.Parallel()
	up := listingUpstream(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"up__where": Allow}, upstreams: []Upstream{{Name: "up", URL: up.url}}})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	first := call(t, cs, "up__where", map[string]any{}, nil)
	id, ir := onlyRequest(t, first)
	if _, ok := ir.(*mcp.ListRootsParams); !ok {
		t.Fatalf("the first round asks %q: %#v, want the upstream's roots/list", id, ir)
	}
	res := retry(t, cs, "up__where", map[string]any{}, nil, mcp.InputResponseMap{id: workRoots}, first.RequestState)
	if res.IsError || res.NeedsInput() || text(res) != "roots: file:///work" {
		t.Fatalf("the retry answered %q (needs input %v)", text(res), res.NeedsInput())
	}
	want := []string{KindDecision, KindRootsRequested, KindInputRequired, KindDecision, KindRequestAnswered, KindExecuted}
	if got := e.auditKinds("up__where"); !slices.Equal(got, want) {
		t.Errorf("audit %v, want %v", got, want)
	}

	got := text(call(t, e.connect(bob, "", noRoots(), "2026-07-28"), "up__where", map[string]any{}, nil))
	if !strings.Contains(got, "roots failed") || !strings.Contains(got, "method not found") {
		t.Errorf("for a caller that declared no roots, the upstream's roots/list got %q", got)
	}
}

// TestRootsRelayed: in the stateful mode an upstream's roots/list during a
// tool call reaches a caller that declared roots, and its answer the
// upstream, audited without the roots; for a caller that declared none,
// the upstream's session offers none and its request is refused. An
// upstream of protocol 2026-07-28, whose input requests the SDK's client
// meets from a list of its own, is told of no roots.
func TestRootsRelayed(t *testing.T) {
	t.Parallel()
	up := listingUpstream(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"up__where": Allow, "rt__where": Allow},
		upstreams: []Upstream{{Name: "up", URL: up.url}, {Name: "rt", URL: rootsAsker(t)}},
		catalog:   func(o *CatalogOptions) { o.RelayRequests = true },
		server:    func(o *Options) { o.Stateful = true },
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	client.AddRoots(workRoots.Roots...)
	cs := e.connectClient(alice, client)
	if got := text(call(t, cs, "up__where", map[string]any{}, nil)); got != "roots: file:///work" {
		t.Errorf("the tool got %q", got)
	}
	if got := text(call(t, cs, "rt__where", map[string]any{}, nil)); got != "no roots offered" {
		t.Errorf("an upstream of 2026-07-28 was offered roots and got %q", got)
	}
	plain := e.connect(bob, "", &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}, "")
	if got := text(call(t, plain, "up__where", map[string]any{}, nil)); !strings.Contains(got, "roots failed") || !strings.Contains(got, "method not found") {
		t.Errorf("for a caller that declared no roots, the tool got %q", got)
	}
	want := []string{KindDecision, KindRootsRequested, KindRequestAnswered, KindExecuted}
	if got := e.auditKinds("up__where"); !slices.Equal(got[:min(len(got), len(want))], want) {
		t.Errorf("audit %v, want %v first", got, want)
	}
	for _, ev := range e.events() {
		if ev.Kind == KindRequestAnswered && !slices.Contains(ev.Reasons, KindRootsRequested+": answered with 1 roots") {
			t.Errorf("the answer's record %+v does not say how many roots", ev)
		}
		for _, r := range ev.Reasons {
			if strings.Contains(r, "file:///work") {
				t.Errorf("an audit record holds the answer's content: %+v", ev)
			}
		}
	}

}

// TestRootsRelayedThroughReplicas: a stateful session whose requests
// alternate between two replicas has its roots relayed on either, the
// client's answer taken by the other: the replica that restores the
// session from its record knows that the client declared roots.
func TestRootsRelayedThroughReplicas(t *testing.T) {
	t.Parallel()
	up := listingUpstream(t)
	r := newReplicas(t, envConfig{rules: map[string]Decision{"up__where": Allow}, upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog: func(o *CatalogOptions) { o.RelayRequests = true }})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	client.AddRoots(workRoots.Roots...)
	cs := r.connectAs(r.lbURL, alice, "", client, "")
	for i := range 3 {
		// A call and the client's answer are two requests: a ping
		// between calls sends the next call to the other replica.
		if err := cs.Ping(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		if got := text(call(t, cs, "up__where", map[string]any{}, nil)); got != "roots: file:///work" {
			t.Errorf("call %d: the tool got %q", i, got)
		}
	}
}

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/store"
)

// featureUpstream is an upstream MCP server over streamable HTTP with
// resources, a resource template, prompts and completions, each answer
// naming the upstream (label), so that two of them offer the same URIs and
// names. It counts what it is asked.
type featureUpstream struct {
	server *mcp.Server
	url    string

	mu    sync.Mutex
	asked map[string]int // "read <uri>", "get <name>", "complete <name>", "(un)subscribe <uri>"
	// subscribed and unsubscribed receive the URI of each
	// resources/subscribe and resources/unsubscribe.
	subscribed, unsubscribed chan string
}

func newFeatureUpstream(t *testing.T, label string, stateful bool) *featureUpstream {
	t.Helper()
	f := &featureUpstream{asked: map[string]int{}, subscribed: make(chan string, 16), unsubscribed: make(chan string, 16)}
	count := func(what string) {
		f.mu.Lock()
		f.asked[what]++
		f.mu.Unlock()
	}
	f.server = mcp.NewServer(&mcp.Implementation{Name: "features-" + label, Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			count("subscribe " + req.Params.URI)
			select {
			case f.subscribed <- req.Params.URI:
			default:
			}
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			count("unsubscribe " + req.Params.URI)
			select {
			case f.unsubscribed <- req.Params.URI:
			default:
			}
			return nil
		},
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			count("complete " + req.Params.Ref.Name + req.Params.Ref.URI)
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{req.Params.Argument.Value + "-" + label}, Total: 1,
			}}, nil
		},
	})
	text := func(uri, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: body}}}
	}
	for _, name := range []string{"static-text", "secret"} {
		uri := "test://" + name
		f.server.AddResource(&mcp.Resource{URI: uri, Name: name, MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				count("read " + req.Params.URI)
				return text(req.Params.URI, name+" of "+label), nil
			})
	}
	f.server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://items/{id}", Name: "item"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			count("read " + req.Params.URI)
			return text(req.Params.URI, "item "+strings.TrimPrefix(req.Params.URI, "test://items/")+" of "+label), nil
		})
	f.server.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			count("get " + req.Params.Name)
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Hello " + req.Params.Arguments["who"] + " from " + label}},
				{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://static-text", Text: "static"}}},
			}}, nil
		})
	f.server.AddPrompt(&mcp.Prompt{Name: "secret"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		count("get " + req.Params.Name)
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "secret"}}}}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.server }, &mcp.StreamableHTTPOptions{Stateless: !stateful})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	f.url = ts.URL + "/mcp"
	return f
}

func (f *featureUpstream) count(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[what]
}

// rpcCode returns the JSON-RPC error code of err, or 0.
func rpcCode(err error) int64 {
	var e *jsonrpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// twoFeatureUpstreams starts an endpoint federating two feature upstreams,
// a and b, which offer the same URIs and prompt names.
func twoFeatureUpstreams(t *testing.T, rules map[string]Decision) (*env, *featureUpstream, *featureUpstream) {
	a, b := newFeatureUpstream(t, "a", false), newFeatureUpstream(t, "b", false)
	e := newEnv(t, envConfig{rules: rules, upstreams: []Upstream{{Name: "a", URL: a.url}, {Name: "b", URL: b.url}}})
	return e, a, b
}

// TestGovernedOutcomeWrittenNow: the outcome of a read or a get that ends
// with no other request in progress is recorded with store.WriteNow, so
// that the next request's decision is not held behind its write (see
// store.WriteNow); the decision before it is not.
func TestGovernedOutcomeWrittenNow(t *testing.T) {
	t.Parallel()
	e, _, _ := twoFeatureUpstreams(t, map[string]Decision{"a__test://static-text": Allow, "a__greet": Allow})
	cs := e.connect(alice, "", nil, "2025-11-25")
	ctx := t.Context()
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://static-text"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"who": "Ada"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.server.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"decision now=false", "executed now=true"}
	for _, name := range []string{"a__test://static-text", "a__greet"} {
		if got := e.audit.writtenNow(name); !slices.Equal(got, want) {
			t.Errorf("%s's records = %q, want %q", name, got, want)
		}
	}
}

// TestFederatedResourcesAndPrompts: two upstreams' colliding URIs and
// prompt names are each offered under the upstream's prefix, each read and
// get goes to its own upstream, and what comes back names its URIs in
// that namespace.
func TestFederatedResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	allowAll := map[string]Decision{}
	for _, l := range []string{"a", "b"} {
		for _, n := range []string{"__test://static-text", "__test://secret", "__test://items/{id}", "__test://items/7", "__greet", "__secret"} {
			allowAll[l+n] = Allow
		}
	}
	e, a, b := twoFeatureUpstreams(t, allowAll)
	for _, version := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			cs := e.connect(alice, "", nil, version)
			ctx := t.Context()
			lr, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var uris []string
			for _, r := range lr.Resources {
				uris = append(uris, r.URI)
			}
			if want := []string{"a__test://secret", "a__test://static-text", "b__test://secret", "b__test://static-text"}; !slices.Equal(uris, want) {
				t.Errorf("resources/list = %q, want %q", uris, want)
			}
			lt, err := cs.ListResourceTemplates(ctx, nil)
			if err != nil || len(lt.ResourceTemplates) != 2 || lt.ResourceTemplates[0].URITemplate != "a__test://items/{id}" {
				t.Errorf("resources/templates/list = %+v, %v", lt, err)
			}
			lp, err := cs.ListPrompts(ctx, nil)
			if err != nil || len(lp.Prompts) != 4 || lp.Prompts[0].Name != "a__greet" || lp.Prompts[3].Name != "b__secret" {
				t.Errorf("prompts/list = %+v, %v", lp, err)
			}

			for _, u := range []string{"a", "b"} {
				rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: u + "__test://static-text"})
				if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "static-text of "+u || rr.Contents[0].URI != u+"__test://static-text" {
					t.Fatalf("read %s's static-text = %+v, %v", u, rr, err)
				}
				rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: u + "__test://items/7"})
				if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "item 7 of "+u {
					t.Fatalf("read %s's item 7 = %+v, %v", u, rr, err)
				}
				gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: u + "__greet", Arguments: map[string]string{"who": "Ada"}})
				if err != nil || len(gp.Messages) != 2 {
					t.Fatalf("get %s__greet = %+v, %v", u, gp, err)
				}
				if tc, ok := gp.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Hello Ada from "+u {
					t.Errorf("%s__greet's text = %#v", u, gp.Messages[0].Content)
				}
				if er, ok := gp.Messages[1].Content.(*mcp.EmbeddedResource); !ok || er.Resource.URI != u+"__test://static-text" {
					t.Errorf("%s__greet's embedded resource = %#v, want its URI in the upstream's namespace", u, gp.Messages[1].Content)
				}
				cr, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefPrompt, Name: u + "__greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "Ad"}})
				if err != nil || !slices.Equal(cr.Completion.Values, []string{"Ad-" + u}) {
					t.Errorf("complete %s__greet = %+v, %v", u, cr, err)
				}
				cr, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefResource, URI: u + "__test://items/{id}"}, Argument: mcp.CompleteParamsArgument{Name: "id", Value: "4"}})
				if err != nil || !slices.Equal(cr.Completion.Values, []string{"4-" + u}) {
					t.Errorf("complete %s's template = %+v, %v", u, cr, err)
				}
			}
		})
	}
	for _, f := range []*featureUpstream{a, b} {
		if n := f.count("read test://static-text"); n != 3 {
			t.Errorf("an upstream read its static-text %d times, want 3", n)
		}
		if n := f.count("complete test://items/{id}"); n != 3 {
			t.Errorf("an upstream completed its template %d times, want 3 (under its own URI)", n)
		}
	}
	// Audited like tool calls: the decision before, the outcome after.
	if got := e.auditKinds("a__test://static-text"); got[0] != "decision" || !slices.Equal(slices.Sorted(slices.Values(got)), []string{"decision", "decision", "decision", "executed", "executed", "executed"}) {
		t.Errorf("the reads' audit = %v", got)
	}
	for _, ev := range e.events() {
		if ev.Tool == "a__greet" && (ev.Action != ActionGetPrompt && ev.Action != ActionComplete || ev.Server != "a" || ev.DefinitionHash == "") {
			t.Errorf("a prompt's audit record = %+v", ev)
		}
	}
	var argsHashes []string
	for _, c := range e.policy.calls() {
		if c.Action == ActionGetPrompt {
			argsHashes = append(argsHashes, c.ArgumentsHash)
			if string(c.Arguments) != `{"who":"Ada"}` {
				t.Errorf("the prompt's arguments decided = %s", c.Arguments)
			}
		}
		if c.Tool == "a__test://items/7" && c.Template != "a__test://items/{id}" {
			t.Errorf("a template read was decided with template %q", c.Template)
		}
	}
	if len(argsHashes) != 6 {
		t.Errorf("%d prompt gets were decided, want 6", len(argsHashes))
	}
}

// TestFeaturePolicy: a denied resource or prompt is hidden from listings
// and refused, audited, without reaching the upstream; one that needs
// approval gets a pending approval and, once approved, runs; a completion
// that is not allowed answers no values; a failing audit log stops a read
// before it reaches the upstream.
func TestFeaturePolicy(t *testing.T) {
	t.Parallel()
	e, a, b := twoFeatureUpstreams(t, map[string]Decision{
		"a__test://static-text": Allow, "a__test://secret": Deny, "b__test://secret": Deny, "a__secret": Deny,
		"a__greet": Allow,
	})
	cs := e.connect(alice, "", nil, "")
	ctx := t.Context()

	lr, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lr.Resources {
		if strings.HasSuffix(r.URI, "secret") {
			t.Errorf("the denied resource %s is listed", r.URI)
		}
	}
	lp, _ := cs.ListPrompts(ctx, nil)
	for _, p := range lp.Prompts {
		if p.Name == "a__secret" {
			t.Error("the denied prompt is listed")
		}
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://secret"})
	if rpcCode(err) != CodeDenied {
		t.Errorf("reading a denied resource: %v, want code %d", err, CodeDenied)
	}
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__secret"})
	if rpcCode(err) != CodeDenied {
		t.Errorf("getting a denied prompt: %v, want code %d", err, CodeDenied)
	}
	if a.count("read test://secret") != 0 || a.count("get secret") != 0 {
		t.Error("a denied request reached the upstream")
	}
	if got := e.auditKinds("a__test://secret"); !slices.Equal(got, []string{"decision"}) {
		t.Errorf("the denied read's audit = %v", got)
	}

	// Approval: b's static-text is named by no rule.
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "b__test://static-text"})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != CodeApprovalRequired {
		t.Fatalf("reading an unreviewed resource: %v, want code %d", err, CodeApprovalRequired)
	}
	var data map[string]map[string]string
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil || data[MetaApproval]["id"] == "" || data[MetaApproval]["status"] != "pending" {
		t.Fatalf("the approval error's data = %s, %v", rpcErr.Data, err)
	}
	id := data[MetaApproval]["id"]
	ap, err := e.store.GetApproval(ctx, id)
	if err != nil || ap.Binding.Tool != "read_resource:b__test://static-text" || ap.Binding.Server != "b" {
		t.Fatalf("the pending approval = %+v, %v", ap, err)
	}
	if _, err := e.store.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "b__test://static-text"})
	if err != nil || rr.Contents[0].Text != "static-text of b" {
		t.Fatalf("the approved read = %+v, %v", rr, err)
	}
	// Consumed once: the next read needs a new approval.
	if _, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "b__test://static-text"}); rpcCode(err) != CodeApprovalRequired {
		t.Errorf("a second read on one approval: %v", err)
	}
	// The outcome is recorded after the answer, so it may follow the next
	// request's decision.
	got := e.auditKinds("b__test://static-text")
	if len(got) != 7 || !slices.Equal(got[:4], []string{"decision", "approval_required", "decision", "approval_consumed"}) ||
		!slices.Equal(slices.DeleteFunc(slices.Clone(got[4:]), func(k string) bool { return k == "executed" }), []string{"decision", "approval_required"}) {
		t.Errorf("the approved read's audit = %v", got)
	}
	// Denied: the next read is told so, once (CodeDenied, the approval in
	// the data); the one after asks anew.
	pending, err := e.store.ListApprovals(ctx, alice, store.ApprovalPending)
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending approvals = %+v, %v", pending, err)
	}
	if _, err := e.store.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: pending[0].ID, To: store.ApprovalDenied, DecidedBy: alice, Reason: "not now", Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "b__test://static-text"})
	if !errors.As(err, &rpcErr) || rpcErr.Code != CodeDenied || !strings.Contains(rpcErr.Message, "not now") ||
		json.Unmarshal(rpcErr.Data, &data) != nil || data[MetaApproval]["id"] != pending[0].ID || data[MetaApproval]["status"] != "denied" {
		t.Fatalf("the read after a denial: %v (data %s), want code %d with the denied approval", err, rpcErr.Data, CodeDenied)
	}
	if _, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "b__test://static-text"}); rpcCode(err) != CodeApprovalRequired {
		t.Errorf("the read after the denial was told: %v, want code %d", err, CodeApprovalRequired)
	}
	if n := b.count("read test://static-text"); n != 1 {
		t.Errorf("the upstream read the resource %d times, want 1", n)
	}

	// Completions: allowed for a__greet, not for b__greet (approve: no
	// values, no approval asked), refused for a__secret.
	cr, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefPrompt, Name: "b__greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "x"}})
	if err != nil || len(cr.Completion.Values) != 0 {
		t.Errorf("an unreviewed completion = %+v, %v; want no values", cr, err)
	}
	if _, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefPrompt, Name: "a__secret"}, Argument: mcp.CompleteParamsArgument{Name: "x"}}); rpcCode(err) != CodeDenied {
		t.Errorf("a denied completion: %v", err)
	}

	// No audit, no request.
	before := a.count("read test://static-text")
	e.audit.setFail(true)
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://static-text"})
	e.audit.setFail(false)
	if rpcCode(err) != jsonrpc.CodeInternalError || a.count("read test://static-text") != before {
		t.Errorf("a read with a failing audit log: %v, upstream reads %d → %d", err, before, a.count("read test://static-text"))
	}
}

// TestFeatureHostileInputs: URIs and names that name nothing offered, that
// try to leave their upstream's namespace, that are oversized or malformed,
// are refused and audited, and reach no upstream.
func TestFeatureHostileInputs(t *testing.T) {
	t.Parallel()
	e, a, b := twoFeatureUpstreams(t, map[string]Decision{})
	// A protocol without the Mcp-Name header, which would not carry some
	// of these names.
	cs := e.connect(alice, "", nil, "2025-06-18")
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		uri  string
		code int64
	}{
		{"unknown", "a__test://nope", CodeResourceNotFound},
		{"no upstream's prefix", "c__test://static-text", CodeResourceNotFound},
		{"another upstream's URI inside a's namespace", "a__b__test://static-text", CodeResourceNotFound},
		{"the upstream's own URI", "test://static-text", CodeResourceNotFound},
		{"beyond the template", "a__test://items/7/../../secret", CodeResourceNotFound},
		{"case variant", "A__test://static-text", CodeResourceNotFound},
		{"oversized", "a__test://items/" + strings.Repeat("x", 3000), jsonrpc.CodeInvalidParams},
		{"control characters", "a__test://items/1\n2", jsonrpc.CodeInvalidParams},
		{"empty", "", jsonrpc.CodeInvalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: tc.uri})
			if rpcCode(err) != tc.code {
				t.Errorf("read %.40q: %v, want code %d", tc.uri, err, tc.code)
			}
		})
	}
	for _, name := range []string{"a__nope", "greet", strings.Repeat("a", 5000), "a__greet\x00", "A__greet"} {
		if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name}); rpcCode(err) != jsonrpc.CodeInvalidParams {
			t.Errorf("get %.40q: %v, want invalid params", name, err)
		}
	}
	if _, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefPrompt, Name: "a__greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: strings.Repeat("x", 5000)}}); rpcCode(err) != jsonrpc.CodeInvalidParams {
		t.Errorf("an oversized completion: %v", err)
	}
	if _, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefResource, URI: "a__test://items/7"}, Argument: mcp.CompleteParamsArgument{Name: "id"}}); rpcCode(err) != CodeResourceNotFound {
		t.Errorf("completing a URI that is not a template: %v", err)
	}
	for _, f := range []*featureUpstream{a, b} {
		f.mu.Lock()
		for what, n := range f.asked {
			t.Errorf("an upstream was asked %q %d times", what, n)
		}
		f.mu.Unlock()
	}
	if got := e.auditKinds("a__b__test://static-text"); !slices.Equal(got, []string{KindUnknownResource}) {
		t.Errorf("the escaping read's audit = %v", got)
	}
	for _, ev := range e.events() {
		if len(ev.Tool) > maxURI {
			t.Errorf("an audit record names %d bytes", len(ev.Tool))
		}
	}
}

// TestPrefixNone: an upstream configured with prefix "none" offers its
// tools, resources, templates and prompts under their own names, beside a
// prefixed upstream offering the same ones (with prefix "b-", which keeps
// its URIs valid URIs: "b-test://..."); a name of it that lies in the
// other's namespace, or is a built-in tool's, is not offered, and a second
// upstream without a prefix is refused at start.
func TestPrefixNone(t *testing.T) {
	t.Parallel()
	ev, b := newFeatureUpstream(t, "ev", false), newFeatureUpstream(t, "b", false)
	for _, name := range []string{"echo", "b-shadow", "notes_list"} {
		ev.server.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " of ev"}}}, nil
			})
	}
	ev.server.AddResource(&mcp.Resource{URI: "b-test://static-text", Name: "shadow"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "b-test://static-text", Text: "shadow"}}}, nil
		})

	if _, err := NewCatalog(&CatalogOptions{DefinitionHash: testDefinitionHash, Runs: nil, Approvals: nil,
		Upstreams: []Upstream{{Name: "ev", URL: ev.url, Prefix: PrefixNone}, {Name: "b", URL: b.url, Prefix: PrefixNone}}}); err == nil ||
		!strings.Contains(err.Error(), "share one namespace") {
		t.Errorf("two upstreams without a prefix: %v", err)
	}

	rules := map[string]Decision{"echo": Allow, "test://static-text": Allow, "test://items/3": Allow, "greet": Allow,
		"b-test://static-text": Allow, "b-greet": Allow, "notes_list": Allow}
	e := newEnv(t, envConfig{rules: rules, upstreams: []Upstream{{Name: "ev", URL: ev.url, Prefix: PrefixNone}, {Name: "b", URL: b.url, Prefix: "b-"}}})
	cs := e.connect(alice, "", nil, "")
	ctx := t.Context()
	tools := listed(t, cs)
	if !slices.Contains(tools, "echo") || slices.Contains(tools, "b-shadow") {
		t.Errorf("tools/list = %v, want echo and not b-shadow", tools)
	}
	if res := call(t, cs, "echo", map[string]any{}, nil); text(res) != "echo of ev" {
		t.Errorf("echo = %q", text(res))
	}
	if res := call(t, cs, "notes_list", map[string]any{}, nil); strings.Contains(text(res), "of ev") {
		t.Error("the upstream's notes_list took the built-in tool's place")
	}
	for uri, want := range map[string]string{
		"test://static-text": "static-text of ev", "test://items/3": "item 3 of ev", "b-test://static-text": "static-text of b",
	} {
		rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil || rr.Contents[0].Text != want || rr.Contents[0].URI != uri {
			t.Errorf("read %s = %+v, %v; want %q", uri, rr, err, want)
		}
	}
	for name, want := range map[string]string{"greet": "Hello x from ev", "b-greet": "Hello x from b"} {
		gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"who": "x"}})
		if err != nil || gp.Messages[0].Content.(*mcp.TextContent).Text != want {
			t.Errorf("get %s = %+v, %v", name, gp, err)
		} else if er := gp.Messages[1].Content.(*mcp.EmbeddedResource); name == "greet" && er.Resource.URI != "test://static-text" {
			t.Errorf("an unprefixed prompt's resource URI = %q", er.Resource.URI)
		}
	}
	if !strings.Contains(e.logs.String(), "begins with another upstream's prefix") {
		t.Error("the shadowed names were not logged")
	}
}

// TestFeatureResultTypes: under protocol 2026-07-28 a resources/read and a
// prompts/get result say "resultType": "complete", as that revision
// requires of them; older revisions get none.
func TestFeatureResultTypes(t *testing.T) {
	t.Parallel()
	e, _, _ := twoFeatureUpstreams(t, map[string]Decision{"a__test://static-text": Allow, "a__greet": Allow})
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		rec := &bodyRecorder{base: &oauth2.Transport{Source: e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})}}
		client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true, MaxRetries: -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		for _, do := range []func() error{
			func() error {
				_, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "a__test://static-text"})
				return err
			},
			func() error {
				_, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"who": "x"}})
				return err
			},
		} {
			rec.reset()
			if err := do(); err != nil {
				t.Fatalf("%s: %v", version, err)
			}
			if got := strings.Contains(rec.body(), `"resultType":"complete"`); got != (version == "2026-07-28") {
				t.Errorf("%s: resultType in %s", version, rec.body())
			}
		}
		cs.Close()
	}
}

// events returns the audit records, once the outcomes of the calls that
// have answered are recorded.
func (e *env) events() []Event {
	e.t.Helper()
	if err := e.server.Drain(e.t.Context()); err != nil {
		e.t.Fatalf("Drain: %v", err)
	}
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	return slices.Clone(e.audit.events)
}

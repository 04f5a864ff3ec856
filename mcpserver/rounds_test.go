package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// asker is a stateless upstream of protocol 2026-07-28 that asks for
// input with incomplete results (multi round-trip requests): its tool
// "ask", prompt "greet" and resource "file:///secret" ask the caller's
// user for a name, when the request declares elicitation, and complete
// once the retry brings the answer and their own requestState; its tool
// "ask_anyway" asks whatever the caller declared, as a server must not.
type asker struct {
	url string

	mu    sync.Mutex
	calls map[string]int
}

// askerState is the asker's own requestState.
const askerState = "asker-state-1"

func newAsker(t *testing.T) *asker {
	t.Helper()
	a := &asker{calls: map[string]int{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	ask := mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "Your name?",
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}
	// answer returns the name the retry brings, or "" when the caller
	// has not answered yet.
	answer := func(responses mcp.InputResponseMap, state string) string {
		el, ok := responses["name"].(*mcp.ElicitResult)
		if !ok || state != askerState || el.Action != "accept" {
			return ""
		}
		name, _ := el.Content["name"].(string)
		return name
	}
	tool := func(name string, always bool) {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				a.count(name)
				if caps := req.ClientCapabilities(); !always && (caps == nil || caps.Elicitation == nil) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no elicitation offered"}}}, nil
				}
				if n := answer(req.Params.InputResponses, req.Params.RequestState); n != "" {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + n}}}, nil
				}
				return &mcp.CallToolResult{InputRequests: ask, RequestState: askerState}, nil
			})
	}
	tool("ask", false)
	tool("ask_anyway", true)
	needsSampling := &jsonrpc.Error{Code: CodeMissingClientCapability, Message: "This needs sampling.",
		Data: json.RawMessage(`{"requiredCapabilities":{"sampling":{}}}`)}
	srv.AddTool(&mcp.Tool{Name: "needs_sampling", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			a.count("needs_sampling")
			return nil, needsSampling
		})
	srv.AddPrompt(&mcp.Prompt{Name: "needs_sampling"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return nil, needsSampling
	})
	srv.AddPrompt(&mcp.Prompt{Name: "greet"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		a.count("greet")
		if n := answer(req.Params.InputResponses, req.Params.RequestState); n != "" {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Greet " + n}}}}, nil
		}
		return &mcp.GetPromptResult{InputRequests: ask, RequestState: askerState}, nil
	})
	srv.AddResource(&mcp.Resource{URI: "file:///secret", Name: "secret"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		a.count("secret")
		if n := answer(req.Params.InputResponses, req.Params.RequestState); n != "" {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "file:///secret", Text: "for " + n}}}, nil
		}
		return &mcp.ReadResourceResult{InputRequests: ask, RequestState: askerState}, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(ts.Close)
	a.url = ts.URL
	return a
}

func (a *asker) count(what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[what]++
}

func (a *asker) called(what string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[what]
}

// askerEnv is a stateless endpoint federating the asker as "as".
func askerEnv(t *testing.T, a *asker, rules map[string]Decision, cfg envConfig) *env {
	cfg.rules, cfg.upstreams = rules, []Upstream{{Name: "as", URL: a.url}}
	return newEnv(t, cfg)
}

// rounds is the options of a caller of protocol 2026-07-28 that offers
// elicitation and runs the rounds itself.
func rounds() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, nil // never asked: the rounds are the test's
		},
	}
}

// accepted is the caller's answer to the asker's request.
func accepted(name string) mcp.InputResponseMap {
	return mcp.InputResponseMap{"name": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}}
}

// firstRound calls tool as cs and requires an incomplete result that
// passes the asker's request on under Usher's own requestState.
func firstRound(t *testing.T, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	el, ok := res.InputRequests["name"].(*mcp.ElicitParams)
	if !res.NeedsInput() || !ok || el.Message != "Your name?" || len(res.Content) != 0 {
		t.Fatalf("the first round of %s answered %+v (needs input %v), want the asker's request for input", tool, res, res.NeedsInput())
	}
	if res.RequestState == "" || strings.Contains(res.RequestState, askerState) {
		t.Fatalf("the requestState %q is not Usher's own sealed state", res.RequestState)
	}
	return res
}

// retry sends the next round of a call.
func retry(t *testing.T, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta, responses mcp.InputResponseMap, state string) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta, InputResponses: responses, RequestState: state})
	if err != nil {
		t.Fatalf("retry %s: %v", tool, err)
	}
	return res
}

// TestInputRequestsPassThrough: an upstream's request for input during a
// tool call reaches a caller of protocol 2026-07-28 as an incomplete
// result, audited before it goes out; the caller's retry with its answer
// completes the call, which is one execution under its idempotency key,
// and the answer's content is never recorded. A caller that lets the SDK
// run the rounds gets the final result at once.
func TestInputRequestsPassThrough(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__ask": Allow}, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	meta := mcp.Meta{MetaIdempotencyKey: "ask-1"}

	first := firstRound(t, cs, "as__ask", map[string]any{}, meta)
	var key string
	for _, ev := range e.events() {
		if ev.Kind == KindDecision && ev.Tool == "as__ask" {
			key = ev.IdempotencyKey
		}
	}
	if rec, err := e.store.GetExecution(t.Context(), key); err != nil || rec.Status != store.ExecutionAwaitingInput {
		t.Fatalf("after the first round the execution is %+v, %v; want it awaiting input", rec, err)
	}
	res := retry(t, cs, "as__ask", map[string]any{}, meta, accepted("Ada"), first.RequestState)
	if res.IsError || res.NeedsInput() || text(res) != "hello Ada" {
		t.Fatalf("the retry answered %q (needs input %v)", text(res), res.NeedsInput())
	}
	want := []string{KindDecision, KindElicitationRequested, KindInputRequired, KindDecision, KindRequestAnswered, KindExecuted}
	if got := e.auditKinds("as__ask"); !slices.Equal(got, want) {
		t.Errorf("audit %v, want %v", got, want)
	}
	for _, ev := range e.events() {
		for _, r := range ev.Reasons {
			if strings.Contains(r, "Ada") {
				t.Errorf("an audit record holds the answer's content: %+v", ev)
			}
		}
		if ev.Kind == KindElicitationRequested && (ev.ArgumentsHash == "" || !slices.Contains(ev.Reasons, "input request name")) {
			t.Errorf("the input request's record names neither its hash nor its id: %+v", ev)
		}
	}
	if rec, err := e.store.GetExecution(t.Context(), key); err != nil || rec.Status != store.ExecutionSucceeded {
		t.Errorf("after the retry the execution is %+v, %v; want it succeeded", rec, err)
	}
	if n := a.called("ask"); n != 2 {
		t.Errorf("the upstream tool ran %d times, want 2 (one per round)", n)
	}
	// The retry again is the call's recorded result, not a third round.
	again := retry(t, cs, "as__ask", map[string]any{}, meta, accepted("Ada"), first.RequestState)
	if text(again) != "hello Ada" || a.called("ask") != 2 {
		t.Errorf("a repeated retry answered %q after %d runs; want the recorded result", text(again), a.called("ask"))
	}

	// The SDK's own rounds: the caller's handler answers, the call
	// completes.
	auto := e.connect(bob, "", &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Bob"}}, nil
	}}, "2026-07-28")
	if got := text(call(t, auto, "as__ask", map[string]any{}, nil)); got != "hello Bob" {
		t.Errorf("with the SDK's rounds the call answered %q", got)
	}
}

// TestInputRequestsOneApproval: a call that needs approval needs one for
// all its rounds: a round that asks for input leaves the approval unused,
// and the round that completes uses it up. Every round is decided again,
// so a call that the policy denies by the retry is denied.
func TestInputRequestsOneApproval(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	rules := map[string]Decision{}
	e := askerEnv(t, a, rules, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	meta := mcp.Meta{MetaIdempotencyKey: "ask-approved"}

	pending, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "as__ask", Arguments: map[string]any{}, Meta: meta})
	if err != nil || !pending.IsError || pending.NeedsInput() {
		t.Fatalf("the first call = %+v, %v; want approval required", pending, err)
	}
	id, _ := pending.Meta[MetaApproval].(map[string]any)["id"].(string)
	if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	status := func() store.ApprovalStatus { return approvalStatus(t, e, id) }
	first := firstRound(t, cs, "as__ask", map[string]any{}, meta)
	if got := status(); got != store.ApprovalApproved {
		t.Errorf("after the round that asked for input the approval is %s, want approved (unused)", got)
	}
	res := retry(t, cs, "as__ask", map[string]any{}, meta, accepted("Ada"), first.RequestState)
	if res.IsError || text(res) != "hello Ada" {
		t.Fatalf("the retry answered %q", text(res))
	}
	if got := status(); got != store.ApprovalConsumed {
		t.Errorf("after the completing round the approval is %s, want consumed", got)
	}
	list, err := e.store.ListApprovals(t.Context(), alice)
	if err != nil || len(list) != 1 {
		t.Errorf("approvals %v, %v; want exactly one for the whole call", list, err)
	}
	consumed := 0
	for _, ev := range e.events() {
		if ev.Kind == KindInputRequired && ev.ApprovalID != id {
			t.Errorf("the round's end names approval %q, want %q", ev.ApprovalID, id)
		}
		if ev.Kind == KindApprovalConsumed {
			consumed++
		}
	}
	if consumed != 2 {
		t.Errorf("%d approval uses recorded, want 2 (each round holds it while it runs)", consumed)
	}

	// Denied by the retry: denied, whatever the state says.
	e2 := askerEnv(t, a, map[string]Decision{"as__ask": Allow}, envConfig{})
	cs2 := e2.connect(alice, "", rounds(), "2026-07-28")
	st := firstRound(t, cs2, "as__ask", map[string]any{}, nil).RequestState
	e2.policy.mu.Lock()
	e2.policy.rules["as__ask"] = Deny
	e2.policy.mu.Unlock()
	before := a.called("ask")
	if res := retry(t, cs2, "as__ask", map[string]any{}, nil, accepted("Ada"), st); !res.IsError || !strings.Contains(text(res), "denies") {
		t.Errorf("a retry the policy denies answered %q", text(res))
	}
	if a.called("ask") != before {
		t.Error("a denied retry reached the upstream")
	}
}

// TestInputStateRefused: a retry's requestState that is altered, expired,
// another principal's, or of other arguments, and answers without a
// state, are refused with a clear error, audited, and reach no upstream.
func TestInputStateRefused(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	e := askerEnv(t, a, map[string]Decision{"as__ask": Allow}, envConfig{server: func(o *Options) { o.Now = clock }})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	st := firstRound(t, cs, "as__ask", map[string]any{}, nil).RequestState
	tampered := []byte(st)
	if mid := len(tampered) / 2; tampered[mid] == 'A' {
		tampered[mid] = 'B'
	} else {
		tampered[mid] = 'A'
	}
	cases := []struct {
		name      string
		cs        *mcp.ClientSession
		args      map[string]any
		responses mcp.InputResponseMap
		state     string
		want      string
	}{
		{"altered", cs, map[string]any{}, accepted("Ada"), string(tampered), "not valid"},
		{"not Usher's", cs, map[string]any{}, accepted("Ada"), askerState, "not valid"},
		{"another principal", e.connect(bob, "", rounds(), "2026-07-28"), map[string]any{}, accepted("Ada"), st, "another request"},
		{"other arguments", cs, map[string]any{"other": true}, accepted("Ada"), st, "another request"},
	}
	for _, tt := range cases {
		before := a.called("ask")
		refusedRetry(t, tt.name, tt.cs, tt.args, tt.responses, tt.state, tt.want)
		if a.called("ask") != before {
			t.Errorf("%s: the refused retry reached the upstream", tt.name)
		}
	}
	mu.Lock()
	now = now.Add(DefaultInputLifetime + time.Second)
	mu.Unlock()
	refusedRetry(t, "expired", cs, map[string]any{}, accepted("Ada"), st, "expired")
	refused := 0
	for _, ev := range e.events() {
		if ev.Kind == KindInputStateRefused {
			refused++
		}
	}
	if refused != len(cases)+1 {
		t.Errorf("%d refusals audited, want %d", refused, len(cases)+1)
	}
}

// refusedRetry sends a retry of as__ask whose state must be refused: a
// JSON-RPC error -32602 (Invalid params) saying want, in protocol
// 2026-07-28, never a tool's result.
func refusedRetry(t *testing.T, name string, cs *mcp.ClientSession, args any, responses mcp.InputResponseMap, state, want string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "as__ask", Arguments: args, InputResponses: responses, RequestState: state})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, want) {
		t.Errorf("%s: answered %+v, %v; want a JSON-RPC error -32602 saying %q", name, res, err, want)
	}
}

// TestInputResponseMissing: answers that come without the requestState
// that asked for them answer nothing Usher asked: the call starts over and
// the upstream asks again for the input it needs, and none of the answers
// reaches it.
func TestInputResponseMissing(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__ask": Allow}, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	firstRound(t, cs, "as__ask", map[string]any{}, nil)
	res := retry(t, cs, "as__ask", map[string]any{}, nil, accepted("Ada"), "")
	if el, ok := res.InputRequests["name"].(*mcp.ElicitParams); !res.NeedsInput() || !ok || el.Message != "Your name?" || res.RequestState == "" {
		t.Errorf("answers without a state: %+v, want the input asked for again", res)
	}
	if strings.Contains(text(res), "Ada") {
		t.Errorf("an answer without a state reached the upstream: %q", text(res))
	}
}

// TestMissingClientCapabilityPassedOn: an upstream's -32021 (a client
// capability the caller did not declare) reaches a caller of protocol
// 2026-07-28 as that JSON-RPC error, with its data, not as "the tool
// failed" (the call is audited failed), and so does a prompt's.
func TestMissingClientCapabilityPassedOn(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__needs_sampling": Allow}, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	isMissing := func(what string, err error) {
		t.Helper()
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != CodeMissingClientCapability || je.Message != "This needs sampling." ||
			!strings.Contains(string(je.Data), "requiredCapabilities") {
			t.Errorf("%s: %v; want the upstream's -32021 with its data", what, err)
		}
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "as__needs_sampling", Arguments: map[string]any{}})
	isMissing(fmt.Sprintf("tools/call (result %+v)", res), err)
	if got := e.auditKinds("as__needs_sampling"); !slices.Equal(got, []string{KindDecision, KindExecutionFailed}) {
		t.Errorf("audit %v", got)
	}
	_, err = cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__needs_sampling"})
	isMissing("prompts/get", err)
}

// TestResourceNotFoundCode: a resources/read of a URI no upstream offers
// is -32602 (Invalid params) in protocol 2026-07-28 (SEP-2164) and MCP's
// -32002 in the protocols before it.
func TestResourceNotFoundCode(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{}, envConfig{})
	for _, tt := range []struct {
		version string
		want    int64
	}{{"2026-07-28", jsonrpc.CodeInvalidParams}, {"2025-11-25", CodeResourceNotFound}} {
		cs := e.connect(alice, "", rounds(), tt.version)
		_, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "as__file:///none"})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != tt.want {
			t.Errorf("protocol %s: %v, want the code %d", tt.version, err, tt.want)
		}
	}
}

// TestInputRequestsUndeclared: a caller that does not declare
// elicitation is never passed such a request: Usher's upstream session
// declares what the caller declared (so the upstream does not ask), and a
// request the upstream sends all the same fails the call, audited.
func TestInputRequestsUndeclared(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__ask": Allow, "as__ask_anyway": Allow}, envConfig{})
	cs := e.connect(alice, "", &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}, "2026-07-28")
	if res := call(t, cs, "as__ask", map[string]any{}, nil); res.NeedsInput() || text(res) != "no elicitation offered" {
		t.Errorf("the upstream saw elicitation offered for a caller that declared none: %q", text(res))
	}
	res := call(t, cs, "as__ask_anyway", map[string]any{}, nil)
	if !res.IsError || res.NeedsInput() || len(res.InputRequests) > 0 || !strings.Contains(text(res), "elicitation/create") {
		t.Errorf("a request the caller did not declare: %+v", res)
	}
	if got := e.auditKinds("as__ask_anyway"); !slices.Equal(got, []string{KindDecision, KindRequestRefused, KindExecutionFailed}) {
		t.Errorf("audit %v", got)
	}
}

// TestInputRequestsOtherReplica: the retry taken by another replica (a
// second Server over the same store, with the same secret) completes the
// call, as one execution.
func TestInputRequestsOtherReplica(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	shared := storetest.NewSQLite(t)
	rules := map[string]Decision{"as__ask": Allow}
	one := askerEnv(t, a, rules, envConfig{store: shared})
	two := askerEnv(t, a, rules, envConfig{store: shared})
	meta := mcp.Meta{MetaIdempotencyKey: "across"}
	st := firstRound(t, one.connect(alice, "", rounds(), "2026-07-28"), "as__ask", map[string]any{}, meta).RequestState
	res := retry(t, two.connect(alice, "", rounds(), "2026-07-28"), "as__ask", map[string]any{}, meta, accepted("Ada"), st)
	if res.IsError || text(res) != "hello Ada" {
		t.Fatalf("the other replica answered %q", text(res))
	}
	if got := two.auditKinds("as__ask"); !slices.Equal(got, []string{KindDecision, KindRequestAnswered, KindExecuted}) {
		t.Errorf("the other replica's audit %v", got)
	}
}

// TestInputRequestsFeatures: prompts/get and resources/read pass their
// upstream's requests for input on as tools/call does, and complete on
// the retry; a state of one is refused for the other.
func TestInputRequestsFeatures(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__greet": Allow, "as__file:///secret": Allow}, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")

	p, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet"})
	if err != nil || !p.NeedsInput() || p.InputRequests["name"] == nil || p.RequestState == "" || p.RequestState == askerState {
		t.Fatalf("prompts/get = %+v, %v; want a request for input under Usher's state", p, err)
	}
	done, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet", InputResponses: accepted("Ada"), RequestState: p.RequestState})
	if err != nil || done.NeedsInput() || len(done.Messages) != 1 || done.Messages[0].Content.(*mcp.TextContent).Text != "Greet Ada" {
		t.Fatalf("the prompts/get retry = %+v, %v", done, err)
	}

	r, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "as__file:///secret"})
	if err != nil || !r.NeedsInput() || r.InputRequests["name"] == nil {
		t.Fatalf("resources/read = %+v, %v; want a request for input", r, err)
	}
	if _, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "as__file:///secret", InputResponses: accepted("Ada"), RequestState: p.RequestState}); err == nil || !strings.Contains(err.Error(), "another request") {
		t.Errorf("a prompt's state for a read = %v, want refused", err)
	}
	read, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "as__file:///secret", InputResponses: accepted("Ada"), RequestState: r.RequestState})
	if err != nil || read.NeedsInput() || len(read.Contents) != 1 || read.Contents[0].Text != "for Ada" || read.Contents[0].URI != "as__file:///secret" {
		t.Fatalf("the resources/read retry = %+v, %v", read, err)
	}
	if got := e.auditKinds("as__greet"); !slices.Equal(got, []string{KindDecision, KindElicitationRequested, KindInputRequired, KindDecision, KindRequestAnswered, KindExecuted}) {
		t.Errorf("prompt audit %v", got)
	}
}

// TestInputRequestsFeatureApproval: a prompt that needs approval needs one
// for all its rounds, used up by the round that completes.
func TestInputRequestsFeatureApproval(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{}, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	_, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet"})
	id := approvalOf(t, err)
	if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	status := func() store.ApprovalStatus { return approvalStatus(t, e, id) }
	p, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet"})
	if err != nil || !p.NeedsInput() {
		t.Fatalf("the first round = %+v, %v; want a request for input", p, err)
	}
	if got := status(); got != store.ApprovalApproved {
		t.Errorf("after the round that asked for input the approval is %s, want approved", got)
	}
	done, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet", InputResponses: accepted("Ada"), RequestState: p.RequestState})
	if err != nil || done.NeedsInput() || len(done.Messages) != 1 {
		t.Fatalf("the retry = %+v, %v", done, err)
	}
	if got := status(); got != store.ApprovalConsumed {
		t.Errorf("after the completing round the approval is %s, want consumed", got)
	}
}

// TestSecretRequired: a Server without a secret for its request states
// does not start.
func TestSecretRequired(t *testing.T) {
	t.Parallel()
	for _, secret := range [][]byte{nil, []byte("too short")} {
		if _, err := New(&Options{Secret: secret}); err == nil || !strings.Contains(err.Error(), "Secret") {
			t.Errorf("New with a secret of %d bytes: %v, want it refused", len(secret), err)
		}
	}
	if _, err := New(&Options{Secret: make([]byte, 32), PreviousSecrets: [][]byte{[]byte("too short")}}); err == nil || !strings.Contains(err.Error(), "previous secret 1") {
		t.Errorf("New with a previous secret of 9 bytes: %v, want it refused", err)
	}
}

// approvalOf returns the id of the approval a request's error asks for.
func approvalOf(t *testing.T, err error) string {
	t.Helper()
	var rpcErr *jsonrpc.Error
	var data map[string]map[string]string
	if !errors.As(err, &rpcErr) || rpcErr.Code != CodeApprovalRequired || json.Unmarshal(rpcErr.Data, &data) != nil || data[MetaApproval]["id"] == "" {
		t.Fatalf("the request = %v, want an approval required", err)
	}
	return data[MetaApproval]["id"]
}

// approvalStatus returns the stored status of the approval id.
func approvalStatus(t *testing.T, e *env, id string) store.ApprovalStatus {
	t.Helper()
	ap, err := e.store.GetApproval(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Status
}

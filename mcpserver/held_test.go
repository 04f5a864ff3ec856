//lint:file-ignore SA1019 the test's upstream samples, which protocol 2026-07-28 deprecates.

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// heldEnv is a stateless endpoint federating the asking upstream (a
// stateful Go SDK server, which speaks protocol 2025-11-25 and asks with
// requests of its own) as "up".
func heldEnv(t *testing.T, up *featureUpstream, cfg envConfig) *env {
	cfg.rules, cfg.upstreams = map[string]Decision{"up__ask": Allow}, []Upstream{{Name: "up", URL: up.url}}
	return newEnv(t, cfg)
}

// roundsBoth is the options of a caller of protocol 2026-07-28 that
// offers sampling and elicitation and runs the rounds itself.
func roundsBoth() *mcp.ClientOptions {
	o := rounds()
	o.CreateMessageHandler = func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		return nil, errors.New("never asked: the rounds are the test's")
	}
	return o
}

// onlyRequest returns the one input request of an incomplete result, and
// its id.
func onlyRequest(t *testing.T, res *mcp.CallToolResult) (string, mcp.InputRequest) {
	t.Helper()
	if !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" || len(res.Content) != 0 {
		t.Fatalf("answered %+v (needs input %v), want one input request", res, res.NeedsInput())
	}
	for id, ir := range res.InputRequests {
		return id, ir
	}
	return "", nil
}

var (
	four = &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "four"}}
	ada  = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
)

// TestHeldCallRounds: an upstream of protocol 2025-11-25 that samples and
// then elicits during a tool call gives a caller of 2026-07-28 one round
// for each request, as input requests under Usher's sealed state, while
// its call is held open; each retry delivers the answer to the
// upstream's waiting request, and the last gets the upstream's result.
// Each request and answer is audited without its content; the call is
// one execution. A retry whose answers name no request
// of the round is asked the same again, and the upstream waits on.
func TestHeldCallRounds(t *testing.T) {
	up := askingUpstream(t)
	e := heldEnv(t, up, envConfig{})
	cs := e.connect(alice, "", roundsBoth(), "2026-07-28")
	meta := mcp.Meta{MetaIdempotencyKey: "held-1"}

	first := call(t, cs, "up__ask", map[string]any{}, meta)
	sid, ir := onlyRequest(t, first)
	if p, ok := ir.(*mcp.CreateMessageWithToolsParams); !ok || p.MaxTokens != 10 {
		t.Fatalf("the first round asks %#v, want the upstream's sampling request", ir)
	}
	if strings.Contains(first.RequestState, heldPrefix) {
		t.Fatalf("the requestState %q shows what it holds", first.RequestState)
	}
	again := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{"bogus": four}, first.RequestState)
	if id, _ := onlyRequest(t, again); id != sid {
		t.Fatalf("a retry answering no request of the round was asked %q, want %q again", id, sid)
	}
	second := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{sid: four}, again.RequestState)
	eid, ir := onlyRequest(t, second)
	if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "Your name?" || eid == sid {
		t.Fatalf("the second round asks %q: %#v, want the upstream's elicitation", eid, ir)
	}
	// The first round's state names the sampling request, answered: its
	// answer does not answer the elicitation.
	stale := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{sid: four}, first.RequestState)
	if id, _ := onlyRequest(t, stale); id != eid {
		t.Fatalf("a stale round's retry was asked %q, want %q", id, eid)
	}
	res := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{eid: ada}, second.RequestState)
	if res.IsError || res.NeedsInput() || text(res) != "model said four; user chose accept Ada" {
		t.Fatalf("the last round answered %q (needs input %v)", text(res), res.NeedsInput())
	}
	want := []string{
		KindDecision, KindSamplingRequested, KindInputRequired,
		KindDecision, KindSamplingRequested, KindInputRequired, // the retry that answered nothing
		KindDecision, KindRequestAnswered, KindElicitationRequested, KindInputRequired,
		KindDecision, KindRequestAnswered, KindElicitationRequested, KindInputRequired, // the stale round
		KindDecision, KindRequestAnswered, KindExecuted,
	}
	if got := e.auditKinds("up__ask"); !slices.Equal(got, want) {
		t.Errorf("audit %v,\nwant %v", got, want)
	}
	for _, ev := range e.events() {
		for _, r := range ev.Reasons {
			if strings.Contains(r, "four") || strings.Contains(r, "Ada") {
				t.Errorf("an audit record holds an answer's content: %+v", ev)
			}
		}
	}
	if rec, err := e.store.GetExecution(t.Context(), keyOf(e, "up__ask")); err != nil || rec.Status != store.ExecutionSucceeded {
		t.Errorf("the execution is %+v, %v; want it succeeded", rec, err)
	}
}

// keyOf is the idempotency key the audit names for tool's decision.
func keyOf(e *env, tool string) string {
	for _, ev := range e.events() {
		if ev.Kind == KindDecision && ev.Tool == tool && ev.IdempotencyKey != "" {
			return ev.IdempotencyKey
		}
	}
	return ""
}

// TestHeldCallRefused: a held call's round is resumed only by its own
// call: an altered or foreign requestState and another principal's retry
// are refused (JSON-RPC errors), and nothing reaches the upstream, which
// goes on waiting for the caller's own answer. A caller that does not
// offer sampling is not asked for it.
func TestHeldCallRefused(t *testing.T) {
	up := askingUpstream(t)
	e := heldEnv(t, up, envConfig{})
	cs := e.connect(alice, "", roundsBoth(), "2026-07-28")
	first := call(t, cs, "up__ask", map[string]any{}, nil)
	sid, _ := onlyRequest(t, first)
	tampered := []byte(first.RequestState)
	if mid := len(tampered) / 2; tampered[mid] == 'A' {
		tampered[mid] = 'B'
	} else {
		tampered[mid] = 'A'
	}
	bob := e.connect(bob, "", roundsBoth(), "2026-07-28")
	for name, tt := range map[string]struct {
		cs    *mcp.ClientSession
		state string
		want  string
	}{
		"altered":           {cs, string(tampered), "not valid"},
		"a held call's id":  {cs, heldPrefix + "x", "not valid"},
		"another principal": {bob, first.RequestState, "another request"},
	} {
		_, err := tt.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{},
			InputResponses: mcp.InputResponseMap{sid: four}, RequestState: tt.state})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, tt.want) {
			t.Errorf("%s: %v, want a JSON-RPC error -32602 saying %q", name, err, tt.want)
		}
	}
	second := retry(t, cs, "up__ask", map[string]any{}, nil, mcp.InputResponseMap{sid: four}, first.RequestState)
	eid, _ := onlyRequest(t, second)
	res := retry(t, cs, "up__ask", map[string]any{}, nil, mcp.InputResponseMap{eid: ada}, second.RequestState)
	if text(res) != "model said four; user chose accept Ada" {
		t.Errorf("after the refusals the call answered %q", text(res))
	}

	// A caller that offers elicitation only: its upstream session offers
	// no sampling either, so the upstream does not get to ask for it, and
	// goes on.
	plain := e.connect(alice, "", rounds(), "2026-07-28")
	first = call(t, plain, "up__ask", map[string]any{}, nil)
	eid, ir := onlyRequest(t, first)
	if _, ok := ir.(*mcp.ElicitParams); !ok {
		t.Fatalf("the caller that offers elicitation only was asked %#v", ir)
	}
	res = retry(t, plain, "up__ask", map[string]any{}, nil, mcp.InputResponseMap{eid: ada}, first.RequestState)
	if got := text(res); !strings.HasPrefix(got, "sampling failed") || !strings.HasSuffix(got, "user chose accept Ada") {
		t.Errorf("without sampling offered, the tool got %q", got)
	}
	sampling := 0
	for _, k := range e.auditKinds("up__ask") {
		if k == KindSamplingRequested {
			sampling++
		}
	}
	if sampling != 1 {
		t.Errorf("%d sampling requests passed on, want 1 (the first caller's)", sampling)
	}
}

// TestHeldCallExpires: a held call whose request gets no answer within
// the input lifetime is cancelled upstream (the upstream's handler sees
// its context end) and recorded abandoned; a retry after that runs
// nothing.
func TestHeldCallExpires(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	cancelled := make(chan struct{})
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
				RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
			if err != nil {
				<-ctx.Done()
				close(cancelled)
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "answered"}}}, nil
		})
	e := heldEnv(t, up, envConfig{server: func(o *Options) { o.InputLifetime = 50 * time.Millisecond }})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	first := call(t, cs, "up__ask", map[string]any{}, nil)
	id, _ := onlyRequest(t, first)
	select {
	case <-cancelled:
	case <-t.Context().Done():
		t.Fatal("the upstream's call was never cancelled")
	}
	if got := e.auditKinds("up__ask"); !slices.Contains(got, KindInputAbandoned) {
		t.Errorf("audit %v, want the abandoned call recorded", got)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{},
		InputResponses: mcp.InputResponseMap{id: ada}, RequestState: first.RequestState})
	if err == nil && (!res.IsError || text(res) == "answered") {
		t.Errorf("a retry after the call expired answered %q", text(res))
	}
}

// TestHeldCallOtherReplica: a held call lives in the process that holds
// its upstream stream, and its caller's retries may reach any server over
// the same store: the answers are passed to the server that holds the
// call, which hands the next round and then the upstream's result back,
// each answer audited where the retry came; another principal's retry
// there is refused, nothing sent.
func TestHeldCallOtherReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(testing.TB) store.Store
	}{
		{"SQLite", storetest.NewSQLite},
		{"PostgreSQL", storetest.NewPostgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := askingUpstream(t)
			shared := tc.open(t)
			one := heldEnv(t, up, envConfig{store: shared})
			two := heldEnv(t, up, envConfig{store: shared})
			meta := mcp.Meta{MetaIdempotencyKey: "held-across"}
			first := call(t, one.connect(alice, "", roundsBoth(), "2026-07-28"), "up__ask", map[string]any{}, meta)
			sid, _ := onlyRequest(t, first)
			if res, err := two.connect(bob, "", roundsBoth(), "2026-07-28").CallTool(t.Context(), &mcp.CallToolParams{Name: "up__ask",
				Arguments: map[string]any{}, Meta: meta, InputResponses: mcp.InputResponseMap{sid: four}, RequestState: first.RequestState}); err == nil {
				t.Fatalf("another principal's retry on the other server answered %+v", res)
			}
			cs := two.connect(alice, "", roundsBoth(), "2026-07-28")
			second := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{sid: four}, first.RequestState)
			eid, ir := onlyRequest(t, second)
			if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "Your name?" {
				t.Fatalf("the second round, through the other server, asks %#v", ir)
			}
			res := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{eid: ada}, second.RequestState)
			if res.IsError || text(res) != "model said four; user chose accept Ada" {
				t.Fatalf("the other server answered %q (error %v)", text(res), res.IsError)
			}
			if got := one.auditKinds("up__ask"); !slices.Equal(got, []string{KindDecision, KindSamplingRequested, KindInputRequired}) {
				t.Errorf("the holder's audit %v", got)
			}
			want := []string{
				KindDecision, KindInputStateRefused, // bob's
				KindDecision, KindRequestAnswered, KindElicitationRequested, KindInputRequired,
				KindDecision, KindRequestAnswered, KindExecuted,
			}
			if got := two.auditKinds("up__ask"); !slices.Equal(got, want) {
				t.Errorf("the other server's audit %v,\nwant %v", got, want)
			}
			if rec, err := shared.GetExecution(t.Context(), keyOf(one, "up__ask")); err != nil || rec.Status != store.ExecutionSucceeded {
				t.Errorf("the execution is %+v, %v; want it succeeded", rec, err)
			}
		})
	}
}

// TestHeldCallUpstreamRounds: a stateful Go SDK server whose tool asks in
// rounds of its own (incomplete results) fulfils the first round with a
// request of its own, and answers the second with the tool's input
// requests in its result, without a resultType, to a session of an
// earlier protocol: both reach the caller as rounds, and the retry of the
// second brings the answer and the upstream's state to the tool.
func TestHeldCallUpstreamRounds(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	ask := func(key string) mcp.InputRequestMap {
		return mcp.InputRequestMap{key: &mcp.ElicitParams{Message: key + "?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}
	}
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			switch req.Params.RequestState {
			case "":
				if req.Params.InputResponses["first"] == nil {
					return &mcp.CallToolResult{InputRequests: ask("first"), RequestState: ""}, nil
				}
				return &mcp.CallToolResult{InputRequests: ask("second"), RequestState: "round-2"}, nil
			case "round-2":
				if el, ok := req.Params.InputResponses["second"].(*mcp.ElicitResult); ok {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "second: " + el.Content["name"].(string)}}}, nil
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "lost"}}, IsError: true}, nil
		})
	e := heldEnv(t, up, envConfig{})
	cs := e.connect(alice, "", rounds(), "2026-07-28")
	first := call(t, cs, "up__ask", map[string]any{}, nil)
	id, ir := onlyRequest(t, first)
	if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "first?" {
		t.Fatalf("the first round asks %#v", ir)
	}
	second := retry(t, cs, "up__ask", map[string]any{}, nil, mcp.InputResponseMap{id: ada}, first.RequestState)
	if p, ok := second.InputRequests["second"].(*mcp.ElicitParams); !second.NeedsInput() || !ok || p.Message != "second?" {
		t.Fatalf("the second round answered %+v", second)
	}
	res := retry(t, cs, "up__ask", map[string]any{}, nil, mcp.InputResponseMap{"second": ada}, second.RequestState)
	if text(res) != "second: Ada" {
		t.Errorf("the last round answered %q", text(res))
	}
}

// TestHeldCallHolderGone: a retry whose held call no replica holds (its
// holder stopped) gets no receipt, and is told the call is no longer
// open.
func TestHeldCallHolderGone(t *testing.T) {
	shared := storetest.NewPostgres(t)
	one := heldEnv(t, askingUpstream(t), envConfig{store: shared})
	heldEnv(t, askingUpstream(t), envConfig{store: shared}) // another replica, holding nothing
	one.catalog.handover.receiptWait = 200 * time.Millisecond
	res, err := resumeTool(t.Context(), one.catalog.handover, "gone", alice, "up", &round{responses: mcp.InputResponseMap{"input-1": four}})
	if err != nil || !res.IsError || text(res) != heldGoneText {
		t.Errorf("the retry answered %+v, %v; want %q", res, err, heldGoneText)
	}
}

// TestHeldCallHolderChecksThePrincipal: the replica that holds a call
// takes a retry passed on from another replica only from the call's own
// principal — the other replica has checked the sealed state, and the
// holder checks again — so a retry under another principal is never
// confirmed, and the call waits on for its own caller's answer.
func TestHeldCallHolderChecksThePrincipal(t *testing.T) {
	up := askingUpstream(t)
	shared := storetest.NewPostgres(t)
	one := heldEnv(t, up, envConfig{store: shared})
	two := heldEnv(t, up, envConfig{store: shared})
	meta := mcp.Meta{MetaIdempotencyKey: "held-principal"}
	cs := one.connect(alice, "", roundsBoth(), "2026-07-28")
	first := call(t, cs, "up__ask", map[string]any{}, meta)
	sid, _ := onlyRequest(t, first)
	one.catalog.held.mu.Lock()
	var id string
	for k := range one.catalog.held.byID {
		id = k
	}
	one.catalog.held.mu.Unlock()
	if id == "" {
		t.Fatal("no call is held")
	}
	two.catalog.handover.receiptWait = 500 * time.Millisecond
	res, err := resumeTool(t.Context(), two.catalog.handover, id, bob, "up", &round{responses: mcp.InputResponseMap{sid: four}})
	if err != nil || !res.IsError || text(res) != heldGoneText {
		t.Fatalf("bob's retry of alice's held call answered %+v, %v; want %q", res, err, heldGoneText)
	}
	second := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{sid: four}, first.RequestState)
	eid, ir := onlyRequest(t, second)
	if p, ok := ir.(*mcp.ElicitParams); !ok || p.Message != "Your name?" {
		t.Fatalf("alice's own retry, after bob's, asks %#v; want the second round", ir)
	}
	// The call ends before the test does: an upstream test server whose
	// tool still waits for an answer can hang in its Close.
	if res := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{eid: ada}, second.RequestState); text(res) != "model said four; user chose accept Ada" {
		t.Errorf("alice's last round answered %q", text(res))
	}
}

// TestHeldCallOneRoundForRequestsSentTogether: an upstream of protocol
// 2025-11-25 whose tool's incomplete result asks for three inputs at once
// (its SDK sends each as a request of its own) gives the caller one round
// with all three, and the retry answering them completes the call.
func TestHeldCallOneRoundForRequestsSentTogether(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if len(req.Params.InputResponses) == 3 {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "all answered"}}}, nil
			}
			return &mcp.CallToolResult{RequestState: "three", InputRequests: mcp.InputRequestMap{
				"name":  &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{"type": "object"}},
				"sum":   &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "2+2?"}}}},
				"roots": &mcp.ListRootsParams{},
			}}, nil
		})
	e := heldEnv(t, up, envConfig{})
	cs := e.connect(alice, "", roundsBoth(), "2026-07-28")
	first := call(t, cs, "up__ask", map[string]any{}, nil)
	answers := mcp.InputResponseMap{}
	for id, ir := range first.InputRequests {
		switch ir.(type) {
		case *mcp.ElicitParams:
			answers[id] = ada
		case *mcp.CreateMessageWithToolsParams:
			answers[id] = four
		case *mcp.ListRootsParams:
			answers[id] = workRoots
		}
	}
	if !first.NeedsInput() || len(first.InputRequests) != 3 || len(answers) != 3 {
		t.Fatalf("the first round asks %v, want the upstream's three requests", first.InputRequests)
	}
	if res := retry(t, cs, "up__ask", map[string]any{}, nil, answers, first.RequestState); res.NeedsInput() || text(res) != "all answered" {
		t.Errorf("the retry answered %q (needs input %v)", text(res), res.NeedsInput())
	}
}

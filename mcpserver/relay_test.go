//lint:file-ignore SA1019 the test relays sampling, which protocol 2026-07-28 deprecates.

package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
)

// askingUpstream is a stateful upstream whose tool "ask" asks the caller's
// model and then the caller's user, and reports what it got.
func askingUpstream(t *testing.T) *featureUpstream {
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var parts []string
			msg, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "2+2?"}}}})
			if err != nil {
				parts = append(parts, "sampling failed: "+err.Error())
			} else {
				parts = append(parts, "model said "+msg.Content.(*mcp.TextContent).Text)
			}
			el, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
				RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
			if err != nil {
				parts = append(parts, "elicitation failed: "+err.Error())
			} else {
				parts = append(parts, "user chose "+el.Action+" "+el.Content["name"].(string))
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(parts, "; ")}}}, nil
		})
	return up
}

// TestRelayRequests: in the stateful mode an upstream's sampling and
// elicitation requests during a tool call reach the caller that offers
// them, and its answers reach the upstream, each audited without its
// content; a caller that offers neither has them refused, audited too.
func TestRelayRequests(t *testing.T) {
	t.Parallel()
	up := askingUpstream(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"up__ask": Allow},
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.RelayRequests = true },
		server:    func(o *Options) { o.Stateful = true },
	})
	connect := func(sub string, opts *mcp.ClientOptions) *mcp.ClientSession {
		src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: sub, Audience: e.url + "/mcp"})
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect(alice, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "four"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
	})
	if got := text(call(t, cs, "up__ask", map[string]any{}, nil)); got != "model said four; user chose accept Ada" {
		t.Errorf("the tool got %q", got)
	}
	var kinds []string
	for _, ev := range e.events() {
		if ev.Tool == "up__ask" && ev.Principal == alice {
			kinds = append(kinds, ev.Kind)
			for _, r := range ev.Reasons {
				if strings.Contains(r, "four") || strings.Contains(r, "Ada") {
					t.Errorf("an audit record holds the answer's content: %+v", ev)
				}
			}
			if ev.Kind == KindSamplingRequested && ev.ArgumentsHash == "" {
				t.Errorf("the sampling record names no request hash: %+v", ev)
			}
		}
	}
	if want := []string{KindDecision, KindSamplingRequested, KindRequestAnswered, KindElicitationRequested, KindRequestAnswered}; !slices.Equal(kinds[:min(len(kinds), 5)], want) {
		t.Errorf("audit %v, want %v first", kinds, want)
	}

	plain := connect(bob, nil)
	got := text(call(t, plain, "up__ask", map[string]any{}, nil))
	if !strings.Contains(got, "sampling failed") || !strings.Contains(got, "elicitation failed") {
		t.Errorf("for a caller that offers neither, the tool got %q", got)
	}
	refused := 0
	for _, ev := range e.events() {
		if ev.Principal == bob && ev.Kind == KindRequestRefused {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d refusals audited, want 2", refused)
	}
}

// TestNoRelayByDefault: without RelayRequests an upstream's session offers
// neither sampling nor elicitation.
func TestNoRelayByDefault(t *testing.T) {
	t.Parallel()
	up := askingUpstream(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"up__ask": Allow}, upstreams: []Upstream{{Name: "up", URL: up.url}},
		server: func(o *Options) { o.Stateful = true }})
	cs := e.connect(alice, "", &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			t.Error("the caller was asked for sampling")
			return nil, nil
		},
	}, "")
	if got := text(call(t, cs, "up__ask", map[string]any{}, nil)); !strings.Contains(got, "sampling failed") {
		t.Errorf("the tool got %q", got)
	}
}

// TestUpstreamInputRequests: an upstream of protocol 2026-07-28 asks for
// input with an incomplete result (MRTR: inputRequests, requestState).
// With a stateful caller of an earlier protocol that offers elicitation,
// Usher's upstream session fulfils it by relaying the request to the
// caller (audited) and retries, so the call completes; a stateless caller
// of 2026-07-28 is passed the input requests (see TestInputRequestsPassThrough),
// and its SDK's retry completes the call.
func TestUpstreamInputRequests(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.InputResponses["name"] != nil && req.Params.RequestState == "state-1" {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "thanks"}}}, nil
			}
			return &mcp.CallToolResult{RequestState: "state-1", InputRequests: mcp.InputRequestMap{
				"name": &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{"type": "object"}},
			}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(ts.Close)
	answer := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}, nil
	}}
	for _, stateful := range []bool{true, false} {
		e := newEnv(t, envConfig{rules: map[string]Decision{"as__ask": Allow}, upstreams: []Upstream{{Name: "as", URL: ts.URL}},
			catalog: func(o *CatalogOptions) { o.RelayRequests = stateful },
			server:  func(o *Options) { o.Stateful = stateful }})
		version := "2026-07-28"
		if stateful {
			version = "2025-11-25"
		}
		res := call(t, e.connect(alice, "", answer, version), "as__ask", map[string]any{}, nil)
		kinds := e.auditKinds("as__ask")
		switch {
		case stateful && (res.IsError || text(res) != "thanks" ||
			!slices.Equal(kinds, []string{KindDecision, KindElicitationRequested, KindRequestAnswered, KindExecuted})):
			t.Errorf("stateful: %q, audit %v", text(res), kinds)
		case !stateful && (res.IsError || text(res) != "thanks" || !slices.Equal(kinds,
			[]string{KindDecision, KindElicitationRequested, KindInputRequired, KindDecision, KindRequestAnswered, KindExecuted})):
			t.Errorf("stateless: %q, audit %v", text(res), kinds)
		}
	}
}

// TestRelayedAnswerRefused: the answer to a request relayed to the caller
// (here an elicitation, through two replicas) is taken only from the
// session's own principal, under the session's sealed handle, with the
// sealed request id the session sent. While the request waits, another
// principal's answers under that handle, with any request id, and answers
// under an altered handle are refused (404) on either replica; the
// session's own principal's answers with a request id the session did not
// send (its plain number), one sealed for another session of hers, for
// another principal, or expired, are refused with a JSON-RPC error
// (400, -32600) on either replica, each audited with its reason; and the
// upstream gets the caller's own answer. Each refused answer names the
// request that waits, so without its check the upstream would get it. The
// sealed id the caller answered with expires after InputLifetime; once
// the session has expired, even its own principal's answer is refused.
func TestRelayedAnswerRefused(t *testing.T) {
	t.Parallel()
	up := askingUpstream(t)
	r := newReplicas(t, envConfig{rules: map[string]Decision{"up__ask": Allow}, upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog: func(o *CatalogOptions) { o.RelayRequests = true }})
	var skew atomic.Int64
	for _, s := range []*Server{r.server, r.two} { // before any request reads the clock
		s.opts.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}
	var cs *mcp.ClientSession
	var asked atomic.Int32
	answer := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"action":"accept","content":{"name":"Mallory"}}}`
	}
	// refused posts the answers under alice's own handle and checks that
	// each is refused with a JSON-RPC error on either replica.
	refused := func(what string, ids []string) {
		for _, id := range ids {
			for _, base := range []string{r.oneURL, r.twoURL} {
				code, body := rawPost(t, base, r.token(alice, ""), cs.ID(), answer(id))
				if code != http.StatusBadRequest || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, "not delivered") {
					t.Errorf("%s: %d %s, want 400 and a JSON-RPC error", what, code, body)
				}
			}
		}
	}
	// sealed returns the request ids 0 to 3 sealed as d would seal them,
	// for session and principal, valid until expires.
	sealed := func(session, principal string, expires time.Time) []string {
		var out []string
		for id := range 4 {
			v, err := r.server.durable.ids.Seal(relayedID{Session: session, Principal: principal, ID: json.RawMessage(strconv.Itoa(id))}, expires)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.Quote(v))
		}
		return out
	}
	forge := func() {
		handle := cs.ID()
		altered := []byte(handle)
		altered[len(altered)/2] ^= 1
		bobTok, aliceTok := r.token("bob", ""), r.token(alice, "")
		for id := range 4 {
			answer := answer(strconv.Itoa(id))
			for _, base := range []string{r.oneURL, r.twoURL} {
				if code, body := rawPost(t, base, bobTok, handle, answer); code != http.StatusNotFound {
					t.Errorf("another principal's answer (id %d): %d %s, want 404", id, code, body)
				}
				if code, body := rawPost(t, base, aliceTok, string(altered), answer); code != http.StatusNotFound {
					t.Errorf("an answer under an altered handle (id %d): %d %s, want 404", id, code, body)
				}
			}
		}
		session, _ := r.server.durable.open(handle)
		later := time.Now().Add(time.Hour)
		refused("the session's own request id, unsealed", []string{"0", "1", "2", "3", `"1"`})
		refused("a request id sealed for another session", sealed("another-session", alice, later))
		refused("a request id sealed for another principal", sealed(session, "bob", later))
		refused("an expired request id", sealed(session, alice, time.Now().Add(-time.Second)))
	}
	var answered atomic.Value // the body of the caller's answer
	cs = r.connectWith(t, r.lbURL, alice, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "four"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if asked.Add(1) == 1 {
				forge()
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
	}, func(body []byte) {
		if bytes.Contains(body, []byte(`"Ada"`)) {
			answered.Store(body)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // ends only a test that would hang
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{}})
	if err != nil || res.IsError || text(res) != "model said four; user chose accept Ada" || asked.Load() != 1 {
		t.Fatalf("the call = %+v, %v (asked %d times); want the caller's own answer", res, err, asked.Load())
	}
	// The id the caller answered with is sealed, and expires.
	var m struct{ ID json.RawMessage }
	if b, _ := answered.Load().([]byte); json.Unmarshal(b, &m) != nil || !strings.HasPrefix(string(m.ID), `"`) || len(m.ID) < 40 {
		t.Fatalf("the caller answered %q, want it under a sealed request id", b)
	}
	if code, body := rawPost(t, r.twoURL, r.token(alice, ""), cs.ID(), answer(string(m.ID))); code != http.StatusAccepted {
		t.Errorf("the caller's answer again, in time: %d %s, want 202 (taken, and ignored)", code, body)
	}
	skew.Store(int64(r.server.opts.InputLifetime + time.Minute))
	refused("the caller's request id, expired", []string{string(m.ID)})

	skew.Store(int64(DefaultSessionLifetime + time.Minute))
	for _, base := range []string{r.oneURL, r.twoURL} {
		if code, body := rawPost(t, base, r.token(alice, ""), cs.ID(), answer("1")); code != http.StatusNotFound || !strings.Contains(body, "session_not_found") {
			t.Errorf("an answer in the expired session: %d %s, want 404 session_not_found", code, body)
		}
	}
	reasons := map[string]int{}
	for _, ev := range r.events() {
		if ev.Kind == KindAnswerRefused && ev.Principal == alice && len(ev.Reasons) == 1 {
			reasons[ev.Reasons[0]]++
		}
	}
	if want := map[string]int{
		"the request id is not one Usher sealed, or it has expired": 20,
		"the request id was sent to another session":                8,
		"the request id was sent to another principal":              8,
	}; !maps.Equal(reasons, want) {
		t.Errorf("refusals audited %v, want %v", reasons, want)
	}
}

// titledMulti is an elicitation schema of the form the Go SDK's
// conformance server sends for a titled multi-select: items with both a
// type and anyOf. The SDK's client refuses it ("items must specify enum
// for untitled enums"); a client that renders it gets it through Usher.
const titledMulti = `{"type":"object","properties":{"colors":{"type":"array","items":{"type":"string","anyOf":[{"const":"r","title":"Red"},{"const":"g","title":"Green"}]}}}}`

// TestElicitationSchemaPassedOn: an upstream's elicitation reaches the
// caller with its requested schema as the upstream sent it, relayed to a
// stateful caller and as an input request of a held call, even where the
// SDK's client would refuse the schema; the caller's answer reaches the
// upstream. Without upstreamRequests the upstream's request is refused
// before the caller is asked.
func TestElicitationSchemaPassedOn(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			el, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Colours?", RequestedSchema: json.RawMessage(titledMulti)})
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "user chose " + el.Action}}}, nil
		})
	sameSchema := func(t *testing.T, got any) {
		t.Helper()
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(b, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(titledMulti), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("the caller was asked with the schema %s, want %s", b, titledMulti)
		}
	}

	t.Run("relayed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envConfig{
			rules:     map[string]Decision{"up__ask": Allow},
			upstreams: []Upstream{{Name: "up", URL: up.url}},
			catalog:   func(o *CatalogOptions) { o.RelayRequests = true },
			server:    func(o *Options) { o.Stateful = true },
		})
		// The caller's own SDK would refuse the schema as Usher's did: the
		// test's caller reads the request before its SDK does, as a client
		// that renders the schema would.
		var asked atomic.Pointer[mcp.ElicitParams]
		client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return nil, errors.New("never asked: the middleware answers")
			},
		})
		client.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if r, ok := req.(*mcp.ElicitRequest); ok {
					asked.Store(r.Params)
					return &mcp.ElicitResult{Action: "decline"}, nil
				}
				return next(ctx, method, req)
			}
		})
		cs := e.connectClient(alice, client)
		if got := text(call(t, cs, "up__ask", map[string]any{}, nil)); got != "user chose decline" {
			t.Errorf("the tool got %q", got)
		}
		p := asked.Load()
		if p == nil {
			t.Fatal("the caller was not asked")
		}
		sameSchema(t, p.RequestedSchema)
	})

	t.Run("held", func(t *testing.T) {
		t.Parallel()
		e := heldEnv(t, up, envConfig{})
		cs := e.connect(alice, "", rounds(), "2026-07-28")
		meta := mcp.Meta{MetaIdempotencyKey: "colours-1"}
		first := call(t, cs, "up__ask", map[string]any{}, meta)
		id, ir := onlyRequest(t, first)
		p, ok := ir.(*mcp.ElicitParams)
		if !ok {
			t.Fatalf("the round asks %#v, want the upstream's elicitation", ir)
		}
		sameSchema(t, p.RequestedSchema)
		res := retry(t, cs, "up__ask", map[string]any{}, meta, mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "decline"}}, first.RequestState)
		if res.IsError || res.NeedsInput() || text(res) != "user chose decline" {
			t.Errorf("the last round answered %q (needs input %v)", text(res), res.NeedsInput())
		}
	})
}

// TestRelayRequestsDuringPromptAndRead: in the stateful mode an
// upstream's elicitation during a prompts/get or a resources/read reaches
// the caller that offers it, as during a tool call (TestRelayRequests),
// audited under the request's action, and its answer reaches the
// upstream; one server, and two behind a balancer that alternates every
// request, so that the answer reaches the other one.
func TestRelayRequestsDuringPromptAndRead(t *testing.T) {
	t.Parallel()
	up := askingFeatures(t)
	cfg := envConfig{rules: featureRules, upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog: func(o *CatalogOptions) { o.RelayRequests = true }}
	answer := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return ada, nil
	}}
	check := func(t *testing.T, e *env, cs *mcp.ClientSession) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__ask"})
		if err != nil || len(pr.Messages) != 1 || pr.Messages[0].Content.(*mcp.TextContent).Text != "Greet accept Ada" {
			t.Fatalf("prompts/get = %+v, %v; want the greeting of the name the caller gave", pr, err)
		}
		rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "up__test://ask"})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "for accept Ada" {
			t.Fatalf("resources/read = %+v, %v; want the text for the name the caller gave", rr, err)
		}
		want := []string{KindDecision, KindElicitationRequested, KindRequestAnswered, KindExecuted}
		for name, action := range map[string]Action{"up__ask": ActionGetPrompt, "up__test://ask": ActionReadResource} {
			if got := e.auditKinds(name); !slices.Equal(got, want) {
				t.Errorf("%s: audit %v, want %v", name, got, want)
			}
			for _, ev := range e.events() {
				if ev.Tool == name && ev.Action != action {
					t.Errorf("%s: a record has the action %q, want %q: %+v", name, ev.Action, action, ev)
				}
			}
		}
	}
	t.Run("one server", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.server = func(o *Options) { o.Stateful = true }
		e := newEnv(t, c)
		check(t, e, e.connect(alice, "", answer, ""))
	})
	t.Run("two servers", func(t *testing.T) {
		t.Parallel()
		r := newReplicas(t, cfg)
		check(t, r.env, r.connectLB(t, alice, answer))
	})
}

// TestUpstreamInputRequestsDuringPromptAndRead: an upstream of protocol
// 2026-07-28 that asks for input with an incomplete result of a
// prompts/get or a resources/read has it met, for a stateful caller of an
// earlier protocol that offers elicitation, by Usher's upstream session,
// which relays the request to the caller and retries (as for a tool call,
// TestUpstreamInputRequests).
func TestUpstreamInputRequestsDuringPromptAndRead(t *testing.T) {
	t.Parallel()
	a := newAsker(t)
	e := askerEnv(t, a, map[string]Decision{"as__greet": Allow, "as__file:///secret": Allow}, envConfig{
		catalog: func(o *CatalogOptions) { o.RelayRequests = true },
		server:  func(o *Options) { o.Stateful = true },
	})
	cs := e.connect(alice, "", &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}, nil
	}}, "")
	pr, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "as__greet"})
	if err != nil || len(pr.Messages) != 1 || pr.Messages[0].Content.(*mcp.TextContent).Text != "Greet Alice" {
		t.Errorf("prompts/get = %+v, %v; want the greeting of the name the caller gave", pr, err)
	}
	rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "as__file:///secret"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "for Alice" {
		t.Errorf("resources/read = %+v, %v; want the text for the name the caller gave", rr, err)
	}
	want := []string{KindDecision, KindElicitationRequested, KindRequestAnswered, KindExecuted}
	for _, name := range []string{"as__greet", "as__file:///secret"} {
		if got := e.auditKinds(name); !slices.Equal(got, want) {
			t.Errorf("%s: audit %v, want %v", name, got, want)
		}
	}
}

package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
	cedarpolicy "github.com/usherhq/usher/policy"
)

// lockedDecider decides with a real policy and tool lock, as cmd/usher
// does.
func lockedDecider(t *testing.T, src string, lock *cedarpolicy.Lock) Decider {
	t.Helper()
	p, err := cedarpolicy.Parse("test.cedar", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return DeciderFunc(func(_ context.Context, c Call) (Verdict, error) {
		req := cedarpolicy.Request{Principal: cedarpolicy.Principal{ID: c.Principal, Tenant: c.Tenant}, Action: cedarpolicy.Action(c.Action), Arguments: c.Arguments}
		switch c.Action {
		case "", ActionCallTool:
			req.Tool = cedarpolicy.Tool{Name: c.Tool, Server: c.Server, DefinitionHash: c.DefinitionHash, Reviewed: lock.Reviewed(c.Tool, c.DefinitionHash)}
		case ActionGetPrompt:
			req.Prompt = cedarpolicy.Prompt{Name: c.Tool, Server: c.Server}
		default:
			req.Resource = cedarpolicy.Resource{URI: c.Tool, Server: c.Server, Template: c.Template}
		}
		decide := p.Decide
		if c.Listing {
			decide = p.DecideListing
		}
		d := decide(req)
		v := Verdict{Decision: Decision(d.Outcome.String()), PolicyIDs: d.PolicyIDs, PolicyHash: d.PolicyHash, Reasons: d.Reasons}
		return v, nil
	})
}

func policyHash(d ToolDefinition) (string, error) {
	return cedarpolicy.DefinitionHash(cedarpolicy.ToolDefinition(d))
}

// TestUpstreamListChanged: when an upstream says its tools, prompts or
// resources changed, the catalog lists it again at once (not after the
// refresh interval, here an hour), a stateful caller is told within a
// second, and a new tool, which the tool lock does not know, needs a
// person's approval even under a policy that allows every tool of its
// upstream. It allows a second, so it does not run in parallel.
func TestUpstreamListChanged(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echoed"}}}, nil
		})
	echo, err := policyHash(ToolDefinition{Name: "up__echo", InputSchema: json.RawMessage(`{"type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	decider := lockedDecider(t, `
@id("allow-up-tools") @outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource) when { resource.server == "up" };
`, &cedarpolicy.Lock{Tools: map[string]string{"up__echo": echo}})
	e := newEnv(t, envConfig{
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.RefreshInterval = time.Hour; o.DefinitionHash = policyHash },
		server:    func(o *Options) { o.Stateful = true; o.Decider = decider },
	})

	changed := make(chan string, 16)
	src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { changed <- "tools" },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { changed <- "prompts" },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changed <- "resources" },
	})
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	caps := cs.InitializeResult().Capabilities
	if !caps.Tools.ListChanged || !caps.Prompts.ListChanged || !caps.Resources.ListChanged {
		t.Fatalf("capabilities %+v %+v %+v do not announce listChanged", caps.Tools, caps.Prompts, caps.Resources)
	}
	if got := listed(t, cs); !slices.Contains(got, "up__echo") || slices.Contains(got, "up__fresh") {
		t.Fatalf("tools/list = %v", got)
	}
	if res := call(t, cs, "up__echo", map[string]any{}, nil); res.IsError {
		t.Fatalf("the reviewed tool = %s", text(res))
	}

	await := func(what string) {
		t.Helper()
		deadline := time.After(time.Second)
		for {
			select {
			case got := <-changed:
				if got == what {
					return
				}
			case <-deadline:
				t.Fatalf("no %s/list_changed within 1 s", what)
			}
		}
	}
	start := time.Now()
	up.server.AddTool(&mcp.Tool{Name: "fresh", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "fresh ran"}}}, nil
		})
	await("tools")
	t.Logf("tools/list_changed reached the caller %s after the upstream's change", time.Since(start))
	if got := listed(t, cs); !slices.Contains(got, "up__fresh") {
		t.Fatalf("tools/list after the change = %v", got)
	}
	res := call(t, cs, "up__fresh", map[string]any{}, nil)
	if !res.IsError || res.Meta[MetaApproval] == nil || !strings.Contains(text(res), "approval") {
		t.Errorf("the new, unreviewed tool = %s %v; want an approval request", text(res), res.Meta)
	}

	up.server.AddPrompt(&mcp.Prompt{Name: "later"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{}}, nil
	})
	await("prompts")
	lp, err := cs.ListPrompts(t.Context(), nil)
	if err != nil || !slices.ContainsFunc(lp.Prompts, func(p *mcp.Prompt) bool { return p.Name == "up__later" }) {
		t.Errorf("prompts/list after the change = %+v, %v", lp, err)
	}
	up.server.AddResource(&mcp.Resource{URI: "test://later", Name: "later"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	await("resources")

	// A change of nothing Usher shows is not announced.
	up.server.RemoveTools("no-such-tool")
	select {
	case got := <-changed:
		t.Errorf("an announcement without a change: %s", got)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestListChangedStateless: a stateless endpoint announces no listChanged
// but still lists an upstream again as soon as it says its list changed.
func TestListChangedStateless(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	// With a tool from the start, so that it declares the tools capability.
	up.server.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	e := newEnv(t, envConfig{
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.RefreshInterval = time.Hour },
	})
	cs := e.connect(alice, "", nil, "2025-11-25")
	if caps := cs.InitializeResult().Capabilities; caps.Tools.ListChanged || caps.Prompts.ListChanged {
		t.Errorf("a stateless endpoint announces listChanged: %+v", caps)
	}
	if got := listed(t, cs); slices.Contains(got, "up__fresh") {
		t.Fatal("listed before it exists")
	}
	up.server.AddTool(&mcp.Tool{Name: "fresh", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	deadline := time.Now().Add(2 * time.Second)
	for !slices.Contains(listed(t, cs), "up__fresh") {
		if time.Now().After(deadline) {
			t.Fatal("the new tool is not listed 2 s after the upstream announced it")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatefulStreamsResumable: a stateful endpoint's response streams
// carry event ids and start with a priming event, so that a client can
// resume one (Last-Event-ID); a stateless one's carry none.
func TestStatefulStreamsResumable(t *testing.T) {
	t.Parallel()
	for _, stateful := range []bool{true, false} {
		e := newEnv(t, envConfig{server: func(o *Options) { o.Stateful = stateful }})
		h := bearer(e.token(alice, ""))
		// Priming events are of protocol 2025-11-25 and later.
		resp := e.post(t, "/mcp", h, strings.Replace(initialize, "2025-06-18", "2025-11-25", 1))
		readAll(t, resp.Body)
		resp.Body.Close()
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			h.Set("Mcp-Session-Id", sid)
		}
		h.Set("Mcp-Protocol-Version", "2025-11-25")
		resp = e.post(t, "/mcp", h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resp.Body.Close()
		resp = e.post(t, "/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notes_list","arguments":{}}}`)
		body := readAll(t, resp.Body)
		resp.Body.Close()
		resumable := strings.Contains(body, "\nid: ") || strings.HasPrefix(body, "id: ")
		if resumable != stateful || strings.HasPrefix(body, "event: prime\nid: ") != stateful {
			t.Errorf("stateful %v: the response stream %q", stateful, body)
		}
	}
}

// TestListChangedFlood: an upstream that floods Usher with list_changed
// notifications gets a few listings, not one each.
func TestListChangedFlood(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	var lists atomic.Int32
	up.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "prompts/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	e := newEnv(t, envConfig{upstreams: []Upstream{{Name: "up", URL: up.url}}, catalog: func(o *CatalogOptions) { o.RefreshInterval = time.Hour }})
	if _, err := e.catalog.Definitions(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := lists.Load()
	for range 200 {
		e.catalog.changed()
	}
	// Until the catalog is done with them.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.catalog.changeMu.Lock()
		busy := e.catalog.refreshing
		e.catalog.changeMu.Unlock()
		if !busy || time.Now().After(deadline) {
			break
		}
	}
	if n := lists.Load() - before; n < 1 || n > 3 {
		t.Errorf("200 changes caused %d listings, want 1 to 3", n)
	}
}

// TestResourceSubscriptions: in the stateful mode a caller subscribes to
// an upstream's resource under its exposed URI, Usher subscribes upstream
// once, and an update reaches the subscribed caller, under the exposed
// URI, within a second; a resource the policy hides cannot be subscribed
// to, and a stateless endpoint offers no subscriptions. It allows a
// second, so it does not run in parallel.
func TestResourceSubscriptions(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"up__test://secret": Deny},
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		server:    func(o *Options) { o.Stateful = true },
	})
	updated := make(chan string, 4)
	src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if !cs.InitializeResult().Capabilities.Resources.Subscribe {
		t.Fatal("the stateful endpoint does not offer subscriptions")
	}
	for range 2 {
		if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://static-text"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := up.count("subscribe test://static-text"); n != 1 {
		t.Errorf("Usher subscribed upstream %d times, want once", n)
	}
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://secret"}); rpcCode(err) != CodeDenied {
		t.Errorf("subscribing to a denied resource: %v", err)
	}
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://nope"}); rpcCode(err) != CodeResourceNotFound {
		t.Errorf("subscribing to an unknown resource: %v", err)
	}
	if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://static-text"}); err != nil {
		t.Fatal(err)
	}
	select {
	case uri := <-updated:
		if uri != "up__test://static-text" {
			t.Errorf("the update names %q", uri)
		}
	case <-time.After(time.Second):
		t.Fatal("no notifications/resources/updated within 1 s")
	}
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: "up__test://static-text"}); err != nil {
		t.Fatal(err)
	}
	if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://static-text"}); err != nil {
		t.Fatal(err)
	}
	select {
	case uri := <-updated:
		t.Errorf("an update after unsubscribing: %s", uri)
	case <-time.After(200 * time.Millisecond):
	}
	if got := e.auditKinds("up__test://static-text"); !slices.Equal(got, []string{KindSubscribed, KindSubscribed}) {
		t.Errorf("the subscriptions' audit = %v", got)
	}

	stateless := newEnv(t, envConfig{upstreams: []Upstream{{Name: "up", URL: up.url}}})
	scs := stateless.connect(alice, "", nil, "2025-11-25")
	if err := scs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://static-text"}); err == nil {
		t.Error("a stateless endpoint took a subscription")
	}
}

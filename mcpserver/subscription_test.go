package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
)

// TestSubscriptionsPerCaller: two callers' sessions (the Go SDK's client)
// subscribe to one upstream resource; Usher subscribes upstream once,
// passes an update to both, and to a caller whom the policy no longer
// shows the resource, none; it stays subscribed upstream while one session
// is, unsubscribes upstream when the last one unsubscribes or ends, and
// subscribes again for the next subscriber.
func TestSubscriptionsPerCaller(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	const uri, item = "up__test://static-text", "up__test://items/1"
	var denyBob atomic.Bool
	bobAsked := make(chan struct{})
	var askedOnce sync.Once
	decider := DeciderFunc(func(_ context.Context, c Call) (Verdict, error) {
		if c.Action == ActionReadResource && c.Tool == uri && c.Principal == bob && denyBob.Load() {
			askedOnce.Do(func() { close(bobAsked) })
			return Verdict{Decision: Deny, PolicyHash: "h"}, nil
		}
		return Verdict{Decision: Allow, PolicyHash: "h"}, nil
	})
	e := newEnv(t, envConfig{
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		server:    func(o *Options) { o.Stateful = true; o.Decider = decider },
	})
	type session struct {
		cs      *mcp.ClientSession
		updated chan string
	}
	open := func(sub string) session {
		s := session{updated: make(chan string, 8)}
		src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: sub, Audience: e.url + "/mcp"})
		var err error
		s.cs, err = mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { s.updated <- req.Params.URI },
		}).Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, MaxRetries: -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.cs.Close() })
		if err := s.cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	nextOf := func(s session, who, want string) {
		t.Helper()
		select {
		case got := <-s.updated:
			if got != want {
				t.Errorf("%s's update names %q, want %q", who, got, want)
			}
		case <-t.Context().Done():
			t.Fatalf("%s got no update", who)
		}
	}
	next := func(s session, who string) { t.Helper(); nextOf(s, who, uri) }
	updateOf := func(orig string) {
		t.Helper()
		if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: orig}); err != nil {
			t.Fatal(err)
		}
	}
	update := func() { t.Helper(); updateOf("test://static-text") }
	a, b := open(alice), open(bob)
	if n := up.count("subscribe test://static-text"); n != 1 {
		t.Errorf("Usher subscribed upstream %d times for two sessions, want once", n)
	}
	update()
	next(a, "alice")
	next(b, "bob")

	// The policy no longer shows the resource to Bob: the next update
	// reaches Alice only. Bob's stream carries his notifications in
	// order, so the first he gets after it is of another resource, one
	// he may see, updated after the policy was asked about him.
	if err := b.cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: item}); err != nil {
		t.Fatal(err)
	}
	denyBob.Store(true)
	update()
	next(a, "alice")
	<-bobAsked
	updateOf("test://items/1")
	nextOf(b, "bob", item)
	denyBob.Store(false)
	if err := b.cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: item}); err != nil {
		t.Fatal(err)
	}
	if n := up.count("unsubscribe test://items/1"); n != 1 {
		t.Errorf("Usher unsubscribed upstream from the item %d times after its only subscriber left, want once", n)
	}
	<-up.unsubscribed

	// Alice unsubscribes: Bob still is, so Usher stays subscribed.
	if err := a.cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n := up.count("unsubscribe test://static-text"); n != 0 {
		t.Errorf("Usher unsubscribed upstream while bob is subscribed (%d)", n)
	}
	// Bob's session ends: nobody is subscribed, and Usher unsubscribes.
	b.cs.Close()
	select {
	case got := <-up.unsubscribed:
		if got != "test://static-text" {
			t.Errorf("Usher unsubscribed upstream from %q", got)
		}
	case <-t.Context().Done():
		t.Fatal("Usher never unsubscribed upstream after the last session ended")
	}
	// Alice subscribes again: Usher subscribes upstream again.
	if err := a.cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n := up.count("subscribe test://static-text"); n != 2 {
		t.Errorf("Usher subscribed upstream %d times, want a second time for the new subscriber", n)
	}
	update()
	next(a, "alice")
	if err := a.cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n := up.count("unsubscribe test://static-text"); n != 2 {
		t.Errorf("after the last unsubscribe Usher unsubscribed upstream %d times in all, want 2", n)
	}
}

// TestSubscriptionsListen: a caller of the sessionless protocol 2026-07-28
// (the Go SDK's client) to a stateless endpoint hears of an upstream's
// list change on its subscriptions/listen request, and subscribes to a
// resource with one: Usher subscribes upstream, passes the update on, and
// unsubscribes upstream when the listen request ends. A caller of the
// handshake protocols is offered neither (no session to send them on).
// It allows a second, so it does not run in parallel.
func TestSubscriptionsListen(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	up.server.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	e := newEnv(t, envConfig{
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.RefreshInterval = time.Hour },
	})
	changed, updated := make(chan struct{}, 4), make(chan string, 4)
	cs := e.connect(alice, "", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}, "2026-07-28")
	if got := listed(t, cs); !slices.Contains(got, "up__echo") {
		t.Fatalf("tools/list = %v", got)
	}
	up.server.AddTool(&mcp.Tool{Name: "fresh", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal("no tools/list_changed on subscriptions/listen within 1 s")
	}

	const uri = "up__test://static-text"
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	// The SDK's client subscribes on a listen request of its own, in the
	// background: the upstream hears of it once the stream is acknowledged.
	select {
	case got := <-up.subscribed:
		if got != "test://static-text" {
			t.Errorf("Usher subscribed upstream to %q", got)
		}
	case <-t.Context().Done():
		t.Fatal("Usher never subscribed upstream")
	}
	if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://static-text"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-updated:
		if got != uri {
			t.Errorf("the update names %q", got)
		}
	case <-time.After(time.Second):
		t.Fatal("no notifications/resources/updated on subscriptions/listen within 1 s")
	}
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-up.unsubscribed:
		if got != "test://static-text" {
			t.Errorf("Usher unsubscribed upstream from %q", got)
		}
	case <-t.Context().Done():
		t.Fatal("Usher never unsubscribed upstream after the listen request ended")
	}

	legacy := e.connect(alice, "", nil, "2025-11-25")
	if caps := legacy.InitializeResult().Capabilities; caps.Tools.ListChanged || caps.Resources.Subscribe {
		t.Errorf("a stateless endpoint offers a handshake caller listChanged or subscriptions: %+v %+v", caps.Tools, caps.Resources)
	}
	if err := legacy.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); rpcCode(err) != jsonrpc.CodeMethodNotFound {
		t.Errorf("a stateless handshake caller subscribed: %v", err)
	}
}

// TestSessionSubscriptionsBounded: one session subscribes to at most
// maxSessionSubscriptions resources; past them it is refused, and
// nothing more is subscribed upstream.
func TestSessionSubscriptionsBounded(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{},
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		server: func(o *Options) {
			o.Stateful = true
			o.Decider = DeciderFunc(func(context.Context, Call) (Verdict, error) { return Verdict{Decision: Allow}, nil })
		},
	})
	src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i := range maxSessionSubscriptions {
		if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: fmt.Sprintf("up__test://items/%d", i)}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://items/last"}); rpcCode(err) != jsonrpc.CodeInvalidRequest {
		t.Errorf("subscription %d: %v, want refused", maxSessionSubscriptions+1, err)
	}
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "up__test://items/0"}); err != nil {
		t.Errorf("subscribing again to a resource already subscribed to: %v", err)
	}
	if n := up.count("subscribe test://items/last"); n != 0 {
		t.Errorf("the refused subscription reached the upstream")
	}
}

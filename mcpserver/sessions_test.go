//lint:file-ignore SA1019 Logging is deprecated as of protocol 2026-07-28 (SEP-2577) but works during its deprecation window: the test sets a session's log level.

package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// replicas are two stateful endpoints over one store, as two replicas
// are: one is the env's, the other a Server of the same options. Both
// are reachable directly, and through a balancer that alternates every
// request between them.
type replicas struct {
	*env
	two    *Server
	oneURL string // the first replica's base URL
	twoURL string // the second replica's
	lbURL  string // the balancer's
	// splitURL sends GETs to the first replica, POSTs to the second.
	splitURL string
}

func newReplicas(t *testing.T, cfg envConfig) *replicas {
	t.Helper()
	var opts Options
	if cfg.store == nil {
		cfg.store = storetest.NewSQLite(t)
	}
	cfg.server = func(o *Options) {
		o.Stateful = true
		o.Sessions = nil // set below, to the env's store
		opts = *o
	}
	e := newEnv(t, cfg)
	opts.Sessions = e.store
	// The env's own server was made without Sessions: make both anew.
	one, err := New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Server{one, two} {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = s.Drain(ctx)
		})
	}
	e.server = one
	oneTS := httptest.NewServer(one.Handler())
	t.Cleanup(oneTS.Close)
	twoTS := httptest.NewServer(two.Handler())
	t.Cleanup(twoTS.Close)
	var next atomic.Uint64
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		[]http.Handler{one.Handler(), two.Handler()}[(next.Add(1)-1)%2].ServeHTTP(w, r)
	}))
	t.Cleanup(lb.Close)
	// split sends every GET (the standalone stream) to the first replica,
	// every POST to the second.
	split := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			one.Handler().ServeHTTP(w, r)
			return
		}
		two.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(split.Close)
	// e.url stays the public URL, the audience of e.token's tokens.
	return &replicas{env: e, two: two, oneURL: oneTS.URL, twoURL: twoTS.URL, lbURL: lb.URL, splitURL: split.URL}
}

// connectLB opens a stateful client session as sub through the balancer.
func (r *replicas) connectLB(t *testing.T, sub string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return r.connectVia(t, r.lbURL, sub, opts, true)
}

// connectVia opens a stateful client session as sub through base, with
// the standalone stream or not.
func (r *replicas) connectVia(t *testing.T, base, sub string, opts *mcp.ClientOptions, noStream bool) *mcp.ClientSession {
	t.Helper()
	return r.connectTransport(t, base, sub, opts, noStream, nil, sessionVersion)
}

// connectWith opens a stateful client session as sub through base, and
// passes the body of each POST the client sends to sent.
func (r *replicas) connectWith(t *testing.T, base, sub string, opts *mcp.ClientOptions, sent func([]byte)) *mcp.ClientSession {
	t.Helper()
	return r.connectTransport(t, base, sub, opts, true, sent, sessionVersion)
}

// sentBodies passes the body of each request it sends to sent.
type sentBodies struct {
	next http.RoundTripper
	sent func([]byte)
}

func (s sentBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		s.sent(b)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	return s.next.RoundTrip(req)
}

func (r *replicas) connectTransport(t *testing.T, base, sub string, opts *mcp.ClientOptions, noStream bool, sent func([]byte), version string) *mcp.ClientSession {
	t.Helper()
	src := r.broker.TokenSource(t.Context(), broker.Grant{Subject: sub, Audience: r.url + "/mcp"})
	var rt http.RoundTripper = &oauth2.Transport{Source: src}
	if sent != nil {
		rt = sentBodies{next: rt, sent: sent}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:             base + "/mcp",
		HTTPClient:           &http.Client{Transport: rt},
		DisableStandaloneSSE: noStream,
		MaxRetries:           -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect through the balancer: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// copies counts the copies of session id that the Server s holds.
func copies(s *Server, id string) int {
	n := 0
	for ss := range s.sdk.Sessions() {
		if ss.ID() == id {
			n++
		}
	}
	return n
}

// copyOf returns the copy of session id that the Server s holds, or nil.
func copyOf(s *Server, id string) *mcp.ServerSession {
	for ss := range s.sdk.Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	return nil
}

// rawPost sends a JSON-RPC body to base's /mcp with the bearer token and
// the session handle, and returns the status and the body.
func rawPost(t *testing.T, base, token, handle, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if handle != "" {
		req.Header.Set("Mcp-Session-Id", handle)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp.Body)
}

const listTools = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`

// sessionState decodes the record of the session handle names.
func (r *replicas) sessionState(t *testing.T, handle string) (mcp.ServerSessionState, error) {
	t.Helper()
	id, ok := r.server.durable.open(handle)
	if !ok {
		t.Fatalf("the handle %q does not open", handle)
	}
	rec, err := r.store.GetMCPSession(t.Context(), id)
	if err != nil {
		return mcp.ServerSessionState{}, err
	}
	if rec.Principal != alice {
		t.Errorf("the record's principal is %q, want alice", rec.Principal)
	}
	var st mcp.ServerSessionState
	if err := json.Unmarshal(rec.State, &st); err != nil {
		t.Fatal(err)
	}
	return st, nil
}

// TestSessionsAnyReplica: a stateful session whose every request goes to
// the other replica than the one before works as on one replica: the
// handshake on one, its notification on the other, which restores the
// session from its record, and each request after on either. The record
// holds the handshake and the log level; closing the session deletes it,
// and the session is then refused on both replicas.
func TestSessionsAnyReplica(t *testing.T) {
	r := newReplicas(t, envConfig{})
	cs := r.connectLB(t, alice, nil) // initialize: one; initialized: two
	handle := cs.ID()
	if handle == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	for i := range 4 { // two requests on each replica
		if got := listed(t, cs); len(got) == 0 {
			t.Fatalf("tools/list #%d listed nothing", i)
		}
	}
	if res := call(t, cs, "notes_list", map[string]any{}, nil); res.IsError {
		t.Fatalf("notes_list: %s", text(res))
	}
	if n1, n2 := copies(r.server, handle), copies(r.two, handle); n1 != 1 || n2 != 1 {
		t.Errorf("copies of the session: %d on the first replica, %d on the second; want one each", n1, n2)
	}
	st, err := r.sessionState(t, handle)
	if err != nil {
		t.Fatal(err)
	}
	if st.InitializeParams == nil || st.InitializeParams.ClientInfo == nil || st.InitializeParams.ClientInfo.Name != "test-client" ||
		st.InitializeParams.Capabilities == nil || st.NegotiatedProtocolVersion == "" {
		t.Errorf("the record's state %+v lacks the handshake", st)
	}

	before := copyOf(r.two, handle)
	if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if st, err := r.sessionState(t, handle); err != nil || st.LogLevel != "debug" {
		t.Errorf("after logging/setLevel the record's level is %q (%v), want debug", st.LogLevel, err)
	}
	for range 2 { // the level is set on the other replica's copy too
		if got := listed(t, cs); len(got) == 0 {
			t.Fatal("tools/list after logging/setLevel listed nothing")
		}
	}
	if after := copyOf(r.two, handle); after != before || copies(r.two, handle) != 1 {
		t.Errorf("the second replica's copy of the session was replaced (%p, then %p): its streams would have been cut", before, after)
	}
	if st, err := r.sessionState(t, handle); err != nil || st.LogLevel != "debug" {
		t.Errorf("after both copies have the level the record's level is %q (%v), want debug", st.LogLevel, err)
	}

	if err := cs.Close(); err != nil {
		t.Fatalf("closing the session: %v", err)
	}
	if _, err := r.sessionState(t, handle); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the record of a closed session: %v, want ErrNotFound", err)
	}
	tok := r.token(alice, "")
	for _, base := range []string{r.oneURL, r.twoURL} {
		if code, body := rawPost(t, base, tok, handle, listTools); code != http.StatusNotFound {
			t.Errorf("a request of the closed session at %s: %d %s, want 404", base, code, body)
		}
	}
}

// TestSessionHandleRefused: a request whose Mcp-Session-Id is not a
// handle of Usher's (made up, altered, sealed under another secret), or
// the handle of another principal's session, is refused with 404 on a
// replica that does not hold the session, and restores nothing.
func TestSessionHandleRefused(t *testing.T) {
	r := newReplicas(t, envConfig{})
	code, body := rawPost(t, r.oneURL, r.token(alice, ""), "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if code != http.StatusOK {
		t.Fatalf("initialize: %d %s", code, body)
	}
	var handle string
	for ss := range r.server.sdk.Sessions() {
		handle = ss.ID()
	}
	if _, ok := r.server.durable.open(handle); !ok {
		t.Fatalf("the session's id %q is not a handle of Usher's", handle)
	}
	other, err := newDurableSessions(r.server, r.store, []byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	altered := []byte(handle)
	altered[len(altered)/2] ^= 1
	aliceTok, bobTok := r.token(alice, ""), r.token("bob", "")

	for name, tc := range map[string]struct{ handle, token string }{
		"made up":                   {"0123456789abcdef", aliceTok},
		"altered":                   {string(altered), aliceTok},
		"sealed under other secret": {other.newHandle(), aliceTok},
		"another principal's":       {handle, bobTok},
	} {
		if code, body := rawPost(t, r.twoURL, tc.token, tc.handle, listTools); code != http.StatusNotFound || !strings.Contains(body, "session_not_found") {
			t.Errorf("%s: %d %s, want 404 session_not_found", name, code, body)
		}
	}
	if n := copies(r.two, handle); n != 0 {
		t.Errorf("the second replica restored %d copies of the session for refused requests", n)
	}
	// The session's own principal is served there.
	if code, body := rawPost(t, r.twoURL, aliceTok, handle, listTools); code != http.StatusOK || !strings.Contains(body, `"tools"`) {
		t.Errorf("alice's request of her session on the second replica: %d %s", code, body)
	}
}

// TestSessionAnswerOnOtherReplica: an upstream's elicitation during a
// tool call goes to the client on the call's stream from the replica that
// serves the call; the client's answer reaches the other replica, which
// passes it on, and the call completes with the upstream's answer, the
// request and the answer audited once. On PostgreSQL an answer too large
// for a notification is passed on too (kept in the database, its id
// notified), whole.
func TestSessionAnswerOnOtherReplica(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{"type": "object"}})
			if err != nil {
				return nil, err
			}
			name := res.Content["name"].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + name[:min(len(name), 8)] + " (" + strconv.Itoa(len(name)) + " bytes)"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(ts.Close)
	large := "Ada" + strings.Repeat("é\"", 20000) // 60 KB, beyond a notification's 8,000 bytes
	for _, tc := range []struct {
		name  string
		open  func(testing.TB) store.Store
		given string
	}{
		{"SQLite", storetest.NewSQLite, "Ada"},
		{"PostgreSQL", storetest.NewPostgres, "Ada"},
		{"PostgreSQL large", storetest.NewPostgres, large},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplicas(t, envConfig{rules: map[string]Decision{"as__ask": Allow}, upstreams: []Upstream{{Name: "as", URL: ts.URL}},
				catalog: func(o *CatalogOptions) { o.RelayRequests = true }, store: tc.open(t)})
			var asked atomic.Int32
			cs := r.connectLB(t, alice, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked.Add(1)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": tc.given}}, nil
			}})
			// initialize: one; initialized: two; the call: one; the answer: two.
			// Without the answer passed on, the call would wait for ever: the
			// deadline only ends the test.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "as__ask", Arguments: map[string]any{}})
			want := "hello " + tc.given[:min(len(tc.given), 8)] + " (" + strconv.Itoa(len(tc.given)) + " bytes)"
			if err != nil || res.IsError || text(res) != want || asked.Load() != 1 {
				t.Fatalf("the call = %+v, %v (asked %d times); want %s", res, err, asked.Load(), want)
			}
			if kinds := r.auditKinds("as__ask"); !slices.Equal(kinds, []string{KindDecision, KindElicitationRequested, KindRequestAnswered, KindExecuted}) {
				t.Errorf("audit %v", kinds)
			}
		})
	}
}

// TestSessionProtocolsAnyReplica: a client of each protocol with a
// handshake holds a stateful session through two replicas behind the
// alternating balancer: the session keeps the protocol it negotiated on
// the replica that did not answer its handshake, and an upstream's
// sampling request during a tool call (a request every one of these
// protocols has), sent from one replica, is answered through the other.
func TestSessionProtocolsAnyReplica(t *testing.T) {
	t.Parallel()
	up := askingUpstream(t)
	r := newReplicas(t, envConfig{rules: map[string]Decision{"up__ask": Allow}, upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog: func(o *CatalogOptions) { o.RelayRequests = true }})
	for _, version := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			var sampled atomic.Int32
			cs := r.connectTransport(t, r.lbURL, alice, &mcp.ClientOptions{
				CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					sampled.Add(1)
					return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "four"}}, nil
				},
			}, true, nil, version)
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("the session negotiated %s, want %s", got, version)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{}})
			if err != nil || res.IsError || !strings.HasPrefix(text(res), "model said four") || sampled.Load() != 1 {
				t.Fatalf("the call = %+v, %v (sampled %d times); want the model's answer", res, err, sampled.Load())
			}
		})
	}
}

// TestSessionSubscriptionOtherReplica: a subscription made on one replica
// is recorded with the session, and the replica that holds the client's
// standalone stream subscribes its copy of the session too, so that the
// resource's update reaches the client there; an unsubscription made on
// the first replica ends it on the other.
func TestSessionSubscriptionOtherReplica(t *testing.T) {
	up := newFeatureUpstream(t, "up", true)
	const uri = "up__test://static-text"
	r := newReplicas(t, envConfig{upstreams: []Upstream{{Name: "up", URL: up.url}}, rules: map[string]Decision{uri: Allow}})
	updated := make(chan string, 8)
	cs := r.connectVia(t, r.splitURL, alice, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}, false)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil { // on the second replica
		t.Fatal(err)
	}
	if id, _ := r.server.durable.open(cs.ID()); id != "" {
		var rec sessionState
		got, err := r.store.GetMCPSession(t.Context(), id)
		if err != nil || json.Unmarshal(got.State, &rec) != nil || !slices.Equal(rec.Subscriptions, []string{uri}) {
			t.Fatalf("the record's subscriptions: %+v, %v", rec.Subscriptions, err)
		}
	}
	// The first replica's copy (the standalone stream's) is subscribed
	// once it has heard of the change (store.NotifyMCPSession, which
	// refreshes it; refreshed here too, so that the test need not wait
	// for the notification): an update reaches the client there.
	id, _ := r.server.durable.open(cs.ID())
	r.server.durable.refresh(t.Context(), id)
	if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://static-text"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // ends only a failing test
	defer cancel()
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("the update names %q, want %q", got, uri)
		}
	case <-ctx.Done():
		t.Fatal("no update reached the client's stream on the first replica")
	}
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if id, _ := r.server.durable.open(cs.ID()); id != "" {
		var after sessionState
		got, err := r.store.GetMCPSession(t.Context(), id)
		if err != nil || json.Unmarshal(got.State, &after) != nil || len(after.Subscriptions) != 0 {
			t.Errorf("the record's subscriptions after unsubscribing: %+v, %v", after.Subscriptions, err)
		}
	}
}

// TestSessionHandlesAcrossASecret: a session's handle sealed under a
// secret that Options.Secret replaced opens while that secret is among
// Options.PreviousSecrets, and not without it; new handles are sealed
// under Secret.
func TestSessionHandlesAcrossASecret(t *testing.T) {
	r := newReplicas(t, envConfig{})
	oldSecret := []byte(strings.Repeat("o", 32))
	before, err := newDurableSessions(r.server, r.store, oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	handle := before.newHandle()
	if _, ok := r.server.durable.open(handle); ok {
		t.Fatal("a handle sealed under another secret opened without it among the previous ones")
	}
	r.server.opts.PreviousSecrets = [][]byte{oldSecret}
	after, err := newDurableSessions(r.server, r.store, r.server.opts.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := after.open(handle); !ok {
		t.Error("a handle sealed under the previous secret does not open")
	}
	if _, ok := before.open(after.newHandle()); ok {
		t.Error("a new handle was sealed under the previous secret")
	}
}

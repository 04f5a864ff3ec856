package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// statefulUpstream is an upstream MCP server over streamable HTTP that
// keeps sessions (of protocol 2025-11-25, the last with sessions), and a
// tool that counts its calls per session. restart forgets every session,
// as a restarted upstream does.
type statefulUpstream struct {
	server  *mcp.Server
	url     string
	handler atomic.Pointer[http.Handler]
	// refuse answers initialize with 503; beforeInitialize, when set, is
	// called before an initialize is served.
	refuse           atomic.Bool
	beforeInitialize func()
	// failDeletes answers that many DELETEs of a session with 503.
	failDeletes atomic.Int32
	// meet holds the calls of the meet tool (see meeting).
	meet meeting

	mu          sync.Mutex
	initializes int
	deletes     int            // the DELETEs of a session it was sent
	calls       map[string]int // by upstream session id
	ran         int
	ids         map[string]bool            // the session ids the upstream gave
	methods     map[string]map[string]bool // the methods of each session's requests
}

func newStatefulUpstream(t *testing.T) *statefulUpstream {
	t.Helper()
	u := &statefulUpstream{calls: map[string]int{}, ids: map[string]bool{}, methods: map[string]map[string]bool{}}
	u.server = mcp.NewServer(&mcp.Implementation{Name: "stateful", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	u.server.AddTool(&mcp.Tool{Name: "count", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.ran++
			u.calls[req.Session.ID()]++
			n := u.calls[req.Session.ID()]
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(n)}}}, nil
		})
	u.server.AddTool(&mcp.Tool{Name: "meet", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Who string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			u.mu.Lock()
			meet := u.meet
			u.mu.Unlock()
			meet.arrived <- struct{}{}
			select {
			case <-meet.all:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Who}}}, nil
		})
	u.restart()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.Header.Get("Mcp-Session-Id") != "" {
			u.mu.Lock()
			u.deletes++
			u.mu.Unlock()
			if u.failDeletes.Add(-1) >= 0 {
				http.Error(w, "not now", http.StatusServiceUnavailable)
				return
			}
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct{ Method string }
			_ = json.Unmarshal(body, &msg)
			if msg.Method == "initialize" {
				if u.refuse.Load() {
					http.Error(w, "not now", http.StatusServiceUnavailable)
					return
				}
				if u.beforeInitialize != nil {
					u.beforeInitialize()
				}
			}
			u.mu.Lock()
			if msg.Method == "initialize" {
				u.initializes++
			}
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				if u.methods[id] == nil {
					u.methods[id] = map[string]bool{}
				}
				u.methods[id][msg.Method] = true
			}
			u.mu.Unlock()
		}
		(*u.handler.Load()).ServeHTTP(&sessionIDs{ResponseWriter: w, u: u}, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		// The replicas leave the sessions they share open, for each
		// other: the upstream ends them here.
		for ss := range u.server.Sessions() {
			ss.Close()
		}
	})
	u.url = ts.URL + "/mcp"
	return u
}

// sessionIDs notes the session ids the upstream gives.
type sessionIDs struct {
	http.ResponseWriter
	u *statefulUpstream
}

func (s *sessionIDs) WriteHeader(code int) {
	if id := s.Header().Get("Mcp-Session-Id"); id != "" {
		s.u.mu.Lock()
		s.u.ids[id] = true
		s.u.mu.Unlock()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionIDs) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *sessionIDs) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// meeting holds the calls of the meet tool: each tells arrived, and
// answers once all is closed.
type meeting struct {
	arrived chan struct{}
	all     chan struct{}
}

// restart forgets every session: a new handler holds none.
func (u *statefulUpstream) restart() {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, nil)
	u.handler.Store(&h)
}

// counts returns the initializes of the callers' sessions the upstream
// answered, the tool's runs, and the callers' sessions that called it. The
// catalog's own sessions (one per replica) are those that list the tools:
// their initializes are not counted.
func (u *statefulUpstream) counts() (initializes, ran int, ids []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	initializes = u.initializes
	for id, methods := range u.methods {
		if methods["tools/list"] {
			initializes--
		}
		if methods["tools/call"] {
			ids = append(ids, id)
		}
	}
	return initializes, u.ran, ids
}

// newSharingReplicas starts two stateful replicas over st as
// newReplicas does, but each with a catalog of its own, as two processes
// have, sharing their callers' sessions to up: the second replica's
// catalog through other.
func newSharingReplicas(t *testing.T, st, other store.Store, up *statefulUpstream) (r *replicas, one, two *Catalog) {
	t.Helper()
	var opts Options
	var copts CatalogOptions
	e := newEnv(t, envConfig{
		store:     st,
		rules:     map[string]Decision{"up__count": Allow},
		upstreams: []Upstream{{Name: "up", URL: up.url}},
		catalog: func(o *CatalogOptions) {
			o.UpstreamSessions, o.UpstreamSessionSecret = st, testSecret
			o.RelayRequests = true
			copts = *o
		},
		server: func(o *Options) {
			o.Stateful = true
			o.Sessions = nil // set below, to the store
			opts = *o
		},
	})
	opts.Sessions = st
	copts.UpstreamSessions = other
	second, err := NewCatalog(&copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Close() })
	opts2 := opts
	opts2.Catalog = second
	s1, err := New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(&opts2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Server{s1, s2} {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = s.Drain(ctx)
		})
	}
	e.server = s1
	var next atomic.Uint64
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		[]http.Handler{s1.Handler(), s2.Handler()}[(next.Add(1)-1)%2].ServeHTTP(w, r)
	}))
	t.Cleanup(lb.Close)
	return &replicas{env: e, two: s2, lbURL: lb.URL}, e.catalog, second
}

// holdsSession reports whether cat's pool holds a session of alice to up.
func holdsSession(cat *Catalog) bool {
	cat.pool.mu.Lock()
	defer cat.pool.mu.Unlock()
	for k := range cat.pool.conns {
		if k.upstream == "up" && k.subject == alice {
			return true
		}
	}
	return false
}

// onEngines runs fn with two stores on one database of each engine, as
// two replicas have: SQLite (one store, as one process has), and
// PostgreSQL (TEST_DATABASE_URL; skipped without it, failed under CI).
func onEngines(t *testing.T, fn func(t *testing.T, st, other store.Store)) {
	t.Run("SQLite", func(t *testing.T) {
		st := storetest.NewSQLite(t)
		fn(t, st, st)
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		url := storetest.PostgresURL(t)
		var stores [2]store.Store
		for i := range stores {
			st, err := store.Open(t.Context(), url, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		}
		if err := stores[0].Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		fn(t, stores[0], stores[1])
	})
}

// TestUpstreamSessionSharedByReplicas: a stateful session whose requests
// alternate between two replicas (each with its own catalog and pool, as
// two processes) reaches one session of the upstream: it sees one
// initialize, and its tool that counts calls per session counts across
// both replicas. The record holds the upstream's session id sealed, and
// no log holds it.
func TestUpstreamSessionSharedByReplicas(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := newStatefulUpstream(t)
		r, one, two := newSharingReplicas(t, st, other, up)
		cs := r.connectLB(t, alice, nil)
		for i := 1; i <= 4; i++ {
			res := call(t, cs, "up__count", map[string]any{}, nil)
			if res.IsError || text(res) != strconv.Itoa(i) {
				t.Fatalf("call %d: %q (error %v), want the upstream session's count %d", i, text(res), res.IsError, i)
			}
		}
		if !holdsSession(one) || !holdsSession(two) {
			t.Errorf("the replicas hold sessions to the upstream: first %v, second %v; want both", holdsSession(one), holdsSession(two))
		}
		initializes, ran, ids := up.counts()
		if initializes != 1 || ran != 4 || len(ids) != 1 {
			t.Fatalf("the upstream saw %d initializes, %d calls, sessions %d; want 1, 4, 1", initializes, ran, len(ids))
		}
		rec, err := st.GetUpstreamSession(t.Context(), one.upstreams[0].sharedKey(connKeyOf(t, one)))
		if err != nil {
			t.Fatalf("the record of the shared session: %v", err)
		}
		if strings.Contains(rec.Session, ids[0]) || rec.ProtocolVersion != "2025-11-25" || !strings.Contains(string(rec.InitializeResult), `"stateful"`) {
			t.Errorf("the record %+v: want the session sealed, protocol 2025-11-25, the upstream's InitializeResult", rec)
		}
		if strings.Contains(r.logs.String(), ids[0]) {
			t.Error("the logs hold the upstream's session id")
		}
	})
}

// connKeyOf returns the key of alice's session to up in cat's pool.
func connKeyOf(t *testing.T, cat *Catalog) connKey {
	t.Helper()
	cat.pool.mu.Lock()
	defer cat.pool.mu.Unlock()
	for k := range cat.pool.conns {
		if k.upstream == "up" && k.subject == alice {
			return k
		}
	}
	t.Fatal("no session of alice to up")
	return connKey{}
}

// TestUpstreamSessionForgotten: when the upstream forgets the shared
// session (it restarted), the replica whose call meets the 404 opens a
// new session, records it in place of the old, and sends the call on it:
// the call runs once. The other replica, whose next call meets the 404
// too, joins the new session rather than opening a third.
func TestUpstreamSessionForgotten(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := newStatefulUpstream(t)
		r, one, _ := newSharingReplicas(t, st, other, up)
		cs := r.connectLB(t, alice, nil)
		for i := 1; i <= 2; i++ { // one on each replica
			if res := call(t, cs, "up__count", map[string]any{}, nil); res.IsError || text(res) != strconv.Itoa(i) {
				t.Fatalf("call %d: %q, want %d", i, text(res), i)
			}
		}
		key := one.upstreams[0].sharedKey(connKeyOf(t, one))
		before, err := st.GetUpstreamSession(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		up.restart()
		for i := 1; i <= 2; i++ { // one on each replica, on the new session
			if res := call(t, cs, "up__count", map[string]any{}, nil); res.IsError || text(res) != strconv.Itoa(i) {
				t.Fatalf("call %d after the restart: %q (error %v), want the new session's count %d", i, text(res), res.IsError, i)
			}
		}
		initializes, ran, ids := up.counts()
		if initializes != 2 || ran != 4 || len(ids) != 2 {
			t.Errorf("the upstream saw %d initializes, %d calls, sessions %d; want 2, 4 (none lost or run twice), 2", initializes, ran, len(ids))
		}
		after, err := st.GetUpstreamSession(t.Context(), key)
		if err != nil || after.Session == before.Session {
			t.Errorf("the record after the restart: %v, replaced %v; want the new session recorded", err, after.Session != before.Session)
		}
	})
}

// sharedClients returns a client session to up for each store, opened at
// once, each through a sharedSession of alice's key over its store, as
// replicas have.
func sharedClients(t *testing.T, up *statefulUpstream, stores ...store.Store) []*mcp.ClientSession {
	t.Helper()
	out := make([]*mcp.ClientSession, len(stores))
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() { out[i], errs[i] = sharedClient(t, up, st, time.Now) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
	}
	return out
}

// sharedClient returns a client session to up through a sharedSession of
// alice's key over st, whose clock is now, as a replica has.
func sharedClient(t *testing.T, up *statefulUpstream, st store.Store, now func() time.Time) (*mcp.ClientSession, error) {
	cs, _, err := sharedClientOn(t, up, st, now)
	return cs, err
}

// sharedClientOn is sharedClient, and returns the sharedSession too.
func sharedClientOn(t *testing.T, up *statefulUpstream, st store.Store, now func() time.Time) (*mcp.ClientSession, *sharedSession, error) {
	return sharedClientAs(t, up, st, now, alice)
}

// sharingUpstream is a replica's upstream up, sharing its sessions in st.
func sharingUpstream(up *statefulUpstream, st store.Store, now func() time.Time) (*upstream, error) {
	sealer, err := newUpstreamSessionSealer(testSecret)
	if err != nil {
		return nil, err
	}
	return &upstream{cfg: Upstream{Name: "up", URL: up.url}, cat: &Catalog{
		opts: CatalogOptions{UpstreamSessions: st, Now: now}, log: slog.New(slog.DiscardHandler), sessionSealer: sealer}}, nil
}

// sharedClientAs is sharedClientOn for the caller subject.
func sharedClientAs(t *testing.T, up *statefulUpstream, st store.Store, now func() time.Time, subject string) (*mcp.ClientSession, *sharedSession, error) {
	u, err := sharingUpstream(up, st, now)
	if err != nil {
		return nil, nil, err
	}
	shared := u.sharedSession(connKey{upstream: "up", subject: subject}, http.DefaultTransport)
	client := mcp.NewClient(&mcp.Implementation{Name: "usher", Version: "test"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: up.url, HTTPClient: &http.Client{Transport: shared}, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, shared, err
}

// countOn calls the upstream's count tool on cs.
func countOn(t *testing.T, cs *mcp.ClientSession) (string, error) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "count", Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	return text(res), nil
}

// TestUpstreamSessionRecordRace: two replicas that open the first session
// of a key at once (both initialize before either records) end on one:
// the second to record joins the first's and ends its own.
func TestUpstreamSessionRecordRace(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := newStatefulUpstream(t)
		var both sync.WaitGroup
		both.Add(2)
		up.beforeInitialize = func() { both.Done(); both.Wait() }
		clients := sharedClients(t, up, st, other)
		for i, cs := range []*mcp.ClientSession{clients[0], clients[1], clients[0]} {
			if got, err := countOn(t, cs); err != nil || got != strconv.Itoa(i+1) {
				t.Fatalf("call %d: %q, %v; want %d on the one session", i+1, got, err, i+1)
			}
		}
		initializes, _, ids := up.counts()
		open := 0
		for range up.server.Sessions() {
			open++
		}
		if initializes != 2 || len(ids) != 1 || open != 1 {
			t.Errorf("the upstream saw %d initializes, %d sessions called, %d open; want 2, 1, 1 (the loser's ended)", initializes, len(ids), open)
		}
	})
}

// TestUpstreamSessionNotSent: when the upstream has forgotten the session
// and refuses a new one, the call fails as not sent (it did not run, and
// may be tried again), and is not sent again by itself; the next call,
// once the upstream takes a new session, runs on it.
func TestUpstreamSessionNotSent(t *testing.T) {
	onEngines(t, func(t *testing.T, st, _ store.Store) {
		up := newStatefulUpstream(t)
		cs := sharedClients(t, up, st)[0]
		if got, err := countOn(t, cs); err != nil || got != "1" {
			t.Fatalf("the first call: %q, %v", got, err)
		}
		up.restart()
		up.refuse.Store(true)
		_, err := countOn(t, cs)
		if err == nil || !notSent(err) {
			t.Fatalf("a call on a forgotten session with no new one to be had: %v; want an error of a call not sent", err)
		}
		if _, ran, _ := up.counts(); ran != 1 {
			t.Errorf("the tool ran %d times, want 1", ran)
		}
		up.refuse.Store(false)
		if got, err := countOn(t, cs); err != nil || got != "1" {
			t.Errorf("the call once the upstream takes a new session: %q, %v; want 1 on the new session", got, err)
		}
		if initializes, ran, ids := up.counts(); initializes != 2 || ran != 2 || len(ids) != 2 {
			t.Errorf("the upstream saw %d initializes, %d runs, %d sessions called; want 2, 2, 2", initializes, ran, len(ids))
		}
	})
}

// TestUpstreamSessionCallsAtOnce: two replicas' calls in flight at once
// on the one shared session (each replica's client numbers its requests
// alike) both run, and each replica gets its own call's answer.
func TestUpstreamSessionCallsAtOnce(t *testing.T) {
	st := storetest.NewSQLite(t)
	up := newStatefulUpstream(t)
	up.meet = meeting{arrived: make(chan struct{}, 2), all: make(chan struct{})}
	clients := sharedClients(t, up, st, st)
	type answer struct {
		text string
		err  error
	}
	answers := make([]chan answer, 2)
	for i, cs := range clients {
		answers[i] = make(chan answer, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "meet", Arguments: map[string]any{"who": strconv.Itoa(i)}})
			if err == nil {
				answers[i] <- answer{text: text(res)}
				return
			}
			answers[i] <- answer{err: err}
		}()
		// The first call is in flight before the second is sent.
		select {
		case <-up.meet.arrived:
		case a := <-answers[i]:
			t.Errorf("call %d answered before the other was in flight: %q, %v", i, a.text, a.err)
			answers[i] <- a
		}
	}
	close(up.meet.all)
	for i := range clients {
		if a := <-answers[i]; a.err != nil || a.text != strconv.Itoa(i) {
			t.Errorf("call %d: %q, %v; want its own answer %d", i, a.text, a.err, i)
		}
	}
	if _, _, ids := up.counts(); len(ids) != 1 {
		t.Errorf("the calls went out on %d sessions, want 1", len(ids))
	}
}

// TestRequestIDs: a client's request ids, and the id a cancellation
// names, go out in its range and come back in answers, on a stream event
// by event; the upstream's own requests, notifications and the client's
// answers to them, and events of no data, pass as they are.
func TestRequestIDs(t *testing.T) {
	ids := requestIDs{base: 7 * idRange}
	base := strconv.FormatInt(ids.base, 10)
	for _, tc := range []struct{ name, in, want string }{
		{"call", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}`, `{"id":` + strconv.FormatInt(ids.base+3, 10) + `,"jsonrpc":"2.0","method":"tools/call","params":{}}`},
		{"cancel", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + strconv.FormatInt(ids.base+3, 10) + `}}`},
		{"answer to the upstream", `{"jsonrpc":"2.0","id":3,"result":{}}`, `{"jsonrpc":"2.0","id":3,"result":{}}`},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x"}}`, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x"}}`},
	} {
		if got := string(ids.out([]byte(tc.in))); got != tc.want {
			t.Errorf("out(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
	stream := "id: e1\ndata:\n\n" +
		`data: {"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}` + "\n\n" +
		`data: {"jsonrpc":"2.0","id":` + base + `3,"result":{}}` + "\n\n" + // not in the range: as it is
		"id: e2\n" + `data: {"jsonrpc":"2.0","id":` + strconv.FormatInt(ids.base+3, 10) + `,"result":{"content":[]}}` + "\n\n"
	want := "id: e1\ndata:\n\n" +
		`data: {"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}` + "\n\n" +
		`data: {"jsonrpc":"2.0","id":` + base + `3,"result":{}}` + "\n\n" +
		"id: e2\n" + `data: {"id":3,"jsonrpc":"2.0","result":{"content":[]}}` + "\n\n"
	resp := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(stream))}
	ids.answers(resp)
	if got := readAll(t, resp.Body); got != want {
		t.Errorf("the stream read:\n%s\nwant:\n%s", got, want)
	}
}

// TestUpstreamSessionRecordEnds: a record that has ended is not joined:
// the replica that needs the session then opens a new one, records it in
// place of the old, and ends the old one upstream; a replica still on the
// old one meets the 404 and joins the new one, its call run once.
func TestUpstreamSessionRecordEnds(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := newStatefulUpstream(t)
		a, err := sharedClient(t, up, st, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countOn(t, a); err != nil || got != "1" {
			t.Fatalf("the first call: %q, %v", got, err)
		}
		later := func() time.Time { return time.Now().Add(upstreamSessionLifetime + time.Hour) }
		b, err := sharedClient(t, up, other, later)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 2; i++ {
			if got, err := countOn(t, b); err != nil || got != strconv.Itoa(i) {
				t.Fatalf("call %d once the record has ended: %q, %v; want %d on a new session", i, got, err, i)
			}
		}
		if got, err := countOn(t, a); err != nil || got != "3" {
			t.Errorf("a call of the replica on the old session: %q, %v; want 3 on the new one", got, err)
		}
		open := 0
		for range up.server.Sessions() {
			open++
		}
		if initializes, ran, ids := up.counts(); initializes != 2 || ran != 4 || len(ids) != 2 || open != 1 {
			t.Errorf("the upstream saw %d initializes, %d runs, %d sessions called, %d open; want 2, 4, 2, 1", initializes, ran, len(ids), open)
		}
	})
}

// TestUpstreamSessionsNeedSecret: a catalog that shares upstream sessions
// needs the secret that seals their ids.
func TestUpstreamSessionsNeedSecret(t *testing.T) {
	st := storetest.NewSQLite(t)
	for name, secret := range map[string][]byte{"none": nil, "short": []byte("too short")} {
		_, err := NewCatalog(&CatalogOptions{Runs: st, Approvals: st, UpstreamSessions: st, UpstreamSessionSecret: secret})
		if err == nil || !strings.Contains(err.Error(), "UpstreamSessionSecret") {
			t.Errorf("secret %s: %v, want UpstreamSessionSecret refused", name, err)
		}
	}
	c, err := NewCatalog(&CatalogOptions{Runs: st, Approvals: st, UpstreamSessions: st, UpstreamSessionSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestUpstreamSessionRecordOfAnotherKey: a record whose sealed session was
// copied from another caller's record (by whoever may write the database)
// is not joined: the caller opens a session of its own, and the other
// caller's session is not used.
func TestUpstreamSessionRecordOfAnotherKey(t *testing.T) {
	onEngines(t, func(t *testing.T, st, _ store.Store) {
		up := newStatefulUpstream(t)
		a, aliceShared, err := sharedClientAs(t, up, st, time.Now, alice)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countOn(t, a); err != nil || got != "1" {
			t.Fatalf("alice's first call: %q, %v", got, err)
		}
		rec, err := st.GetUpstreamSession(t.Context(), aliceShared.key)
		if err != nil {
			t.Fatal(err)
		}
		u, err := sharingUpstream(up, st, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		rec.Key = u.sharedKey(connKey{upstream: "up", subject: bob})
		if _, err := st.PutUpstreamSession(t.Context(), rec, ""); err != nil {
			t.Fatal(err)
		}
		b, _, err := sharedClientAs(t, up, st, time.Now, bob)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countOn(t, b); err != nil || got != "1" {
			t.Fatalf("bob's first call: %q, %v; want 1, on a session of his own", got, err)
		}
		if initializes, ran, ids := up.counts(); initializes != 2 || ran != 2 || len(ids) != 2 {
			t.Errorf("the upstream saw %d initializes, %d runs, %d sessions called; want 2, 2, 2", initializes, ran, len(ids))
		}
	})
}

package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/testenv"
)

// TestStandaloneStreamResumedOnOtherReplica: a client's standalone stream
// (its GET) that breaks on one replica and is taken up, with its
// Last-Event-ID, by the other goes on there: the session is not broken
// (the Go SDK's client ends the whole session when a resumption is
// refused), and the next update reaches the client on the new stream.
// When it breaks there in turn, an update sent while the client is away
// is replayed to it: the second replica keeps its events under the ids
// it numbered on from the client's.
func TestStandaloneStreamResumedOnOtherReplica(t *testing.T) {
	t.Parallel()
	up := newFeatureUpstream(t, "up", true)
	const uri = "up__test://static-text"
	r := newReplicas(t, envConfig{upstreams: []Upstream{{Name: "up", URL: up.url}}, rules: map[string]Decision{uri: Allow}})

	// Every request goes to one replica until toTwo, then to the other
	// (which has no copy of the session until then); cut ends the GET
	// being served; a GET waits for holding, when set.
	var toTwo atomic.Bool
	var holding atomic.Pointer[chan struct{}]
	var mu sync.Mutex
	var cut context.CancelFunc
	gets := make(chan string, 8)
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			h := r.server.Handler()
			if toTwo.Load() {
				h = r.two.Handler()
			}
			h.ServeHTTP(w, req)
			return
		}
		gets <- req.Header.Get("Last-Event-ID")
		if hold := holding.Swap(nil); hold != nil {
			<-*hold
		}
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		mu.Lock()
		cut = cancel
		mu.Unlock()
		h := r.server.Handler()
		if toTwo.Load() {
			h = r.two.Handler()
		}
		h.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(lb.Close)

	updated := make(chan string, 8)
	src := r.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: r.url + "/mcp"})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: lb.URL + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := <-gets; got != "" {
		t.Fatalf("the stream opened with Last-Event-ID %q", got)
	}
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	id, _ := r.server.durable.open(cs.ID())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // ends only a failing test
	defer cancel()
	send := func() {
		t.Helper()
		for _, s := range []*Server{r.server, r.two} {
			s.durable.refresh(t.Context(), id)
		}
		if err := up.server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: "test://static-text"}); err != nil {
			t.Fatal(err)
		}
	}
	received := func(where string) {
		t.Helper()
		select {
		case <-updated:
		case <-ctx.Done():
			t.Fatalf("no update reached the client's stream on %s", where)
		}
	}
	resumed := func(want string) {
		t.Helper()
		select {
		case got := <-gets:
			if got != want {
				t.Fatalf("the stream taken up with Last-Event-ID %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatal("the client did not take its stream up again")
		}
	}
	cutStream := func() {
		mu.Lock()
		cut()
		mu.Unlock()
	}
	send()
	received("the first replica")

	toTwo.Store(true)
	cutStream()
	resumed("_0")
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatalf("the session after its stream moved: %v", err)
	}
	send()
	received("the second replica")

	// Away from the second replica: the update sent meanwhile waits in
	// its log, to be replayed under the id 2, the next after the client's.
	hold := make(chan struct{})
	holding.Store(&hold)
	cutStream()
	resumed("_1")
	send()
	log := &r.two.durable.events.(*durableEvents).local
	testenv.WaitFor(t, 10*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		e := log.sessions[cs.ID()]
		return e != nil && len(e.events) == 2
	})
	close(hold)
	received("the second replica, replayed")
}

// TestStandaloneLog: the events of a standalone stream are found under
// the index the SDK gave them, also after the stream was taken up from an
// index another replica gave; a resumption from an event the log does not
// hold starts it again there, and the oldest go past the bound.
func TestStandaloneLog(t *testing.T) {
	t.Parallel()
	var l standaloneLog
	strs := func(bs [][]byte) []string {
		out := []string{}
		for _, b := range bs {
			out = append(out, string(b))
		}
		return out
	}
	check := func(what string, got [][]byte, want ...string) {
		t.Helper()
		if !slices.Equal(strs(got), append([]string{}, want...)) {
			t.Errorf("%s: %q, want %q", what, strs(got), want)
		}
	}
	l.open("s")
	for _, e := range []string{"e0", "e1", "e2"} {
		l.append("s", []byte(e))
	}
	check("after 0", l.after("s", 0), "e1", "e2")
	check("from the start", l.after("s", -1), "e0", "e1", "e2")
	check("after the last", l.after("s", 2))

	// Taken up here after the event 7 another replica sent: the SDK
	// numbers this replica's next events 8, 9.
	check("after another replica's 7", l.after("s", 7))
	l.append("s", []byte("e8"))
	l.append("s", []byte("e9"))
	check("after 8", l.after("s", 8), "e9")
	check("after 7", l.after("s", 7), "e8", "e9")
	// An index before what the log holds starts it again.
	check("after 2, no longer held", l.after("s", 2))
	l.append("s", []byte("e3"))
	check("after 2 again", l.after("s", 2), "e3")

	for i := range maxStandaloneEvents + 10 {
		l.append("t", []byte{byte(i)})
	}
	if got := l.after("t", 9); len(got) != maxStandaloneEvents {
		t.Errorf("after the oldest kept: %d events, want %d", len(got), maxStandaloneEvents)
	}
	l.append("u", make([]byte, maxStandaloneBytes))
	l.append("u", []byte("small"))
	check("past the byte bound", l.after("u", 0), "small")
	l.closed("s")
	check("a closed session's", l.after("s", 8))
}

package assistant

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

// capServer is the Assistant API of a runtime on loopback. Its callers
// name themselves in the X-Test-User header (standing in for the sign-in
// in front of the API), and every request carrying X-Test-Request is
// reported done once its handler has returned.
type capServer struct {
	url string
	rt  *Runtime

	mu   sync.Mutex
	done map[string]chan struct{}
	next int
}

func newCapServer(t *testing.T, maxStreams int) *capServer {
	t.Helper()
	rt, err := New(&Options{
		Store: storetest.NewSQLite(t),
		Model: model.NewDemo(),
		Tokens: func(context.Context, Grant) oauth2.TokenSource {
			return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unused"})
		},
		MCPURL:            "http://127.0.0.1:1/mcp",
		MaxStreamsPerUser: maxStreams,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &capServer{rt: rt, done: map[string]chan struct{}{}}
	api := rt.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := identity.Principal{Issuer: "https://idp.example.com", ObjectID: r.Header.Get("X-Test-User")}
		api.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), p)))
		if id := r.Header.Get("X-Test-Request"); id != "" {
			s.mu.Lock()
			close(s.done[id])
			s.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(rt.CloseStreams)
	s.url = srv.URL
	return s
}

// principalID is the id the API gives user.
func principalID(user string) string {
	return identity.Principal{Issuer: "https://idp.example.com", ObjectID: user}.ID()
}

// newRun opens a run of user's, with no message: no turn runs.
func (s *capServer) newRun(t *testing.T, user string) string {
	t.Helper()
	run, _, err := s.rt.CreateRun(t.Context(), principalID(user), Sender{}, NewRun{Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// request prepares a request of user's, and a channel closed once the
// server's handler of it has returned.
func (s *capServer) request(t *testing.T, ctx context.Context, user, path string) (*http.Request, <-chan struct{}) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.next++
	id := strconv.Itoa(s.next)
	done := make(chan struct{})
	s.done[id] = done
	s.mu.Unlock()
	req.Header.Set("X-Test-User", user)
	req.Header.Set("X-Test-Request", id)
	return req, done
}

// stream is an open live-update subscription: close ends it and returns
// once the server has let go of it.
type stream struct {
	close func()
}

// openSSE opens a Server-Sent Events stream and reads its "connected"
// event, so that it is held when openSSE returns.
func (s *capServer) openSSE(t *testing.T, user, path string) stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, done := s.request(t, ctx, user, path)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s as %s: %d %s", path, user, resp.StatusCode, b)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: connected\n" {
		t.Fatalf("GET %s: first line %q, %v", path, line, err)
	}
	return stream{close: func() { cancel(); resp.Body.Close(); <-done }}
}

// openWS opens a WebSocket stream and reads its "connected" message.
func (s *capServer) openWS(t *testing.T, user, path string) stream {
	t.Helper()
	req, done := s.request(t, t.Context(), user, path)
	conn, resp, err := websocket.DefaultDialer.DialContext(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+path, req.Header)
	if err != nil {
		t.Fatalf("WebSocket %s as %s: %v (%v)", path, user, err, resp)
	}
	var msg struct{ Event string }
	if err := conn.ReadJSON(&msg); err != nil || msg.Event != "connected" {
		t.Fatalf("WebSocket %s: first message %+v, %v", path, msg, err)
	}
	return stream{close: func() { conn.Close(); <-done }}
}

// refused checks that a GET of path is answered 429 too_many_streams.
func (s *capServer) refused(t *testing.T, user, path string) {
	t.Helper()
	req, _ := s.request(t, t.Context(), user, path)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusTooManyRequests ||
		body.Error.Code != "too_many_streams" || body.Error.Message == "" {
		t.Errorf("GET %s as %s beyond the cap: %d %+v %v, want 429 too_many_streams", path, user, resp.StatusCode, body, err)
	}
}

// TestStreamCapPerUser checks Options.MaxStreamsPerUser: one user's
// streams, WebSockets, feeds and long-polls count together; the next is
// answered 429 whatever its transport; another user is not affected; and
// closing one makes room for a new one.
func TestStreamCapPerUser(t *testing.T) {
	t.Parallel()
	const max = 3
	s := newCapServer(t, max)
	run, bobs := s.newRun(t, "alice"), s.newRun(t, "bob")
	events := "/api/assistant/runs/" + run + "/events"

	held := []stream{
		s.openSSE(t, "alice", events+"/stream"),
		s.openWS(t, "alice", events+"/ws"),
		s.openSSE(t, "alice", "/api/assistant/updates/stream"),
	}
	if n := s.rt.bus.heldStreams(principalID("alice")); n != max {
		t.Fatalf("alice holds %d streams, want %d", n, max)
	}
	for _, path := range []string{events + "/stream", events + "/ws", "/api/assistant/updates/stream", events + "?after=0&wait=1s"} {
		s.refused(t, "alice", path)
	}
	// A WebSocket beyond the cap is refused before the upgrade.
	req, _ := s.request(t, t.Context(), "alice", events+"/ws")
	if _, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.url, "http")+events+"/ws", req.Header); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a WebSocket beyond the cap: %v %v", resp, err)
	}

	// A message posted with ?wait beyond the cap is stored all the same,
	// and answered queued at once instead of following its turn.
	post, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/api/assistant/runs/"+run+"/messages?wait=1s",
		strings.NewReader(`{"content":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	post.Header.Set("X-Test-User", "alice")
	post.Header.Set("Content-Type", "application/json")
	presp, err := http.DefaultClient.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	var posted struct {
		Seq    int64
		Status string
	}
	err = json.NewDecoder(presp.Body).Decode(&posted)
	presp.Body.Close()
	if err != nil || presp.StatusCode != http.StatusAccepted || posted.Status != "queued" || posted.Seq == 0 {
		t.Errorf("POST ?wait beyond the cap: %d %+v %v, want 202 queued with the stored message's seq", presp.StatusCode, posted, err)
	}

	// Bob has a cap of his own.
	bob := s.openSSE(t, "bob", "/api/assistant/runs/"+bobs+"/events/stream")

	held[0].close()
	held[0] = s.openSSE(t, "alice", events+"/stream")
	s.refused(t, "alice", events+"/stream")
	held[1].close()
	// A long-poll holds a place while it waits, and frees it when it
	// answers.
	req, done := s.request(t, t.Context(), "alice", events+"?after=0&wait=0s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a long-poll within the cap: %v %v", resp, err)
	}
	resp.Body.Close()
	<-done
	held[1] = s.openWS(t, "alice", events+"/ws")

	for _, h := range append(held, bob) {
		h.close()
	}
	for _, user := range []string{"alice", "bob"} {
		if n := s.rt.bus.heldStreams(principalID(user)); n != 0 {
			t.Errorf("%s holds %d streams after closing them all", user, n)
		}
	}
}

// TestStreamCapOptions checks the option's default and validation.
func TestStreamCapOptions(t *testing.T) {
	t.Parallel()
	opts := func(n int) *Options {
		return &Options{Store: storetest.NewSQLite(t), Model: model.NewDemo(), MCPURL: "http://127.0.0.1:1/mcp", MaxStreamsPerUser: n,
			Tokens: func(context.Context, Grant) oauth2.TokenSource { return nil }}
	}
	rt, err := New(opts(0))
	if err != nil || rt.o.MaxStreamsPerUser != DefaultMaxStreamsPerUser || rt.bus.maxStreams != DefaultMaxStreamsPerUser {
		t.Errorf("the default: %v %v", rt, err)
	}
	if _, err := New(opts(-1)); err == nil || !strings.Contains(err.Error(), "MaxStreamsPerUser") {
		t.Errorf("a negative MaxStreamsPerUser: %v", err)
	}
}

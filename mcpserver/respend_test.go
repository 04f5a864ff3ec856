package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/workers"
)

// The response to a request on the stateless endpoint ends with the event
// that carries it, while the SDK's handler is still closing the request's
// session (here: blocked until the test lets it go), so that a client that
// stops reading after the event finds the stream ended and keeps the
// connection; what the handler writes after is dropped, and Drain waits
// for it.
func TestResponseEndsWithItsEvent(t *testing.T) {
	t.Parallel()
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), warm: workers.New(time.Minute)}
	defer s.warm.Close()
	release := make(chan struct{})
	late := make(chan error, 1)
	sdk := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\nid: _0\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "event: message\nid: _1\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n")
		http.NewResponseController(w).Flush()
		<-release // the SDK closing the request's session
		_, err := io.WriteString(w, "event: message\ndata: {}\n\n")
		late <- err
	})
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, _ := peekRequest(body)
		s.serveToResponse(w, r, id, sdk)
	}))
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()

	client := ts.Client()
	client.Timeout = 10 * time.Second // the response must end before the handler is let go
	post := func(body string) string {
		t.Helper()
		resp, err := client.Post(ts.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body) // ends only when the response does
		if err != nil {
			close(release)
			t.Fatalf("the response did not end with its event: %v", err)
		}
		return string(got)
	}
	got := post(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`)
	if !strings.Contains(got, "notifications/progress") || !strings.HasSuffix(got, `"id":7,"result":{}}`+"\n\n") {
		t.Errorf("the response is %q, want the notification and the result, ending with the result", got)
	}
	done := make(chan error, 1)
	go func() { done <- waitGroup(t.Context(), &s.detached) }()
	select {
	case <-done:
		t.Fatal("Drain's wait ended while the SDK's handler was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-late; !errors.Is(err, errResponseEnded) {
		t.Errorf("a write after the response ended returned %v, want errResponseEnded", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The connection is the same for the next request.
	release = make(chan struct{})
	close(release)
	post(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if n := conns.Load(); n != 1 {
		t.Errorf("two requests took %d connections, want 1", n)
	}
}

func TestIsResponseEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		event string
		id    string
		want  bool
	}{
		{"the response", "event: message\nid: _1\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n", "7", true},
		{"an error response", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-32600,\"message\":\"x\"}}\n\n", `"a"`, true},
		{"another request's", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n", "7", false},
		{"a string id is not the number", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"7\",\"result\":{}}\n\n", "7", false},
		{"a notification", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n", "7", false},
		{"a request to the client with the same id", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\",\"result\":{}}\n\n", "7", false},
		{"not a whole event", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n", "7", false},
		{"two events", "data: {}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n", "7", false},
		{"two data lines", "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{}}\n\n", "7", false},
		{"a priming event", "id: _0\ndata: \n\n", "7", false},
		{"another encoding of the response", "event: message\ndata: {\"id\":7,\"jsonrpc\":\"2.0\",\"result\":{}}\n\n", "7", false},
		{"an id that only begins the same", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}\n\n", "7", false},
		{"plain JSON", "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}", "7", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isResponseEvent([]byte(tc.event), []byte(tc.id)); got != tc.want {
				t.Errorf("isResponseEvent(%q, %s) = %v, want %v", tc.event, tc.id, got, tc.want)
			}
		})
	}
}

// TestPeekRequest: a request's compact id, and its method, which routes a
// request of a stateful endpoint (see Server.servedStateless).
func TestPeekRequest(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`: "1",
		`{"jsonrpc":"2.0","id": "x y" ,"method":"ping"}`:             `"x y"`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:     "",
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`:                "",
		`{"jsonrpc":"2.0","id":1,"result":{}}`:                       "",
		`not json`:                                                   "",
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`:             `{"a":1}`,
	} {
		if got, _ := peekRequest([]byte(body)); string(got) != want {
			t.Errorf("peekRequest(%s) = %q, want %q", body, got, want)
		}
	}
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`: "initialize",
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:     "notifications/initialized",
		`{"jsonrpc":"2.0","id":1,"result":{}}`:                       "",
		`not json`:                                                   "",
	} {
		if _, got := peekRequest([]byte(body)); got != want {
			t.Errorf("peekRequest(%s) method = %q, want %q", body, got, want)
		}
	}
}

// Drain waits for the SDK's handlers that go on after their response only
// as long as its context allows: a handler that does not end (here, one
// the test holds open) leaves Drain with the context's error, and a Drain
// after it has ended returns nil.
func TestDrainIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.server.detached.Add(1) // a handler closing its request's session
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := e.server.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain while a handler goes on = %v, want context.DeadlineExceeded", err)
	}
	e.server.detached.Done()
	if err := e.server.Drain(t.Context()); err != nil {
		t.Errorf("Drain once it has ended = %v", err)
	}
}

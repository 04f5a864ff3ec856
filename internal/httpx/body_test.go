package httpx

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// readBound is the body read timeout of these tests: short, so that
// outliving it takes little time.
const readBound = 300 * time.Millisecond

// trickle sends a request declaring a 4000-byte body over a real loopback
// connection, then one byte every 20 ms, and returns the response the
// server sends while the body is still trickling in.
func trickle(t *testing.T, addr, path string) (*http.Response, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{", path, addr)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	// Failing this deadline is the failure under test: without the read
	// timeout, the answer waits for a body that takes 80 s to arrive.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles in: %v", err)
	}
	return resp, time.Since(start)
}

func TestReadBodyAnswersASlowBody408(t *testing.T) {
	reached := make(chan struct{}, 1)
	srv := httptest.NewServer(ReadBody(1<<20, readBound, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
	})))
	t.Cleanup(srv.Close)
	resp, took := trickle(t, srv.Listener.Addr().String(), "/mcp")
	defer resp.Body.Close()
	var body struct{ Error Error }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || body.Error.Code != "request_timeout" || !resp.Close {
		t.Errorf("slow body = %d %q (close %v), want 408 request_timeout and the connection closed", resp.StatusCode, body.Error.Code, resp.Close)
	}
	if took < readBound {
		t.Errorf("answered after %s, before the %s bound", took, readBound)
	}
	select {
	case <-reached:
		t.Error("the handler ran with a partial body")
	default:
	}
}

func TestReadBodyHandsTheWholeBody(t *testing.T) {
	srv := httptest.NewServer(ReadBody(64, readBound, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		io.WriteString(w, strings.ToUpper(string(b)))
	})))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name   string
		body   io.Reader
		status int
		want   string
	}{
		{"declared length", strings.NewReader("hello"), 200, "HELLO"},
		{"chunked", io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo")), 200, "HELLO"},
		{"declared too large", strings.NewReader(strings.Repeat("x", 65)), 413, `"body_too_large"`},
		{"chunked too large", io.MultiReader(strings.NewReader(strings.Repeat("x", 65))), 413, `"body_too_large"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := srv.Client().Post(srv.URL, "text/plain", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, b, tc.status, tc.want)
			}
		})
	}
}

// Once its body is in, a request outlives the bound: its context is not
// ended by the read deadline, whether it had a body or not, and a
// streamed response keeps flowing.
func TestReadBodyDeadlineEndsWithTheBody(t *testing.T) {
	srv := httptest.NewServer(ReadBody(1<<20, readBound, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		// Three times the bound, a beat every tenth of it.
		for i := range 30 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(readBound / 10):
			}
			fmt.Fprintf(w, "%d\n", i)
			rc.Flush()
		}
		io.WriteString(w, "done\n")
	})))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		method string
		body   io.Reader
	}{{"GET", nil}, {"POST", strings.NewReader(`{"a":1}`)}} {
		t.Run(tc.method, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || !strings.HasSuffix(string(b), "29\ndone\n") {
				t.Errorf("stream = %q (%v), want 30 beats and done", b, err)
			}
		})
	}
}

// A WebSocket's reads are its own: a message sent after the bound arrives.
func TestReadBodyLeavesWebSocketsAlone(t *testing.T) {
	upgrader := websocket.Upgrader{}
	srv := httptest.NewServer(ReadBody(1<<20, readBound, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			typ, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if err := conn.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})))
	t.Cleanup(srv.Close)
	conn, _, err := websocket.DefaultDialer.DialContext(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range 3 {
		// Each message waits past the bound before it is sent.
		time.Sleep(readBound + readBound/2)
		if err := conn.WriteMessage(websocket.TextMessage, []byte{'0' + byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != string([]byte{'0' + byte(i)}) {
			t.Fatalf("echo %d = %q, %v", i, msg, err)
		}
	}
}

package mcpserver

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// sseEvent is one event of a response stream: its id and data.
type sseEvent struct{ id, data string }

// readEvent reads the next event of an SSE stream, or fails.
func readEvent(t *testing.T, r *bufio.Reader) (sseEvent, bool) {
	t.Helper()
	var e sseEvent
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return e, false
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "" && seen:
			return e, true
		case strings.HasPrefix(line, "id:"):
			e.id, seen = strings.TrimSpace(line[3:]), true
		case strings.HasPrefix(line, "data:"):
			e.data, seen = e.data+strings.TrimSpace(line[5:]), true
		case line != "":
			seen = true
		}
	}
}

// cutAfterFirstEvent is a proxy in front of base that passes on a
// response stream's first event only, then breaks the client's connection,
// as a network fault mid-stream does; it reads the rest of the replica's
// response to its end first, so that the replica has sent (and kept)
// everything when the client sees the break.
func cutAfterFirstEvent(t *testing.T, base string) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, r.Body)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			_, _ = io.WriteString(w, line)
			if err != nil || line == "\n" {
				break
			}
		}
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, br)
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestResumeOnOtherReplica: a call's response stream broken on the replica
// that serves it, after its priming event, is resumed with Last-Event-ID
// on the other replica, which replays the answer it missed from the
// database; a resumption from an event that is not kept is refused; and
// another principal cannot resume the session's stream. On both engines.
func TestResumeOnOtherReplica(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) store.Store{"SQLite": storetest.NewSQLite, "PostgreSQL": storetest.NewPostgres} {
		t.Run(name, func(t *testing.T) { testResumeOnOtherReplica(t, open(t)) })
	}
}

func testResumeOnOtherReplica(t *testing.T, st store.Store) {
	r := newReplicas(t, envConfig{store: st})
	cs := r.connectVia(t, r.oneURL, alice, nil, true) // the session is the first replica's
	token := r.token(alice, "")
	cut := cutAfterFirstEvent(t, r.oneURL)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, cut+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"notes_list","arguments":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	setSessionHeaders(req, token, cs.ID())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	prime, ok := readEvent(t, br)
	if !ok || prime.id == "" || prime.data != "" {
		t.Fatalf("the stream began with %+v (%v), want a priming event with an id", prime, ok)
	}
	if e, ok := readEvent(t, br); ok {
		t.Fatalf("the broken stream went on: %+v", e)
	}
	resp.Body.Close()

	status, events := resume(t, r.twoURL, token, cs.ID(), prime.id)
	if status != http.StatusOK || len(events) != 1 || !strings.Contains(events[0].data, `"id":41`) || !strings.Contains(events[0].data, `"result"`) {
		t.Fatalf("resumed on the other replica: %d %+v; want the call's answer", status, events)
	}
	stream, _, _ := strings.Cut(prime.id, "_")
	if events[0].id != stream+"_1" {
		t.Errorf("the replayed event's id = %q, want %q", events[0].id, stream+"_1")
	}

	// An event that is not kept (beyond the stream's end) is refused.
	if status, events := resume(t, r.twoURL, token, cs.ID(), stream+"_7"); status != http.StatusBadRequest || len(events) != 0 {
		t.Errorf("a resumption from an event not kept: %d %+v, want 400", status, events)
	}
	// Another principal's request with the session's handle is refused
	// before anything is replayed.
	if status, events := resume(t, r.twoURL, r.token(bob, ""), cs.ID(), prime.id); status != http.StatusNotFound || len(events) != 0 {
		t.Errorf("another principal's resumption: %d %+v, want 404", status, events)
	}
}

// setSessionHeaders sets what a stateful session's request carries.
func setSessionHeaders(req *http.Request, token, handle string) {
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", handle)
}

// resume sends a GET resuming the stream from lastEventID to base, and
// returns its status and the events it replays.
func resume(t *testing.T, base, token, handle, lastEventID string) (int, []sseEvent) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	setSessionHeaders(req, token, handle)
	req.Header.Set("Last-Event-ID", lastEventID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sseEvent
	br := bufio.NewReader(resp.Body)
	for resp.StatusCode == http.StatusOK {
		e, ok := readEvent(t, br)
		if !ok {
			break
		}
		out = append(out, e)
	}
	return resp.StatusCode, out
}

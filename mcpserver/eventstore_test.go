package mcpserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// countedRecords is a store's EventRecords that counts its appends.
type countedRecords struct {
	EventRecords
	mu      sync.Mutex
	appends [][]store.MCPEvent
}

func (c *countedRecords) AppendMCPEvents(ctx context.Context, events ...store.MCPEvent) ([]store.MCPEvent, error) {
	c.mu.Lock()
	c.appends = append(c.appends, events)
	c.mu.Unlock()
	return c.EventRecords.AppendMCPEvents(ctx, events...)
}

func (c *countedRecords) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.appends)
}

// TestPrimingEventDeferred: a stream's priming event is written with the
// stream's next event, in one append (one round trip); a resumption of the
// stream before that event writes it first, so the stream is found; and
// one that waits longer than the delay is written alone, as is one still
// waiting when the replica drains. The indexes stay the SDK's. On both
// engines.
func TestPrimingEventDeferred(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) store.Store{"SQLite": storetest.NewSQLite, "PostgreSQL": storetest.NewPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &countedRecords{EventRecords: open(t)}
			d := newDurableEvents(rec, slog.New(slog.DiscardHandler))
			ctx := t.Context()
			stored := func(stream string) []int {
				t.Helper()
				evs, err := rec.MCPEventsFrom(ctx, eventSession("s"), stream, 0)
				if err != nil {
					t.Fatal(err)
				}
				var idx []int
				for _, e := range evs {
					idx = append(idx, e.Index)
				}
				return idx
			}
			replay := func(stream string, from int) ([]string, error) {
				var out []string
				for data, err := range d.After(ctx, "s", stream, from) {
					if err != nil {
						return out, err
					}
					out = append(out, string(data))
				}
				return out, nil
			}

			// The priming event and the answer: one append.
			if err := d.Append(ctx, "s", "a", nil); err != nil {
				t.Fatal(err)
			}
			if rec.count() != 0 || len(stored("a")) != 0 {
				t.Fatalf("the priming event was written at once (%d appends)", rec.count())
			}
			if err := d.Append(ctx, "s", "a", []byte(`{"answer":1}`)); err != nil {
				t.Fatal(err)
			}
			if rec.count() != 1 || len(rec.appends[0]) != 2 || fmt.Sprint(stored("a")) != "[0 1]" {
				t.Fatalf("%d appends (%v), stored %v; want one of both, indexes 0 and 1", rec.count(), rec.appends, stored("a"))
			}
			if got, err := replay("a", 0); err != nil || fmt.Sprint(got) != `[{"answer":1}]` {
				t.Errorf("replay after the priming event = %q, %v", got, err)
			}

			// Resumed before its answer: the priming event is written
			// first, and the stream is found, with nothing to replay.
			if err := d.Append(ctx, "s", "b", nil); err != nil {
				t.Fatal(err)
			}
			if got, err := replay("b", 0); err != nil || len(got) != 0 || fmt.Sprint(stored("b")) != "[0]" {
				t.Fatalf("resumed before its answer: %q, %v; stored %v, want nothing, no error, [0]", got, err, stored("b"))
			}
			if err := d.Append(ctx, "s", "b", []byte(`{"answer":2}`)); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(stored("b")) != "[0 1]" {
				t.Errorf("stream b stored %v, want [0 1]", stored("b"))
			}

			// A stream whose answer takes longer than the delay: its
			// priming event is written alone.
			d.delay = 20 * time.Millisecond
			n := rec.count()
			if err := d.Append(ctx, "s", "c", nil); err != nil {
				t.Fatal(err)
			}
			d.mu.Lock()
			p := d.primes[streamKey{eventSession("s"), "c"}]
			d.mu.Unlock()
			if p == nil {
				t.Fatal("no priming event waiting")
			}
			<-p.written
			if rec.count() != n+1 || fmt.Sprint(stored("c")) != "[0]" {
				t.Fatalf("after the delay: %d appends, stored %v; want the priming event alone", rec.count()-n, stored("c"))
			}
			if err := d.Append(ctx, "s", "c", []byte(`{"answer":3}`)); err != nil {
				t.Fatal(err)
			}
			if rec.count() != n+2 || fmt.Sprint(stored("c")) != "[0 1]" {
				t.Errorf("the answer: %d appends, stored %v; want it alone, [0 1]", rec.count()-n, stored("c"))
			}

			// A replica going away writes the priming events still
			// waiting, for the clients that resume elsewhere.
			d.delay = time.Hour
			if err := d.Append(ctx, "s", "d", nil); err != nil {
				t.Fatal(err)
			}
			d.flushPrimes()
			if fmt.Sprint(stored("d")) != "[0]" {
				t.Errorf("after flushPrimes stream d stored %v, want [0]", stored("d"))
			}
		})
	}
}

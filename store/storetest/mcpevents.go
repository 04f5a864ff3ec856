package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testMCPEvents: a stream's events get consecutive indexes from 0, per
// stream, and are read back from an index on; each session holds at most
// store.MCPEventsPerSession of them (its oldest go), events older than
// store.MCPEventRetention go as a new stream begins, and an invalid event
// is refused and stores nothing.
func testMCPEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	appendEv := func(session, stream, data string, at time.Time) store.MCPEvent {
		t.Helper()
		evs, err := s.AppendMCPEvents(ctx, store.MCPEvent{Session: session, Stream: stream, Data: []byte(data), CreatedAt: at})
		if err != nil || len(evs) != 1 {
			t.Fatalf("AppendMCPEvents(%s, %s) = %v, %v", session, stream, evs, err)
		}
		return evs[0]
	}
	indexes := func(session, stream string, from int) []int {
		t.Helper()
		evs, err := s.MCPEventsFrom(ctx, session, stream, from)
		if err != nil {
			t.Fatalf("MCPEventsFrom: %v", err)
		}
		var out []int
		for _, e := range evs {
			out = append(out, e.Index)
		}
		return out
	}

	if e := appendEv("a", "s1", "", now); e.Index != 0 {
		t.Errorf("first event's index = %d, want 0", e.Index)
	}
	appendEv("a", "s1", `{"n":1}`, now)
	appendEv("a", "s2", `{"other":true}`, now)
	if e := appendEv("a", "s1", `{"n":2}`, now); e.Index != 2 {
		t.Errorf("third event's index = %d, want 2", e.Index)
	}
	evs, err := s.MCPEventsFrom(ctx, "a", "s1", 1)
	if err != nil || len(evs) != 2 || evs[0].Index != 1 || !bytes.Equal(evs[1].Data, []byte(`{"n":2}`)) || evs[0].Stream != "s1" {
		t.Fatalf("MCPEventsFrom(a, s1, 1) = %+v, %v", evs, err)
	}
	if got := indexes("a", "s1", 0); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("stream s1 = %v, want [0 1 2]", got)
	}
	if got := indexes("b", "s1", 0); len(got) != 0 {
		t.Errorf("another session's stream = %v, want none", got)
	}
	if evs, _ := s.MCPEventsFrom(ctx, "a", "s1", 0); len(evs[0].Data) != 0 {
		t.Errorf("a priming event's data = %q, want empty", evs[0].Data)
	}

	// Several events at once, in order: a stream's priming event and its
	// first message, and another stream's.
	evs, err = s.AppendMCPEvents(ctx,
		store.MCPEvent{Session: "a", Stream: "s3", CreatedAt: now},
		store.MCPEvent{Session: "a", Stream: "s3", Data: []byte(`{"n":1}`), CreatedAt: now},
		store.MCPEvent{Session: "a", Stream: "s1", Data: []byte(`{"n":3}`), CreatedAt: now})
	if err != nil || len(evs) != 3 || evs[0].Index != 0 || evs[1].Index != 1 || evs[2].Index != 3 {
		t.Fatalf("AppendMCPEvents of three = %+v, %v; want indexes 0, 1 and 3", evs, err)
	}
	if got := indexes("a", "s3", 0); fmt.Sprint(got) != "[0 1]" {
		t.Errorf("stream s3 = %v, want [0 1]", got)
	}
	if _, err := s.AppendMCPEvents(ctx); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AppendMCPEvents of none = %v, want ErrInvalid", err)
	}

	// The bound per session: the oldest go. The events are appended a
	// batch of 107 at a time; each is trimmed as if it came alone.
	for b := range 10 {
		batch := make([]store.MCPEvent, (store.MCPEventsPerSession+70)/10)
		for i := range batch {
			batch[i] = store.MCPEvent{Session: "full", Stream: "s", Data: []byte("{}"),
				CreatedAt: now.Add(time.Duration(b*len(batch)+i) * time.Millisecond)}
		}
		if _, err := s.AppendMCPEvents(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	got := indexes("full", "s", 0)
	if len(got) > store.MCPEventsPerSession+64 || len(got) < store.MCPEventsPerSession || got[0] == 0 {
		t.Errorf("a session past its bound holds %d events from %d", len(got), got[0])
	}
	if got[len(got)-1] != store.MCPEventsPerSession+69 {
		t.Errorf("the newest event is %d, want %d", got[len(got)-1], store.MCPEventsPerSession+69)
	}

	// A session of many short streams (a stateful session's requests) is
	// trimmed at one stream begun in 64, by its id's FNV-1a hash, not at
	// each: a trim reads the session's newest events.
	streamName := func(trims bool, from int) (string, int) {
		for i := from; ; i++ {
			name := fmt.Sprintf("r%d", i)
			h := fnv.New32a()
			h.Write([]byte(name))
			if (h.Sum32()%64 == 0) == trims {
				return name, i + 1
			}
		}
	}
	// The streams, a batch of 100 at a time: the oldest is still there
	// when none of them trimmed.
	var streams []string
	next := 0
	for b := range (store.MCPEventsPerSession + 100) / 100 {
		batch := make([]store.MCPEvent, 100)
		for i := range batch {
			var name string
			name, next = streamName(false, next)
			streams = append(streams, name)
			batch[i] = store.MCPEvent{Session: "short", Stream: name, Data: []byte("{}"),
				CreatedAt: now.Add(time.Duration(b*100+i) * time.Millisecond)}
		}
		if _, err := s.AppendMCPEvents(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(i int) bool { return len(indexes("short", streams[i], 0)) == 1 }
	if !kept(0) || !kept(len(streams)-1) {
		t.Errorf("a session of %d streams that do not trim lost its oldest (%v) or newest (%v) event, want all kept",
			len(streams), kept(0), kept(len(streams)-1))
	}
	// One that trims keeps the session's newest: of the 1,101 events the
	// 101 oldest go.
	name, _ := streamName(true, 0)
	appendEv("short", name, "{}", now.Add(time.Hour/2))
	if kept(100) || !kept(101) || !kept(len(streams)-1) {
		t.Errorf("after a stream that trims: the 101st oldest kept %v, the 102nd %v, the newest %v; want false, true, true",
			kept(100), kept(101), kept(len(streams)-1))
	}

	// Retention: a new stream sweeps the events past it.
	later := now.Add(store.MCPEventRetention + time.Minute)
	appendEv("c", "new", "", later)
	if got := indexes("a", "s1", 0); len(got) != 0 {
		t.Errorf("events past their retention remain: %v", got)
	}
	if got := indexes("c", "new", 0); len(got) != 1 {
		t.Errorf("the new stream = %v", got)
	}

	for name, bad := range map[string]store.MCPEvent{
		"no session":   {Stream: "s", Data: []byte("{}")},
		"too large":    {Session: "bad", Stream: "s", Data: bytes.Repeat([]byte("x"), store.MaxMCPEventData+1)},
		"long stream":  {Session: "bad", Stream: string(bytes.Repeat([]byte("s"), 300))},
		"invalid text": {Session: "bad\x00", Stream: "s"},
	} {
		if _, err := s.AppendMCPEvents(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendMCPEvents (%s) = %v, want ErrInvalid", name, err)
		}
		// With a valid event before it: neither is stored.
		if _, err := s.AppendMCPEvents(ctx, store.MCPEvent{Session: "bad", Stream: "s", Data: []byte("{}")}, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendMCPEvents (valid, %s) = %v, want ErrInvalid", name, err)
		}
	}
	if got := indexes("bad", "s", 0); len(got) != 0 {
		t.Errorf("an invalid event was stored: %v", got)
	}
}

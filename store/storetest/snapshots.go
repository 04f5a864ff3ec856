package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/usherhq/usher/store"
)

// snapshotLog opens run id with a conversation of one turn and the next
// user message: message events at 1, 3, 4 and 6, others at 2 and 5.
func snapshotLog(t *testing.T, s store.Store, id string) {
	t.Helper()
	first := userMessage("plan a trip")
	mustOpenRun(t, s, id, &first)
	for _, e := range []struct{ typ, payload string }{
		{"agent.turn.start", `{"messageSeq":1}`},
		{"message.assistant", `{"content":"Listing notes.","toolCalls":[{"id":"c1","name":"notes_list","arguments":{}}],"messageSeq":1}`},
		{"message.tool", `{"toolCallId":"c1","content":"[]","messageSeq":1}`},
		{"agent.turn.end", `{"messageSeq":1,"status":"completed"}`},
		{"message.user", `{"content":"and then?"}`},
	} {
		if _, err := s.AppendEvent(t.Context(), id, e.typ, json.RawMessage(e.payload)); err != nil {
			t.Fatalf("AppendEvent(%s): %v", e.typ, err)
		}
	}
}

// testSnapshots: snapshots are appended version after version, each
// covering a prefix of the run's messages that ends no earlier than the
// latest one's, and read back as stored; what breaks the contract is
// refused; the run's events and row are never touched.
func testSnapshots(t *testing.T, s store.Store) {
	ctx := t.Context()
	snapshotLog(t, s, "run-1")
	snapshotLog(t, s, "run-2")

	if _, err := s.LatestSnapshot(ctx, "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSnapshot of a run without one = %v, want ErrNotFound", err)
	}
	if got, err := s.ListSnapshots(ctx, "run-1"); err != nil || len(got) != 0 {
		t.Errorf("ListSnapshots of a run without one = %+v, %v; want none", got, err)
	}
	if _, err := s.ListSnapshots(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListSnapshots of a missing run = %v, want ErrNotFound", err)
	}
	if _, err := s.LatestSnapshot(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSnapshot of a missing run = %v, want ErrNotFound", err)
	}

	eventsBefore, err := s.ListEvents(ctx, "run-1", 0, 100)
	if err != nil || len(eventsBefore) != 6 {
		t.Fatalf("ListEvents = %d events, %v; want 6", len(eventsBefore), err)
	}
	runBefore, err := s.GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}

	snap := func(version, from, to int64, summary string) store.ContextSnapshot {
		return store.ContextSnapshot{RunID: "run-1", Version: version, FromSeq: from, ToSeq: to,
			Summary: summary, Tokens: int64(len(summary) / 4), Kind: store.SnapshotAutomatic, Model: "demo"}
	}
	put := func(in store.ContextSnapshot) store.ContextSnapshot {
		t.Helper()
		out, err := s.AppendSnapshot(ctx, in)
		if err != nil {
			t.Fatalf("AppendSnapshot(version %d, %d to %d) = %v", in.Version, in.FromSeq, in.ToSeq, err)
		}
		checkStoreTime(t, "ContextSnapshot.CreatedAt", out.CreatedAt)
		in.CreatedAt = out.CreatedAt
		if out != in {
			t.Errorf("AppendSnapshot returned %+v, want %+v", out, in)
		}
		return out
	}

	v1 := put(snap(1, 1, 4, "The user asked for a trip; the notes were empty."))
	if got, err := s.LatestSnapshot(ctx, "run-1"); err != nil || got != v1 {
		t.Errorf("LatestSnapshot = %+v, %v; want %+v", got, err, v1)
	}

	refused := []struct {
		name string
		in   store.ContextSnapshot
		want error
	}{
		{"coverage not from the first message", snap(2, 3, 4, "s"), store.ErrInvalid},
		{"coverage ending at an event that is no message", snap(2, 1, 5, "s"), store.ErrInvalid},
		{"coverage ending after the log", snap(2, 1, 99, "s"), store.ErrInvalid},
		{"coverage ending before it starts", snap(2, 3, 1, "s"), store.ErrInvalid},
		{"coverage from 0", snap(2, 0, 4, "s"), store.ErrInvalid},
		{"version 0", snap(0, 1, 4, "s"), store.ErrInvalid},
		{"no summary", snap(2, 1, 4, ""), store.ErrInvalid},
		{"a summary over the bound", snap(2, 1, 4, strings.Repeat("x", store.MaxSnapshotSummary+1)), store.ErrInvalid},
		{"a summary with NUL", snap(2, 1, 4, "a\x00b"), store.ErrInvalid},
		{"a summary not UTF-8", snap(2, 1, 4, "a\xffb"), store.ErrInvalid},
		{"no kind", func() store.ContextSnapshot { x := snap(2, 1, 4, "s"); x.Kind = ""; return x }(), store.ErrInvalid},
		{"negative tokens", func() store.ContextSnapshot { x := snap(2, 1, 4, "s"); x.Tokens = -1; return x }(), store.ErrInvalid},
		{"no run ID", func() store.ContextSnapshot { x := snap(2, 1, 4, "s"); x.RunID = ""; return x }(), store.ErrInvalid},
		{"a missing run", func() store.ContextSnapshot { x := snap(1, 1, 4, "s"); x.RunID = "missing"; return x }(), store.ErrNotFound},
		{"a version taken", snap(1, 1, 4, "s"), store.ErrConflict},
		{"a version skipped", snap(3, 1, 4, "s"), store.ErrConflict},
		{"coverage ending before the latest's", snap(2, 1, 3, "s"), store.ErrConflict},
	}
	for _, tt := range refused {
		if got, err := s.AppendSnapshot(ctx, tt.in); !errors.Is(err, tt.want) {
			t.Errorf("AppendSnapshot(%s) = %+v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	// A summary of the bound's size is taken; so is the same coverage
	// again (a better summary of it), and a manual snapshot.
	v2 := put(snap(2, 1, 4, strings.Repeat("y", store.MaxSnapshotSummary)))
	v3 := snap(3, 1, 6, "héllo: the user asks what comes next.")
	v3.Kind, v3.Model, v3.Tokens = store.SnapshotManual, "", 0
	v3 = put(v3)

	if got, err := s.ListSnapshots(ctx, "run-1"); err != nil || !reflect.DeepEqual(got, []store.ContextSnapshot{v1, v2, v3}) {
		t.Errorf("ListSnapshots = %+v, %v; want versions 1, 2, 3 as appended", got, err)
	}
	if got, err := s.LatestSnapshot(ctx, "run-1"); err != nil || got != v3 {
		t.Errorf("LatestSnapshot = %+v, %v; want version 3", got, err)
	}
	// Another run's versions are its own.
	other := snap(1, 1, 3, "another conversation")
	other.RunID = "run-2"
	put(other)
	if got, err := s.ListSnapshots(ctx, "run-1"); err != nil || len(got) != 3 {
		t.Errorf("ListSnapshots(run-1) after run-2's = %d snapshots, %v; want 3", len(got), err)
	}

	// No event of the run, nor its row, was touched.
	eventsAfter, err := s.ListEvents(ctx, "run-1", 0, 100)
	if err != nil || len(eventsAfter) != len(eventsBefore) {
		t.Fatalf("ListEvents after the snapshots = %d events, %v; want %d", len(eventsAfter), err, len(eventsBefore))
	}
	for i, e := range eventsAfter {
		b := eventsBefore[i]
		if e.Seq != b.Seq || e.Type != b.Type || !bytes.Equal(e.Payload, b.Payload) || e.CreatedAt != b.CreatedAt || e.RunID != b.RunID {
			t.Errorf("event %d after the snapshots = %+v, was %+v", i, e, b)
		}
	}
	if runAfter, err := s.GetRun(ctx, "run-1"); err != nil || runAfter != runBefore {
		t.Errorf("run after the snapshots = %+v, %v\nwas %+v", runAfter, err, runBefore)
	}

	// A run without messages has nothing to summarise; a deleted run
	// takes no snapshot.
	mustCreateRun(t, s, store.Run{ID: "run-3", Owner: "alice", Status: store.RunInProgress})
	if _, err := s.AppendEvent(ctx, "run-3", "agent.turn.start", nil); err != nil {
		t.Fatal(err)
	}
	empty := snap(1, 1, 1, "nothing")
	empty.RunID = "run-3"
	if _, err := s.AppendSnapshot(ctx, empty); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AppendSnapshot of a run without messages = %v, want ErrInvalid", err)
	}
	if err := s.DeleteRun(ctx, "run-2", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	deleted := snap(2, 1, 4, "after the deletion")
	deleted.RunID = "run-2"
	if _, err := s.AppendSnapshot(ctx, deleted); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendSnapshot of a deleted run = %v, want ErrNotFound", err)
	}
}

// testSnapshotRace: of concurrent appends of one version, exactly one
// succeeds and the others get ErrConflict, version after version.
func testSnapshotRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	snapshotLog(t, s, "run-1")
	const racers = 8
	for version := int64(1); version <= 3; version++ {
		start := make(chan struct{})
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				_, errs[i] = s.AppendSnapshot(ctx, store.ContextSnapshot{
					RunID: "run-1", Version: version, FromSeq: 1, ToSeq: 6,
					Summary: fmt.Sprintf("version %d by racer %d", version, i), Kind: store.SnapshotAutomatic,
				})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("version %d: racers %d and %d both appended", version, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("version %d: racer %d: %v, want nil or ErrConflict", version, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("version %d: no racer appended", version)
		}
		got, err := s.LatestSnapshot(ctx, "run-1")
		if want := fmt.Sprintf("version %d by racer %d", version, winner); err != nil || got.Version != version || got.Summary != want {
			t.Errorf("LatestSnapshot after the race = %+v, %v; want version %d, %q", got, err, version, want)
		}
	}
	if got, err := s.ListSnapshots(ctx, "run-1"); err != nil || len(got) != 3 {
		t.Errorf("ListSnapshots after the races = %d snapshots, %v; want 3", len(got), err)
	}
}

package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testRunContext: a run's context accounting is written with the lease
// holder's writes (RecordContext with or without events, EndLease's
// Release.Context), fenced like them, kept by the writes that carry none,
// and read back with the run.
func testRunContext(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	if r := mustOpenRun(t, s, "run-1", &first); r.Context != (store.RunContext{}) {
		t.Fatalf("a new run's context = %+v, want none", r.Context)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	lease := claimed[0].Lease()

	// The estimate rides on the turn's start.
	estimate := store.RunContext{Tokens: 1200, Limit: 80_000, Source: store.ContextEstimated, Seq: 1}
	evs, err := s.RecordContext(ctx, lease, estimate, store.NewEvent{Type: "agent.turn.start", StartsTurn: 1})
	if err != nil || len(evs) != 1 || evs[0].Seq != 2 {
		t.Fatalf("RecordContext with the turn's start = %+v, %v", evs, err)
	}
	r, err := s.GetRun(ctx, "run-1")
	want := estimate
	want.At = evs[0].CreatedAt
	if err != nil || r.Context != want || r.TurnSeq != 1 || r.LastSeq != 2 {
		t.Fatalf("run after RecordContext = %+v, %v; want context %+v, turn 1 open", r, err, want)
	}
	if r.Context.At.Location() != time.UTC || !r.Context.At.Equal(r.Context.At.Truncate(time.Microsecond)) {
		t.Errorf("context time %v is not UTC at microseconds", r.Context.At)
	}

	// Writes without accounting keep it.
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"calling"}`)}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetRun(ctx, "run-1"); r.Context != want {
		t.Errorf("context after an append without one = %+v, want %+v", r.Context, want)
	}

	// On its own, without events: the log and the run's times stay.
	before, _ := s.GetRun(ctx, "run-1")
	alone := store.RunContext{Tokens: 1500, Limit: 80_000, Source: store.ContextEstimated, Seq: 3}
	if evs, err := s.RecordContext(ctx, lease, alone); err != nil || len(evs) != 0 {
		t.Fatalf("RecordContext without events = %+v, %v", evs, err)
	}
	r, _ = s.GetRun(ctx, "run-1")
	if r.Context.Tokens != 1500 || r.Context.Seq != 3 || r.Context.Source != store.ContextEstimated || r.Context.At.Before(before.Context.At) ||
		r.LastSeq != before.LastSeq || r.UpdatedAt != before.UpdatedAt || r.LastActivityAt != before.LastActivityAt {
		t.Fatalf("run after RecordContext without events = %+v\nbefore %+v", r, before)
	}

	for _, bad := range []store.RunContext{
		{Tokens: -1, Limit: 10, Source: store.ContextEstimated},
		{Tokens: 1, Limit: 0, Source: store.ContextEstimated},
		{Tokens: 1, Limit: store.MaxContextTokens + 1, Source: store.ContextReported},
		{Tokens: 1, Limit: 10, Source: "guessed"},
		{Tokens: 1, Limit: 10},
		{Tokens: 1, Limit: 10, Source: store.ContextReported, Seq: -1},
	} {
		if _, err := s.RecordContext(ctx, lease, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RecordContext(%+v) = %v, want ErrInvalid", bad, err)
		}
		if _, _, err := s.EndLease(ctx, lease, store.Release{Context: &bad}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("EndLease with context %+v = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.RecordContext(ctx, store.Lease{RunID: "missing", Owner: "replica-a", Token: 1}, alone); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordContext of a missing run = %v, want ErrNotFound", err)
	}

	// The provider's figure rides on the turn's end and the release.
	reported := store.RunContext{Tokens: 1432, Limit: 80_000, Source: store.ContextReported, Seq: 3}
	evs, r, err = s.EndLease(ctx, lease, store.Release{Context: &reported},
		store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"done"}`)},
		store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true})
	if err != nil || len(evs) != 2 {
		t.Fatalf("EndLease with a context = %+v, %v", evs, err)
	}
	want = reported
	want.At = evs[0].CreatedAt
	if r.Context != want || r.LeaseOwner != "" || r.TurnSeq != 0 {
		t.Fatalf("run after EndLease = %+v; want context %+v, released", r, want)
	}
	if got, _ := s.GetRun(ctx, "run-1"); got != r {
		t.Errorf("GetRun = %+v, EndLease returned %+v", got, r)
	}
	if runs, err := s.ListRuns(ctx, queueOwner); err != nil || len(runs) != 1 || runs[0].Context != want {
		t.Errorf("ListRuns = %+v, %v; want the run with context %+v", runs, err, want)
	}

	// A lease that is no longer the run's records nothing; the current
	// one's release without accounting keeps it.
	stale := lease
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("again")); err != nil {
		t.Fatal(err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].Context != want {
		t.Fatalf("ClaimRuns = %+v, %v; want the run, with its context", claimed, err)
	}
	current := claimed[0].Lease()
	if _, err := s.RecordContext(ctx, stale, alone); !errors.Is(err, store.ErrConflict) {
		t.Errorf("RecordContext with a stale lease = %v, want ErrConflict", err)
	}
	if _, _, err := s.EndLease(ctx, stale, store.Release{Context: &alone}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("EndLease with a stale lease = %v, want ErrConflict", err)
	}
	if _, r, err := s.EndLease(ctx, current, store.Release{}); err != nil || r.Context != want {
		t.Errorf("EndLease without a context = %+v, %v; want context %+v kept", r.Context, err, want)
	}
}

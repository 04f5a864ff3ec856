package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testSteps: a slice's step opens with its first write, under its lease;
// a slice that continues a step its predecessor left open (it lost its
// lease) records no second step; a stale lease opens nothing; the budget
// refuses a new step and nothing else; EndLease ends the step with its
// event; StopTurn and CloseRun end the step they cut short.
func testSteps(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	a := claimed[0].Lease()
	start := store.StepStart{Kind: store.StepTurn, MessageSeq: 1, Budget: 2}
	step, err := s.StartStep(ctx, a, start)
	if err != nil || step.Sequence != 1 || step.Kind != store.StepTurn || step.Attempts != 1 || step.Token != a.Token ||
		!step.EndedAt.IsZero() || step.Outcome != "" {
		t.Fatalf("StartStep = %+v, %v; want step 1, open, held by the lease", step, err)
	}
	checkStoreTime(t, "StartedAt", step.StartedAt)
	// Started again under the same lease: the same step.
	if again, err := s.StartStep(ctx, a, start); err != nil || again != step {
		t.Fatalf("StartStep again = %+v, %v; want %+v", again, err, step)
	}

	// The lease is lost with its step open (released without ending it,
	// as a process that died leaves it); the next slice continues it.
	b := claimAgain(t, s, a)
	replayed, err := s.StartStep(ctx, b, store.StepStart{Kind: store.StepResume, MessageSeq: 1, Budget: 2})
	if err != nil || replayed.Sequence != 1 || replayed.Attempts != 2 || replayed.Token != b.Token || replayed.Kind != store.StepTurn {
		t.Fatalf("StartStep after the takeover = %+v, %v; want step 1 continued (attempt 2, kind kept)", replayed, err)
	}
	if _, err := s.StartStep(ctx, a, start); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("StartStep under the lost lease = %v, want ErrConflict", err)
	}
	if _, _, err := s.EndLease(ctx, a, store.Release{Step: &store.StepEnd{Outcome: store.StepEnded}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("EndLease of the lost lease = %v, want ErrConflict", err)
	}
	steps, err := s.ListSteps(ctx, "run-1", 0, 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("ListSteps = %+v, %v; want the one step", steps, err)
	}

	// The step ends with the lease, with its event after the lease's.
	events, _, err := s.EndLease(ctx, b, store.Release{Requeue: true, Step: &store.StepEnd{Outcome: store.StepYielded, ModelSteps: 2, ToolCalls: 3}},
		store.NewEvent{Type: "message.assistant"})
	if err != nil || len(events) != 1 {
		t.Fatalf("EndLease = %v, %v", events, err)
	}
	log, err := s.ListEvents(ctx, "run-1", events[0].Seq, 10)
	if err != nil || len(log) != 1 || log[0].Type != store.EventStepEnd {
		t.Fatalf("events after the lease's = %+v, %v; want one %s", log, err, store.EventStepEnd)
	}
	var rec store.StepRecord
	if err := json.Unmarshal(log[0].Payload, &rec); err != nil || rec.Sequence != 1 || rec.Outcome != store.StepYielded ||
		rec.ModelSteps != 2 || rec.ToolCalls != 3 || rec.Attempts != 2 || !rec.StartedAt.Equal(step.StartedAt) {
		t.Errorf("%s payload = %s (%v)", store.EventStepEnd, log[0].Payload, err)
	}
	steps, _ = s.ListSteps(ctx, "run-1", 0, 10)
	if len(steps) != 1 || steps[0].Outcome != store.StepYielded || steps[0].EndedAt.IsZero() || steps[0].ToolCalls != 3 {
		t.Fatalf("the ended step = %+v", steps)
	}

	// Step 2, the budget's last; a third is refused, and writes nothing.
	claimed, err = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	c := claimed[0].Lease()
	if st, err := s.StartStep(ctx, c, store.StepStart{Kind: store.StepResume, MessageSeq: 1, Budget: 2}); err != nil || st.Sequence != 2 {
		t.Fatalf("StartStep = %+v, %v; want step 2", st, err)
	}
	if _, _, err := s.EndLease(ctx, c, store.Release{Requeue: true, Step: &store.StepEnd{Outcome: store.StepYielded}}); err != nil {
		t.Fatal(err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	d := claimed[0].Lease()
	if _, err := s.StartStep(ctx, d, store.StepStart{Kind: store.StepResume, MessageSeq: 1, Budget: 2}); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("StartStep beyond the budget = %v, want ErrLimit", err)
	}
	if steps, _ := s.ListSteps(ctx, "run-1", 0, 10); len(steps) != 2 {
		t.Fatalf("%d steps after the refusal, want 2", len(steps))
	}
	// Without the budget, step 3; the stop ends it.
	if st, err := s.StartStep(ctx, d, store.StepStart{Kind: store.StepResume, MessageSeq: 1}); err != nil || st.Sequence != 3 {
		t.Fatalf("StartStep = %+v, %v; want step 3", st, err)
	}
	if _, err := s.StopTurn(ctx, "run-1", cancelledTurn, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	steps, _ = s.ListSteps(ctx, "run-1", 2, 10)
	if len(steps) != 1 || steps[0].Outcome != store.StepStopped {
		t.Fatalf("the step a stop cut short = %+v, want stopped", steps)
	}

	// Paging and refusals.
	if page, err := s.ListSteps(ctx, "run-1", 1, 1); err != nil || len(page) != 1 || page[0].Sequence != 2 {
		t.Errorf("ListSteps after 1, 1 = %+v, %v; want step 2", page, err)
	}
	if _, err := s.ListSteps(ctx, "missing", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListSteps of a missing run = %v, want ErrNotFound", err)
	}
	for _, bad := range []struct {
		after int64
		limit int
	}{{0, 0}, {-1, 10}, {0, store.MaxStepsPage + 1}} {
		if _, err := s.ListSteps(ctx, "run-1", bad.after, bad.limit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListSteps(after %d, limit %d) = %v, want ErrInvalid", bad.after, bad.limit, err)
		}
	}
	if _, err := s.StartStep(ctx, d, store.StepStart{Kind: "nap", MessageSeq: 1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("StartStep of an unknown kind = %v, want ErrInvalid", err)
	}
	if _, _, err := s.EndLease(ctx, d, store.Release{Step: &store.StepEnd{Outcome: "gone"}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndLease with an unknown outcome = %v, want ErrInvalid", err)
	}
}

// testCloseRunEndsStep: closing a run ends the step its slice left open.
func testCloseRunEndsStep(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	if _, err := s.StartStep(ctx, claimed[0].Lease(), store.StepStart{Kind: store.StepTurn, MessageSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCancelled, cancelledTurn, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	steps, err := s.ListSteps(ctx, "run-1", 0, 10)
	if err != nil || len(steps) != 1 || steps[0].Outcome != store.StepClosed {
		t.Fatalf("steps = %+v, %v; want one, closed", steps, err)
	}
}

package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// TestSweeperMarksAbandoned checks that a sweep marks, by its own clock,
// the executions started longer than AbandonedAfter ago and still started
// as outcome_unknown, audits each, and leaves the others alone.
func TestSweeperMarksAbandoned(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			ctx := t.Context()
			st := eng.open(t)
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
			begin := func(key string, at time.Time) {
				t.Helper()
				if _, _, err := st.BeginExecution(ctx, store.Execution{
					IdempotencyKey: key, Principal: alice, Tool: "fx__echo", ArgumentsHash: "h", RunID: "run-1", StartedAt: at,
				}); err != nil {
					t.Fatal(err)
				}
			}
			begin("abandoned", now.Add(-DefaultAbandonedAfter-time.Second))
			begin("running", now.Add(-DefaultAbandonedAfter+time.Second))
			audit := &auditLog{}
			sw, err := NewSweeper(&SweeperOptions{Executions: &storeExecutions{s: st, audit: audit}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			// A sweep whose records fail marks nothing.
			audit.fail = true
			if lost, err := sw.Sweep(ctx); err == nil || len(lost) != 0 {
				t.Fatalf("Sweep with a failing audit log = %v, %v; want an error", lost, err)
			}
			if e, err := st.GetExecution(ctx, "abandoned"); err != nil || e.Status != store.ExecutionStarted {
				t.Errorf("after a failed sweep the execution is %s, %v; want started", e.Status, err)
			}
			audit.fail = false
			lost, err := sw.Sweep(ctx)
			if err != nil || len(lost) != 1 || lost[0].IdempotencyKey != "abandoned" {
				t.Fatalf("Sweep = %v, %v; want the abandoned execution", lost, err)
			}
			for key, want := range map[string]store.ExecutionStatus{"abandoned": store.ExecutionOutcomeUnknown, "running": store.ExecutionStarted} {
				if e, err := st.GetExecution(ctx, key); err != nil || e.Status != want {
					t.Errorf("%s = %s, %v; want %s", key, e.Status, err, want)
				}
			}
			if len(audit.events) != 1 || audit.events[0].Kind != KindOutcomeUnknown || audit.events[0].IdempotencyKey != "abandoned" ||
				audit.events[0].RunID != "run-1" || !audit.events[0].At.Equal(now) {
				t.Errorf("audit = %+v, want one outcome_unknown of the abandoned execution, now", audit.events)
			}
			if lost, err := sw.Sweep(ctx); err != nil || len(lost) != 0 {
				t.Errorf("Sweep again = %v, %v; want none", lost, err)
			}
		})
	}
}

// countingMarks counts the sweeps that reach the store.
type countingMarks struct {
	AbandonedExecutions
	swept chan struct{}
}

func (c countingMarks) MarkAbandoned(ctx context.Context, olderThan time.Time, event func(store.Execution) Event) ([]store.Execution, error) {
	select {
	case c.swept <- struct{}{}:
	default:
	}
	return c.AbandonedExecutions.MarkAbandoned(ctx, olderThan, event)
}

// TestSweeperLifecycle checks that a Sweeper starts once and sweeps at
// once, that Stop, idempotent, joins its goroutine (TestMain finds any
// left), and that bad options are refused together.
func TestSweeperLifecycle(t *testing.T) {
	marks := countingMarks{AbandonedExecutions: &storeExecutions{s: engines[0].open(t), audit: &auditLog{}}, swept: make(chan struct{}, 1)}
	sw, err := NewSweeper(&SweeperOptions{Executions: marks, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sw.Stop() // before Start
	if err := sw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-marks.swept
	if err := sw.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	sw.Stop()
	sw.Stop()
	if _, err := NewSweeper(&SweeperOptions{Interval: -time.Second}); err == nil {
		t.Error("NewSweeper without Executions and with a negative Interval succeeded")
	}
}

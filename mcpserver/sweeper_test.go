package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/store"
)

// beginAt starts alice's execution key of run-1 in st, at.
func beginAt(t *testing.T, st store.Store, key string, at time.Time) {
	t.Helper()
	if _, _, err := st.BeginExecutionAudited(t.Context(), store.Execution{
		IdempotencyKey: key, Principal: alice, Tool: "fx__echo", ArgumentsHash: "h", RunID: "run-1", StartedAt: at,
	}, nil); err != nil {
		t.Fatal(err)
	}
}

// awaitAt starts alice's execution key of run-1 in st, at, and moves it to
// awaiting input a second later.
func awaitAt(t *testing.T, st store.Store, key string, at time.Time) {
	t.Helper()
	beginAt(t, st, key, at)
	if _, err := st.AwaitInputAudited(t.Context(), key, "", at.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
}

// TestSweeperMarksAbandoned checks that a sweep marks, by its own clock,
// the executions started longer than AbandonedAfter ago and still started
// as outcome_unknown, audits each, and leaves the others alone.
func TestSweeperMarksAbandoned(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := eng.open(t)
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
			beginAt(t, st, "abandoned", now.Add(-DefaultAbandonedAfter-time.Second))
			beginAt(t, st, "running", now.Add(-DefaultAbandonedAfter+time.Second))
			audit := &auditLog{}
			reg := prometheus.NewRegistry()
			sw, err := NewSweeper(&SweeperOptions{Executions: &storeExecutions{s: st, audit: audit}, Now: func() time.Time { return now }, Registerer: reg})
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
			if v := gauge(t, reg, "usher_mcp_outcome_unknown_total", map[string]string{"source": "sweep"}); v != 1 {
				t.Errorf("usher_mcp_outcome_unknown_total{source=sweep} = %v, want 1", v)
			}
		})
	}
}

// TestSweeperEndsAwaitingInput checks that a sweep ends, by its own
// clock, the calls awaiting input since their latest round started longer
// than InputAbandonedAfter ago — failed, with the result a retry is
// answered with — audits each, and leaves the others alone; a sweep whose
// records fail ends none.
func TestSweeperEndsAwaitingInput(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := eng.open(t)
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
			awaitAt(t, st, "unanswered", now.Add(-DefaultInputAbandonedAfter-time.Second))
			awaitAt(t, st, "answerable", now.Add(-DefaultInputAbandonedAfter+time.Second))
			audit := &auditLog{}
			sw, err := NewSweeper(&SweeperOptions{Executions: &storeExecutions{s: st, audit: audit}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			audit.fail = true
			if ended, err := sw.Sweep(ctx); err == nil || len(ended) != 0 {
				t.Fatalf("Sweep with a failing audit log = %v, %v; want an error", ended, err)
			}
			if e, err := st.GetExecution(ctx, "unanswered"); err != nil || e.Status != store.ExecutionAwaitingInput {
				t.Errorf("after a failed sweep the execution is %s, %v; want awaiting_input", e.Status, err)
			}
			audit.fail = false
			ended, err := sw.Sweep(ctx)
			if err != nil || len(ended) != 1 || ended[0].IdempotencyKey != "unanswered" {
				t.Fatalf("Sweep = %v, %v; want the unanswered call", ended, err)
			}
			e, err := st.GetExecution(ctx, "unanswered")
			if err != nil || e.Status != store.ExecutionFailed || !e.FinishedAt.Equal(now) {
				t.Fatalf("the unanswered call = %s, finished %v, %v; want failed, now", e.Status, e.FinishedAt, err)
			}
			var res mcp.CallToolResult
			if err := json.Unmarshal(e.Result, &res); err != nil || !res.IsError || len(res.Content) != 1 ||
				res.Content[0].(*mcp.TextContent).Text != inputAbandonedText {
				t.Errorf("its result = %s, %v; want the error result a retry gets", e.Result, err)
			}
			if e, err := st.GetExecution(ctx, "answerable"); err != nil || e.Status != store.ExecutionAwaitingInput {
				t.Errorf("the call still answerable = %s, %v; want awaiting_input", e.Status, err)
			}
			if len(audit.events) != 1 || audit.events[0].Kind != KindInputAbandoned || audit.events[0].IdempotencyKey != "unanswered" ||
				audit.events[0].Outcome != OutcomeFailed || audit.events[0].RunID != "run-1" || !audit.events[0].At.Equal(now) {
				t.Errorf("audit = %+v, want one input_abandoned of the unanswered call, failed, now", audit.events)
			}
			if ended, err := sw.Sweep(ctx); err != nil || len(ended) != 0 {
				t.Errorf("Sweep again = %v, %v; want none", ended, err)
			}
		})
	}
}

// TestSweeperFollowsCallBounds checks that with a longer CallTimeout and
// InputLifetime than the defaults a sweep leaves alone the calls that may
// still be running, or that their callers may still resume, and ends them
// once those bounds and a minute have passed; and that waits no longer
// than the bounds are refused.
func TestSweeperFollowsCallBounds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := engines[0].open(t)
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	callTimeout, inputLifetime := 20*time.Minute, 30*time.Minute
	// Each of "running" and "resumable" is older than the default wait.
	beginAt(t, st, "running", now.Add(-callTimeout+time.Second))
	beginAt(t, st, "lost", now.Add(-callTimeout-time.Minute-time.Second))
	awaitAt(t, st, "resumable", now.Add(-callTimeout-inputLifetime))
	awaitAt(t, st, "unanswered", now.Add(-callTimeout-inputLifetime-time.Minute-time.Second))
	executions := &storeExecutions{s: st, audit: &auditLog{}}
	sw, err := NewSweeper(&SweeperOptions{Executions: executions, CallTimeout: callTimeout, InputLifetime: inputLifetime, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	changed, err := sw.Sweep(ctx)
	var keys []string
	for _, e := range changed {
		keys = append(keys, e.IdempotencyKey)
	}
	if err != nil || !slices.Equal(keys, []string{"lost", "unanswered"}) {
		t.Errorf("Sweep changed %q, %v; want the lost call, then the unanswered one", keys, err)
	}
	for key, want := range map[string]store.ExecutionStatus{
		"running": store.ExecutionStarted, "lost": store.ExecutionOutcomeUnknown,
		"resumable": store.ExecutionAwaitingInput, "unanswered": store.ExecutionFailed,
	} {
		if e, err := st.GetExecution(ctx, key); err != nil || e.Status != want {
			t.Errorf("%s = %s, %v; want %s", key, e.Status, err, want)
		}
	}

	for name, o := range map[string]SweeperOptions{
		"AbandonedAfter within CallTimeout": {CallTimeout: callTimeout, AbandonedAfter: callTimeout},
		"InputAbandonedAfter within CallTimeout and InputLifetime": {
			CallTimeout: callTimeout, InputLifetime: inputLifetime, InputAbandonedAfter: callTimeout + inputLifetime,
		},
		"InputAbandonedAfter within the defaults": {InputAbandonedAfter: DefaultCallTimeout + DefaultInputLifetime},
		"a negative CallTimeout":                  {CallTimeout: -time.Second},
		"a negative InputLifetime":                {InputLifetime: -time.Second},
	} {
		o.Executions = executions
		if _, err := NewSweeper(&o); err == nil {
			t.Errorf("NewSweeper with %s succeeded", name)
		}
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
	t.Parallel()
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

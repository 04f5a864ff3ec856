package assistant

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// runaway scripts a model that asks for one more tool call at every step,
// n times: with one call per slice, a turn of n slices.
func runaway(ms *modeltest.Server, n int) {
	for i := range n {
		ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "count", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
}

// checkBudgetStop runs a turn that would take 300 slices on a runtime
// whose budget is maxSlices: the run stops, failed, after exactly
// maxSlices slices, each with its step and its agent.step.end, and the
// reason is in the log (agent.run.budget) and in the turn's end.
func checkBudgetStop(t *testing.T, st store.Store, o Options, maxSlices int) {
	t.Helper()
	ctx := t.Context()
	ms := modeltest.NewServer(t)
	tools := newCountingTools(t, st)
	o.MaxToolCallsPerSlice, o.MaxSteps = 1, 1000
	rt, runID := startRuntime(t, st, ms, tools, o)
	runaway(ms, 300)
	e, _, _, err := rt.PostMessage(ctx, "owner", Sender{}, runID, "count for ever", "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := waitTurn(ctx, rt, "owner", runID, e.Seq, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := budgetMessage(maxSlices)
	if out.Status != TurnFailed || out.End == nil || out.End.Error != want {
		t.Fatalf("the turn = %s %+v, want failed: %q", out.Status, out.End, want)
	}
	r, err := st.GetRun(ctx, runID)
	if err != nil || r.Status != store.RunFailed {
		t.Fatalf("the run = %s, %v; want Failed", r.Status, err)
	}
	if n := len(tools.executions()); n != maxSlices {
		t.Errorf("%d tool calls ran, want %d: one per slice of the budget", n, maxSlices)
	}
	steps, err := st.ListSteps(ctx, runID, 0, store.MaxStepsPage)
	if err != nil || len(steps) != maxSlices {
		t.Fatalf("%d steps (%v), want %d", len(steps), err, maxSlices)
	}
	for i, s := range steps {
		kind := store.StepResume
		if i == 0 {
			kind = store.StepTurn
		}
		if s.Sequence != int64(i+1) || s.Kind != kind || s.Outcome != store.StepYielded || s.ModelSteps != 1 || s.ToolCalls != 1 || s.Attempts != 1 {
			t.Fatalf("step %d = %+v, want %s, yielded after one model step and one tool call", i+1, s, kind)
		}
	}
	var ends, budgets int
	for after := int64(0); ; {
		events, err := st.ListEvents(ctx, runID, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			switch e.Type {
			case EventStepEnd:
				ends++
			case EventRunBudget:
				var b RunBudget
				if err := json.Unmarshal(e.Payload, &b); err != nil || b.MaxSlices != maxSlices || b.Message != want {
					t.Errorf("%s = %s", EventRunBudget, e.Payload)
				}
				budgets++
			}
		}
		if len(events) < 500 {
			break
		}
		after = events[len(events)-1].Seq
	}
	if ends != maxSlices || budgets != 1 {
		t.Errorf("%d %s and %d %s events, want %d and 1", ends, EventStepEnd, budgets, EventRunBudget, maxSlices)
	}
}

// TestSliceBudget: a turn that would take 300 slices stops at a budget
// of 7, on both engines.
func TestSliceBudget(t *testing.T) {
	onEngines(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		checkBudgetStop(t, st, Options{MaxSlices: 7}, 7)
	})
}

// TestSliceBudgetDefault: the same turn stops at the default budget,
// 250 slices.
func TestSliceBudgetDefault(t *testing.T) {
	t.Parallel()
	checkBudgetStop(t, storetest.NewSQLite(t), Options{}, DefaultMaxSlices)
}

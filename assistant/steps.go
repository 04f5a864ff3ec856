package assistant

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Steps and the run's slice budget. Each slice of work on a run (one
// claim's work on its turn) opens its durable step with its first write
// (store.StartStep) and ends it with its last (the lease's end), which
// logs an agent.step.end; a slice whose process died leaves its step open
// and the next slice continues it, under the same sequence. A run may have
// at most Options.MaxSlices steps: the slice that would start one more
// stops the run instead (budgetStop), beside the per-turn limit of model
// steps (Options.MaxSteps).

// RunBudget is the payload of an agent.run.budget event.
type RunBudget struct {
	// MaxSlices is the budget the run reached.
	MaxSlices int `json:"maxSlices"`
	// Message says so, for people.
	Message string `json:"message"`
}

// errSliceBudget stops a slice that would start a step beyond the run's
// budget.
var errSliceBudget = errors.New("assistant: the run reached its budget of slices")

// budgetMessage is the text of a run stopped at its budget.
func budgetMessage(maxSlices int) string {
	return fmt.Sprintf("This session stopped: it reached its limit of %d slices of work. Start a new session to go on.", maxSlices)
}

// budgetStop ends the run r, failed, at its budget of slices: it records
// the budget's event and ends the open turn, and the turn of every
// message waiting for one, failed with the same text.
func (rt *Runtime) budgetStop(ctx context.Context, r store.Run) {
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	text := budgetMessage(rt.o.MaxSlices)
	first := true
	_, err := rt.st.CloseRun(ctx, r.ID, store.RunFailed, func(turnSeq int64, started bool) []store.NewEvent {
		var out []store.NewEvent
		if first {
			first = false
			out = append(out, store.NewEvent{Type: EventRunBudget, Payload: mustJSON(RunBudget{MaxSlices: rt.o.MaxSlices, Message: text})})
		}
		if !started {
			out = append(out, store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: turnSeq}), StartsTurn: turnSeq})
		}
		return append(out, store.NewEvent{Type: EventTurnEnd, EndsTurn: true,
			Payload: mustJSON(TurnEnd{MessageSeq: turnSeq, Status: TurnFailed, Error: text})})
	}, rt.withdrawal(r.Owner, text))
	if err != nil && !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrNotFound) {
		rt.log.Error("assistant: stopping a run at its budget of slices failed", "run", r.ID, "err", err)
		return
	}
	rt.log.Warn("assistant: a run stopped at its budget of slices", "run", r.ID, "max_slices", rt.o.MaxSlices)
}

// startStep opens the slice's step, its first write.
func (t *turn) startStep(ctx context.Context, starting bool) error {
	kind := store.StepResume
	if starting {
		kind = store.StepTurn
	}
	s, err := t.rt.st.StartStep(ctx, t.currentLease(), store.StepStart{Kind: kind, MessageSeq: t.seq, Budget: int64(t.rt.o.MaxSlices)})
	switch {
	case errors.Is(err, store.ErrLimit):
		return errSliceBudget
	case errors.Is(err, store.ErrConflict):
		return errLeaseLost
	case err != nil:
		return err
	}
	t.step = &s
	return nil
}

// stepEnd is how the slice's lease ends its step with outcome: nil when
// the slice opened none.
func (t *turn) stepEnd(outcome store.StepOutcome) *store.StepEnd {
	if t.step == nil {
		return nil
	}
	return &store.StepEnd{Outcome: outcome, ModelSteps: int64(t.modelSteps), ToolCalls: int64(t.toolCalls)}
}

// StepView is a step as the API shows it.
type StepView struct {
	Sequence int64 `json:"sequence"`
	// Key is the step's idempotency key: run:{runId}:step:{sequence}.
	Key        string    `json:"key"`
	Kind       string    `json:"kind"`
	MessageSeq int64     `json:"messageSeq"`
	Outcome    string    `json:"outcome,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	ModelSteps int64     `json:"modelSteps"`
	ToolCalls  int64     `json:"toolCalls"`
	Attempts   int64     `json:"attempts"`
}

func viewStep(s store.Step) StepView {
	return StepView{Sequence: s.Sequence, Key: "run:" + s.RunID + ":step:" + strconv.FormatInt(s.Sequence, 10),
		Kind: string(s.Kind), MessageSeq: s.MessageSeq, Outcome: string(s.Outcome),
		StartedAt: s.StartedAt, EndedAt: s.EndedAt, ModelSteps: s.ModelSteps, ToolCalls: s.ToolCalls, Attempts: s.Attempts}
}

// handleSteps lists the run's steps, in order: after the sequence after
// (default 0), at most take (1 to maxTake, default defaultTake).
func (rt *Runtime) handleSteps(w http.ResponseWriter, r *http.Request) {
	run, ok := rt.ownRun(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var errs []string
	after, take := int64(0), int64(defaultTake)
	for _, p := range []struct {
		name     string
		min, max int64
		into     *int64
	}{{"after", 0, 1 << 53, &after}, {"take", 1, maxTake, &take}} {
		if !q.Has(p.name) {
			continue
		}
		n, err := strconv.ParseInt(q.Get(p.name), 10, 64)
		if err != nil || n < p.min || n > p.max {
			errs = append(errs, p.name+" must be a whole number from "+strconv.FormatInt(p.min, 10)+" to "+strconv.FormatInt(p.max, 10))
			continue
		}
		*p.into = n
	}
	if len(errs) > 0 {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_query", strings.Join(errs, "; ")+"."))
		return
	}
	// One more than asked tells whether more follow.
	steps, err := rt.st.ListSteps(r.Context(), run.ID, after, int(take)+1)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	more := len(steps) > int(take)
	if more {
		steps = steps[:take]
	}
	views := make([]StepView, len(steps))
	for i, s := range steps {
		views[i] = viewStep(s)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"steps": views, "hasMore": more})
}

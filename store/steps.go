package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Steps: the durable record of each slice of work on a run (one claim's
// work on its turn), numbered from 1 per run. A step opens with its
// slice's first write (StartStep, fenced by the slice's lease) and ends
// with its last (EndLease with Release.Step, or StopTurn, CloseRun and
// DeleteRun for a slice they cut short), which appends an EventStepEnd.
// (RunID, Sequence) is unique: the step's idempotency key,
// run:{RunID}:step:{Sequence}. A slice whose process died or lost its
// lease leaves its step open, and the next slice continues it under the
// same sequence rather than recording a second.

// EventStepEnd records that a step ended: its payload is the step as it
// ended (StepRecord).
const EventStepEnd = "agent.step.end"

// StepKind says how a slice began.
type StepKind string

// The kinds of a Step.
const (
	// StepTurn: the slice started the turn of a user message.
	StepTurn StepKind = "turn"
	// StepResume: the slice went on with the run's open turn (after a
	// yield, an approval decision, or a failure).
	StepResume StepKind = "resume"
)

// StepOutcome says how a step ended.
type StepOutcome string

// The outcomes of a Step.
const (
	// StepEnded: the slice ended its turn (the turn's end says how).
	StepEnded StepOutcome = "ended"
	// StepYielded: the slice reached its limit of tool calls and queued
	// the run for the next slice.
	StepYielded StepOutcome = "yielded"
	// StepPaused: the turn waits for approvals.
	StepPaused StepOutcome = "paused"
	// StepFailed: the slice failed; the run is queued for a retry.
	StepFailed StepOutcome = "failed"
	// StepInterrupted: the process stopped and handed the run back.
	StepInterrupted StepOutcome = "interrupted"
	// StepStopped: a person stopped the turn (StopTurn).
	StepStopped StepOutcome = "stopped"
	// StepClosed: the run was closed or deleted (CloseRun, DeleteRun).
	StepClosed StepOutcome = "closed"
)

// Valid reports whether o is one of the defined outcomes.
func (o StepOutcome) Valid() bool {
	switch o {
	case StepEnded, StepYielded, StepPaused, StepFailed, StepInterrupted, StepStopped, StepClosed:
		return true
	}
	return false
}

// Step is the durable record of one slice of work on a run.
type Step struct {
	RunID string
	// Sequence numbers the run's steps from 1, with no gap.
	Sequence int64
	Kind     StepKind
	// MessageSeq is the user message whose turn the slice worked.
	MessageSeq int64
	// Token is the fencing token of the lease that holds the step: the
	// last slice that worked it.
	Token int64
	// Attempts counts the slices that worked the step: 1, plus one for
	// each slice that continued it after its process died or lost its
	// lease.
	Attempts  int64
	StartedAt time.Time
	// EndedAt and Outcome are zero while the step is open.
	EndedAt time.Time
	Outcome StepOutcome
	// ModelSteps and ToolCalls count the model steps taken and the tool
	// calls sent by the slices that ended the step (an attempt whose
	// process died counts nothing).
	ModelSteps int64
	ToolCalls  int64
}

// StepStart opens a slice's step (StartStep).
type StepStart struct {
	Kind StepKind
	// MessageSeq is the user message whose turn the slice works.
	MessageSeq int64
	// Budget, when positive, is the most steps the run may have: a new
	// step beyond it is refused with ErrLimit (continuing an open step
	// is not).
	Budget int64
}

// StepEnd ends the step of the lease that EndLease ends (Release.Step).
type StepEnd struct {
	Outcome StepOutcome
	// ModelSteps and ToolCalls are what the slice made; they add to the
	// step's counts.
	ModelSteps, ToolCalls int64
}

// StepRecord is the payload of an EventStepEnd: the step as it ended.
type StepRecord struct {
	Sequence   int64       `json:"sequence"`
	Kind       StepKind    `json:"kind"`
	MessageSeq int64       `json:"messageSeq"`
	Outcome    StepOutcome `json:"outcome"`
	ModelSteps int64       `json:"modelSteps"`
	ToolCalls  int64       `json:"toolCalls"`
	Attempts   int64       `json:"attempts"`
	StartedAt  time.Time   `json:"startedAt"`
}

// MaxStepsPage bounds a page of ListSteps.
const MaxStepsPage = 500

// stepColumns is the column list of a Step, in field order.
const stepColumns = `run_id, sequence, kind, message_seq, fencing_token, attempts, started_at, ended_at,
	coalesce(outcome, ''), model_steps, tool_calls`

var (
	// leaseHolds reads whether the lease ($2 owner, $3 token) holds the
	// run, locking its row.
	leaseHolds = sql1(`SELECT lease_owner = $2 AND fencing_token = $3 FROM runs WHERE id = $1 FOR UPDATE`)

	latestStep = sql1(`SELECT ` + stepColumns + ` FROM run_steps WHERE run_id = $1 ORDER BY sequence DESC LIMIT 1`)

	// continueStep hands an open step to the lease $3 of the slice that
	// continues it.
	continueStep = sql1(`
UPDATE run_steps SET fencing_token = $3, attempts = attempts + 1
WHERE run_id = $1 AND sequence = $2 AND ended_at IS NULL
RETURNING ` + stepColumns)

	insertStep = sql1(`
INSERT INTO run_steps (run_id, sequence, kind, message_seq, fencing_token, attempts, started_at)
VALUES ($1, $2, $3, $4, $5, 1, $6)
RETURNING ` + stepColumns)

	// endStep ends the open step of the run $1 held by the lease $2 (any
	// lease's when $2 is NULL) with the outcome $3 at $4, adding the
	// counts $5 and $6.
	endStep = sql1(`
UPDATE run_steps SET ended_at = $4, outcome = $3, model_steps = model_steps + $5, tool_calls = tool_calls + $6
WHERE run_id = $1 AND ended_at IS NULL AND ($2::bigint IS NULL OR fencing_token = $2::bigint)
RETURNING ` + stepColumns)

	listSteps = sql1(`
SELECT ` + stepColumns + ` FROM run_steps WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3`)
)

// scanStep reads one row of stepColumns, on either engine.
func scanStep(row rowScanner) (Step, error) {
	var s Step
	var kind, outcome string
	err := row.Scan(&s.RunID, &s.Sequence, &kind, &s.MessageSeq, &s.Token, &s.Attempts, at(&s.StartedAt), at(&s.EndedAt),
		&outcome, &s.ModelSteps, &s.ToolCalls)
	s.Kind, s.Outcome = StepKind(kind), StepOutcome(outcome)
	return s, err
}

// checkStepStart validates a StepStart.
func checkStepStart(s StepStart) error {
	var errs []error
	if s.Kind != StepTurn && s.Kind != StepResume {
		errs = append(errs, fmt.Errorf("step kind %q is not %s or %s", s.Kind, StepTurn, StepResume))
	}
	if s.MessageSeq < 1 {
		errs = append(errs, fmt.Errorf("step message sequence is %d, want 1 or more", s.MessageSeq))
	}
	if s.Budget < 0 {
		errs = append(errs, fmt.Errorf("step budget is %d, want 0 (none) or more", s.Budget))
	}
	return invalid(errs...)
}

// checkStepEnd validates a StepEnd.
func checkStepEnd(s StepEnd) error {
	var errs []error
	if !s.Outcome.Valid() {
		errs = append(errs, fmt.Errorf("step outcome %q is not one of the outcomes", s.Outcome))
	}
	if s.ModelSteps < 0 || s.ToolCalls < 0 {
		errs = append(errs, fmt.Errorf("step counts %d and %d are negative", s.ModelSteps, s.ToolCalls))
	}
	return invalid(errs...)
}

// StartStep opens the step of the slice that holds the lease l, as the
// slice's first write, and returns it. When the run's latest step is
// open (the slice before died or lost its lease), this slice continues it
// under the same sequence (Attempts grows; its kind and message stay); one
// l already holds is returned as it is. Otherwise a new step follows the
// latest, unless s.Budget is positive and the run has that many steps:
// ErrLimit, nothing written. ErrConflict when l no longer holds the run,
// ErrNotFound when the run does not exist.
func (c *core) StartStep(ctx context.Context, l Lease, s StepStart) (Step, error) {
	if err := errors.Join(checkLease(l), checkStepStart(s)); err != nil {
		return Step{}, err
	}
	var out Step
	err := c.inTx(ctx, func(tx executor) error {
		var holds sql.NullBool
		if err := tx.row(ctx, leaseHolds, l.RunID, l.Owner, l.Token).Scan(&holds); err != nil {
			return err
		}
		if !holds.Valid || !holds.Bool {
			return ErrConflict
		}
		last, err := scanStep(tx.row(ctx, latestStep, l.RunID))
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case last.EndedAt.IsZero() && last.Token == l.Token:
			out = last
			return nil
		case last.EndedAt.IsZero():
			out, err = scanStep(tx.row(ctx, continueStep, l.RunID, last.Sequence, l.Token))
			return err
		}
		if s.Budget > 0 && last.Sequence >= s.Budget {
			return ErrLimit
		}
		out, err = scanStep(tx.row(ctx, insertStep, l.RunID, last.Sequence+1, string(s.Kind), s.MessageSeq, l.Token, storedTime(c.now())))
		return err
	})
	if err != nil {
		return Step{}, c.fail(err)
	}
	return out, nil
}

// ListSteps returns up to limit (1 to MaxStepsPage) of the run's steps
// with Sequence > after, in order. ErrNotFound when the run does not
// exist; ErrInvalid for a bad limit or a negative after.
func (c *core) ListSteps(ctx context.Context, runID string, after int64, limit int) ([]Step, error) {
	if limit < 1 || limit > MaxStepsPage || after < 0 {
		return nil, invalid(fmt.Errorf("step page after %d of %d, want after 0 or more and 1 to %d steps", after, limit, MaxStepsPage))
	}
	x := c.reader()
	steps, err := queryAll(ctx, x, listSteps, scanStep, runID, after, limit)
	if err == nil && len(steps) == 0 {
		err = checkRunExists(ctx, x, runID)
	}
	if err != nil {
		return nil, c.fail(err)
	}
	return steps, nil
}

// endOpenStep ends the open step of the run r, whose row lock tx holds:
// the one the lease token holds (0: whichever is open), with the outcome
// o and the counts of e, and appends its EventStepEnd. It returns the run
// as the append leaves it, or r when no step was open.
func endOpenStep(ctx context.Context, tx executor, r Run, token int64, e StepEnd, now time.Time) (Run, error) {
	var held any
	if token > 0 {
		held = token
	}
	s, err := scanStep(tx.row(ctx, endStep, r.ID, held, string(e.Outcome), now, e.ModelSteps, e.ToolCalls))
	if errors.Is(err, sql.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return Run{}, err
	}
	payload, err := json.Marshal(StepRecord{Sequence: s.Sequence, Kind: s.Kind, MessageSeq: s.MessageSeq, Outcome: s.Outcome,
		ModelSteps: s.ModelSteps, ToolCalls: s.ToolCalls, Attempts: s.Attempts, StartedAt: s.StartedAt})
	if err != nil {
		return Run{}, err
	}
	events, err := prepareEvents([]NewEvent{{Type: EventStepEnd, Payload: payload}})
	if err != nil {
		return Run{}, err
	}
	_, out, err := advanceRun(ctx, tx, appendRun, r.ID, now, planAppend(events))
	return out, err
}

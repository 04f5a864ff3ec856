package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Stopping a turn: a person ends the run's current turn now. The turn's
// end is appended, the lease of whichever process works the run is
// fenced off (its next write fails, and it stops), and the run is left
// usable: InProgress, queued again only for user messages sent after the
// stopped one.

var (
	// firstUnanswered is the first user message after the run's
	// HandledSeq: the message the next turn answers.
	firstUnanswered = sql1(`
SELECT seq FROM run_events
WHERE run_id = $1 AND type LIKE 'message.%' AND type = 'message.user' AND seq > $2
ORDER BY seq LIMIT 1`)

	// stopLease fences off the run's lease and leaves it InProgress,
	// queued when a user message after its HandledSeq waits.
	stopLease = sql1(`
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, fencing_token = fencing_token + 1,
	stopped_fence = fencing_token,
	status = CASE WHEN status = 'AwaitingApproval' THEN 'InProgress' ELSE status END,
	queued_at = CASE WHEN ` + runUnanswered + ` THEN coalesce(queued_at, $2) ELSE NULL END,
	not_before = NULL, failures = 0, updated_at = $2
WHERE id = $1
RETURNING ` + runColumns)

	// stoppedFence reads the fencing token a stop fenced off, and whether
	// the run has been claimed since ($2: that token) and is still open.
	stoppedFence = sql1(`
SELECT stopped_fence IS NOT NULL AND stopped_fence = $2::bigint AND fencing_token = $2::bigint + 1 AND lease_owner IS NULL
	AND deleted_at IS NULL AND status NOT IN ('Completed', 'Failed', 'Cancelled')
FROM runs WHERE id = $1`)

	// keptStoppedReply clears the fence a stop left: one reply is kept.
	keptStoppedReply = sql1(`UPDATE runs SET stopped_fence = NULL WHERE id = $1`)
)

// ErrNothingToStop is returned by StopTurn for a run with no turn open
// and no user message waiting for one. It wraps ErrConflict.
var ErrNothingToStop = fmt.Errorf("%w: no turn is open or waiting", ErrConflict)

// StopTurn ends the run's turn now, in one transaction: the open turn
// (Run.TurnSeq), or, when none is open, the turn of the first user
// message after HandledSeq, which never started. end(turnSeq, started)
// returns the events to append: those that end the turn (one with
// EndsTurn), preceded, for a turn not started, by its start (StartsTurn).
// The run's lease is fenced off (FencingToken grows, no owner), so the
// process working the turn writes nothing more; an AwaitingApproval run
// is InProgress again; the run stays queued only for user messages after
// the stopped one. The run's open approvals are withdrawn as w says, each
// with its audit record, in the same transaction. ErrNotFound for a missing or deleted run, ErrClosed for
// a terminal one, ErrNothingToStop when there is no turn to stop.
func (c *core) StopTurn(ctx context.Context, runID string, end TurnEndFunc, w Withdrawal) (Run, error) {
	if err := invalid(checkText("the reason of the withdrawal", w.Reason)); err != nil {
		return Run{}, err
	}
	var out Run
	err := c.inTx(ctx, func(tx executor) error {
		r, err := scanRun(tx.row(ctx, lockRun, runID))
		if err == nil {
			err = closedError(r)
		}
		if err != nil {
			return err
		}
		seq, started := r.TurnSeq, r.TurnSeq != 0
		if !started {
			switch err := tx.row(ctx, firstUnanswered, runID, r.HandledSeq).Scan(&seq); {
			case errors.Is(err, sql.ErrNoRows):
				return ErrNothingToStop
			case err != nil:
				return err
			}
		}
		now := storedTime(c.now())
		if _, err := endTurn(ctx, tx, r, seq, started, now, end); err != nil {
			return err
		}
		if _, err := endOpenStep(ctx, tx, r, 0, StepEnd{Outcome: StepStopped}, now); err != nil {
			return err
		}
		// Its approvals after the turn's end, and before the audit lock
		// that their records take.
		if err := withdrawApprovals(ctx, tx, r, w, now); err != nil {
			return err
		}
		if out, err = scanRun(tx.row(ctx, stopLease, runID, now)); err != nil {
			return err
		}
		tx.notifyRuns(out)
		if !out.QueuedAt.IsZero() {
			tx.wake()
		}
		return nil
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

// KeepStoppedReply appends e, the partial reply of the turn StopTurn
// stopped while l held the run (a message that neither starts nor ends a
// turn), once: provided the stop fenced off exactly l, and nothing has
// claimed, closed or deleted the run since. ErrConflict otherwise, and
// nothing is written; ErrNotFound for a missing run.
func (c *core) KeepStoppedReply(ctx context.Context, l Lease, e NewEvent) (Event, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, err
	}
	p := planAppend(events)
	if p.turn >= 0 || p.handled != handledKeep {
		return Event{}, invalid(errors.New("a stopped turn's reply neither starts nor ends a turn"))
	}
	var out Event
	err = c.inTx(ctx, func(tx executor) error {
		if _, err := scanRun(tx.row(ctx, lockRun, l.RunID)); err != nil {
			return err
		}
		var kept bool
		if err := tx.row(ctx, stoppedFence, l.RunID, l.Token).Scan(&kept); err != nil {
			return err
		}
		if !kept {
			return ErrConflict
		}
		appended, _, err := advanceRun(ctx, tx, appendRun, l.RunID, storedTime(c.now()), p)
		if err != nil {
			return err
		}
		out = appended[0]
		_, err = tx.exec(ctx, keptStoppedReply, l.RunID)
		return err
	})
	if err != nil {
		return Event{}, c.fail(err)
	}
	return out, nil
}

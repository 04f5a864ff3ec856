package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// HeldSession is the MCP session a replica holds for a run between its
// turns, as the database records it: one per run, held by one replica at
// a time.
type HeldSession struct {
	RunID   string
	Replica string // the holder's id, as it names itself in leases
	// HoldID names this hold: a replica that connects the run's session
	// again holds it under a new id.
	HoldID string
	HeldAt time.Time
	// ReleasedAt is when the hold was released (zero while it holds), and
	// Reason why (one of the Release* reasons).
	ReleasedAt time.Time
	Reason     string
}

// Why a held session was released (HeldSession.Reason).
const (
	ReleaseCompleted  = "completed"    // its run was completed
	ReleaseCancelled  = "cancelled"    // its run was cancelled, or failed
	ReleaseDeleted    = "deleted"      // its run was deleted
	ReleaseParked     = "parked"       // its run was parked Idle (the conversation went quiet)
	ReleaseHoldIdle   = "hold_idle"    // no turn used it for the hold time
	ReleaseTurnFailed = "turn_failed"  // a turn that used it failed
	ReleaseMoved      = "moved"        // another hold of the run took over
	ReleaseLost       = "lost"         // its holder no longer has it
	ReleaseGone       = "replica_gone" // its holder's heartbeat is gone
	ReleaseStopped    = "stopped"      // its holder stopped
)

// Holds is the store's record of held sessions. Every release is a
// compare-and-swap: a hold is released once, by one caller, whoever else
// races to release it. CloseRun, DeleteRun and ParkIdleRuns release the
// run's hold in their own transaction.
type Holds interface {
	// HoldSession records that h.Replica holds h.RunID's session under
	// h.HoldID (all required), now: it releases the run's hold before,
	// when another hold is still held (ReleaseMoved), so that one replica
	// holds a run's session at a time. It returns the hold as stored.
	HoldSession(ctx context.Context, h HeldSession) (HeldSession, error)
	// ReleaseHold releases the hold holdID of the run, unless it was
	// released already or is not the run's hold any more: released
	// reports whether this call released it.
	ReleaseHold(ctx context.Context, runID, holdID, reason string) (released bool, _ error)
	// GetHold returns the run's hold, held or released, or ErrNotFound.
	GetHold(ctx context.Context, runID string) (HeldSession, error)
	// HoldsOf returns the holds replica holds now, by run.
	HoldsOf(ctx context.Context, replica string) ([]HeldSession, error)
	// ReleaseGoneHolds releases the holds of the replicas other than
	// except whose heartbeat is not alive now (ReleaseGone), and returns
	// them.
	ReleaseGoneHolds(ctx context.Context, except string) ([]HeldSession, error)
}

const holdColumns = `run_id, replica, hold_id, held_at, released_at, reason`

var (
	// holdSession takes the run's row over for the hold $3 of the replica
	// $2, at $4; a hold it replaces that was still held is released at $4
	// as moved ($5).
	holdSession = sql1(`
INSERT INTO held_sessions (` + holdColumns + `) VALUES ($1, $2, $3, $4, NULL, '')
ON CONFLICT (run_id) DO UPDATE SET replica = excluded.replica, hold_id = excluded.hold_id,
	held_at = excluded.held_at, released_at = NULL, reason = ''
RETURNING ` + holdColumns)

	// releaseHeld releases the run's hold at $2 for the reason $3, when
	// it is held.
	releaseHeld = sql1(`
UPDATE held_sessions SET released_at = $2, reason = $3 WHERE run_id = $1 AND released_at IS NULL`)

	// releaseHold is releaseHeld of the hold $4 only.
	releaseHold = sql1(`
UPDATE held_sessions SET released_at = $2, reason = $3
WHERE run_id = $1 AND hold_id = $4 AND released_at IS NULL`)

	getHold = sql1(`SELECT ` + holdColumns + ` FROM held_sessions WHERE run_id = $1`)

	holdsOf = sql1(`SELECT ` + holdColumns + ` FROM held_sessions WHERE replica = $1 AND released_at IS NULL ORDER BY run_id`)

	// releaseGoneHolds releases at $1 the holds of replicas other than $2
	// with no heartbeat alive at $1.
	releaseGoneHolds = sql1(`
UPDATE held_sessions SET released_at = $1, reason = '` + ReleaseGone + `'
WHERE released_at IS NULL AND replica <> $2
  AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.id = held_sessions.replica AND r.expires_at > $1)
RETURNING ` + holdColumns)
)

func (c *core) HoldSession(ctx context.Context, h HeldSession) (HeldSession, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{{"hold run ID", h.RunID}, {"hold replica", h.Replica}, {"hold ID", h.HoldID}} {
		if f.v == "" {
			errs = append(errs, errors.New(f.name+" is empty"))
		}
		errs = append(errs, checkText(f.name, f.v))
	}
	if err := invalid(errs...); err != nil {
		return HeldSession{}, err
	}
	var out HeldSession
	err := c.inTx(ctx, func(tx executor) error {
		now := storedTime(c.now())
		r, err := scanRun(tx.row(ctx, lockRun, h.RunID))
		if err != nil {
			return err
		}
		// Another hold still held is released first: the replica that
		// has it closes its session when it sees its hold gone.
		if _, err := tx.exec(ctx, releaseHeld, h.RunID, now, ReleaseMoved); err != nil {
			return err
		}
		if out, err = scanHold(tx.row(ctx, holdSession, h.RunID, h.Replica, h.HoldID, now)); err != nil {
			return err
		}
		tx.notify(Notification{Kind: NotifyHold, RunID: r.ID, Owner: r.Owner})
		return nil
	})
	return out, c.fail(err)
}

func (c *core) ReleaseHold(ctx context.Context, runID, holdID, reason string) (bool, error) {
	var n int64
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		n, err = x.exec(ctx, releaseHold, runID, storedTime(c.now()), reason, holdID)
		return err
	})
	return n == 1, c.fail(err)
}

func (c *core) GetHold(ctx context.Context, runID string) (HeldSession, error) {
	h, err := scanHold(c.reader().row(ctx, getHold, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return HeldSession{}, ErrNotFound
	}
	return h, c.fail(err)
}

func (c *core) HoldsOf(ctx context.Context, replica string) ([]HeldSession, error) {
	out, err := queryAll(ctx, c.reader(), holdsOf, scanHold, replica)
	return out, c.fail(err)
}

func (c *core) ReleaseGoneHolds(ctx context.Context, except string) ([]HeldSession, error) {
	var out []HeldSession
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		out, err = queryAll(ctx, x, releaseGoneHolds, scanHold, storedTime(c.now()), except)
		return err
	})
	return out, c.fail(err)
}

// releaseRunHold releases, in the transaction tx, the hold of the run
// being closed, deleted or parked, with reason.
func releaseRunHold(ctx context.Context, tx executor, runID string, now time.Time, reason string) error {
	_, err := tx.exec(ctx, releaseHeld, runID, now, reason)
	return err
}

// scanHold reads one row of holdColumns.
func scanHold(row rowScanner) (HeldSession, error) {
	var h HeldSession
	err := row.Scan(&h.RunID, &h.Replica, &h.HoldID, at(&h.HeldAt), at(&h.ReleasedAt), &h.Reason)
	return h, err
}

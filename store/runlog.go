package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"
)

// The run rows and their event logs at their simplest: creating, reading
// and moving a run, and appending to and paging through its log, one
// statement or one short transaction each. The scheduler's operations over
// runs (OpenRun, ClaimRuns, leases) build on the same tables.

var (
	insertRun = sql1(`
INSERT INTO runs (id, owner, title, status, idempotency_key, queued_at,
	created_at, updated_at, last_activity_at, metadata, parent_run_id, parent_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7, $8, $9, $10)
RETURNING ` + runColumns)

	getRun = sql1(`SELECT ` + runColumns + ` FROM runs WHERE id = $1`)

	listRuns = sql1(`
SELECT ` + runColumns + ` FROM runs
WHERE owner = $1 AND deleted_at IS NULL
ORDER BY created_at DESC, id DESC`)

	// transitionRun is the compare-and-swap of a run's status; $5 is
	// the completion time when the new status is terminal, NULL otherwise.
	transitionRun = sql1(`
UPDATE runs SET status = $3, updated_at = $4, completed_at = coalesce($5, completed_at)
WHERE id = $1 AND status = $2
RETURNING ` + runColumns)

	runExists = sql1(`SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`)

	// nextEventSeq advances the run's sequence, and reads the branch the
	// event is appended on. On PostgreSQL the update takes the run's row
	// lock, held until the event is inserted in the same transaction; on
	// SQLite the transaction holds the database's write lock. Either way
	// concurrent appends queue behind each other and leave no gap.
	nextEventSeq = sql1(`
UPDATE runs SET last_seq = last_seq + 1, updated_at = $2, last_activity_at = $2
WHERE id = $1
RETURNING last_seq, active_branch`)

	insertEvent = sql1(`INSERT INTO run_events (` + eventColumns + `) VALUES ($1, $2, $3, $4, $5, $6)`)

	listEvents = sql1(`
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3`)
)

func (c *core) CreateRun(ctx context.Context, r Run) (Run, error) {
	if err := checkNewRun(r); err != nil {
		return Run{}, err
	}
	now := storedTime(c.now())
	var out Run
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanRun(x.row(ctx, insertRun,
			r.ID, r.Owner, r.Title, r.Status, nullString(r.IdempotencyKey), nullTime(r.QueuedAt), now,
			metadataOf(r), nullString(r.ParentRunID), r.ParentVersion))
		return err
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

func (c *core) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(c.reader().row(ctx, getRun, id))
	if err != nil {
		return Run{}, c.fail(err)
	}
	return r, nil
}

func (c *core) ListRuns(ctx context.Context, owner string) ([]Run, error) {
	runs, err := queryAll(ctx, c.reader(), listRuns, scanRun, owner)
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

func (c *core) TransitionRun(ctx context.Context, id string, from, to RunStatus) (Run, error) {
	if err := checkTransition(from, to); err != nil {
		return Run{}, err
	}
	now := storedTime(c.now())
	var completedAt time.Time // zero, stored as NULL, keeps completed_at
	if to.Terminal() {
		completedAt = now
	}
	var out Run
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = swapRunStatus(ctx, x, id, from, to, now, completedAt)
		return err
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

// swapRunStatus is TransitionRun's compare-and-swap on x. When no row
// changed it tells a missing run (ErrNotFound) from one in another status
// (ErrConflict). On PostgreSQL the update runs alone and the read follows
// it; runs are never deleted from the table (DeleteRun marks them), so a
// run found missing then was missing at the update too.
func swapRunStatus(ctx context.Context, x executor, id string, from, to RunStatus, now, completedAt time.Time) (Run, error) {
	r, err := scanRun(x.row(ctx, transitionRun, id, from, to, now, nullTime(completedAt)))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, missingOrConflict(ctx, x, runExists, id)
	}
	return r, err
}

func (c *core) AppendEvent(ctx context.Context, runID, typ string, payload json.RawMessage) (Event, error) {
	// Refused here, before the database sees it, so that every engine
	// refuses the same payloads: SQLite would store what jsonb cannot.
	payload, err := eventPayload(typ, payload)
	if err != nil {
		return Event{}, err
	}
	e := Event{RunID: runID, Type: typ, Payload: payload, CreatedAt: storedTime(c.now())}
	err = c.inTx(ctx, func(tx executor) error {
		// A missing run updates no row: sql.ErrNoRows, which fail
		// translates to ErrNotFound.
		if err := tx.row(ctx, nextEventSeq, runID, e.CreatedAt).Scan(&e.Seq, &e.Branch); err != nil {
			return err
		}
		_, err := tx.exec(ctx, insertEvent, e.RunID, e.Seq, e.Type, e.Payload, e.CreatedAt, e.Branch)
		return err
	})
	if err != nil {
		return Event{}, c.fail(err)
	}
	return e, nil
}

func (c *core) ListEvents(ctx context.Context, runID string, after int64, limit int) ([]Event, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	x := c.reader()
	events, err := queryAll(ctx, x, listEvents, scanEvent, runID, after, limit)
	if err != nil {
		return nil, c.fail(err)
	}
	if len(events) == 0 {
		if err := checkRunExists(ctx, x, runID); err != nil {
			return nil, c.fail(err)
		}
	}
	return events, nil
}

// checkRunExists explains an empty page of a run's log, which is either
// the end of the log or a missing run: ErrNotFound for the latter.
func checkRunExists(ctx context.Context, x executor, runID string) error {
	var exists bool
	if err := x.row(ctx, runExists, runID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return ErrNotFound
	}
	return nil
}

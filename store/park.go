package store

import (
	"context"
	"database/sql"
	"errors"
)

// parkRun is parkIdleRuns for one run, whatever its last activity: a
// quiet run (no lease, no queued work, no open turn, no unanswered
// message, no pending approval) goes Idle.
var parkRun = sql1(`
UPDATE runs SET status = 'Idle', updated_at = $2
WHERE id = $1 AND status = 'InProgress' AND deleted_at IS NULL AND lease_owner IS NULL
  AND queued_at IS NULL AND turn_seq = 0
  AND NOT ` + runUnanswered + `
  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending')
RETURNING ` + runColumns)

func (c *core) ParkRun(ctx context.Context, runID string) (Run, error) {
	var r Run
	err := c.inTx(ctx, func(x executor) error {
		now := storedTime(c.now())
		var err error
		r, err = scanRun(x.row(ctx, parkRun, runID, now))
		if errors.Is(err, sql.ErrNoRows) {
			cur, err := scanRun(x.row(ctx, getRun, runID))
			switch {
			case errors.Is(err, sql.ErrNoRows) || (err == nil && !cur.DeletedAt.IsZero()):
				return ErrNotFound
			case err != nil:
				return err
			case cur.Status == RunIdle:
				r = cur
				return nil
			}
			return ErrConflict
		}
		if err != nil {
			return err
		}
		if err := releaseRunHold(ctx, x, r.ID, now, ReleaseParked); err != nil {
			return err
		}
		x.notifyRuns(r)
		return nil
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return r, nil
}

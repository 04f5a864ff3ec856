package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"
)

// MaxPurgeBatch bounds the runs one PurgeDeletedRuns erases.
const MaxPurgeBatch = 1000

var (
	// deletedRunsBefore are the runs deleted before $1 whose owner is not
	// under a legal hold, the oldest deletion first, at most $2 of them;
	// each one's row is locked (a concurrent purge skips it, and so does
	// one while a legal hold is being placed on its owner).
	deletedRunsBefore = sql1(`
SELECT ` + runColumns + ` FROM runs WHERE deleted_at IS NOT NULL AND deleted_at < $1
AND NOT EXISTS (SELECT 1 FROM legal_holds h WHERE h.principal = runs.owner)
ORDER BY deleted_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`)

	// purgeRunExecutions erases the results of the tool calls the run
	// made: nothing calls under its keys any more.
	purgeRunExecutions = sql1(`DELETE FROM tool_executions WHERE run_id = $1`)

	// purgeRunsSearch erases the words of the runs $1 (a JSON array of
	// their ids) from SQLite's search table, which no foreign key ties to
	// their events (PostgreSQL searches the events themselves): one pass
	// over the table, whose run_id it cannot index, for the whole batch.
	purgeRunsSearch = perEngine(``, `DELETE FROM run_search WHERE run_id IN (SELECT value FROM json_each($1))`)

	// purgeRun erases the run, and with it (ON DELETE CASCADE) its
	// events, message keys, branches, context snapshots, steps, held
	// session, pins and approvals; runs that continue it keep their own
	// history and name no parent any more (ON DELETE SET NULL).
	purgeRun = sql1(`DELETE FROM runs WHERE id = $1 AND deleted_at IS NOT NULL`)
)

// RunAudit returns the builder of the audit record of what is done to a
// run (its erasure, its deletion for inactivity), which the store appends
// in that write's transaction.
type RunAudit func(Run) (func(AuditHead) (AuditRecord, error), error)

// PurgeDeletedRuns erases the runs deleted before deletedBefore, at most
// limit (1 to MaxPurgeBatch) of them, the oldest deletion first, in one
// transaction with the audit record audit builds for each (none when
// audit, or what it returns, is nil), and returns them as they were. A
// deleted run keeps its content until then (its events, the results of
// its tool calls, its approvals); afterwards nothing of it is left but
// the audit log's records, which name it. Its attachments went when it
// was deleted, or now, when it was deleted under a legal hold. The runs
// of a person under a legal hold are not erased. ErrInvalid when limit is
// out of range.
func (c *core) PurgeDeletedRuns(ctx context.Context, deletedBefore time.Time, limit int, audit RunAudit) ([]Run, error) {
	if limit < 1 || limit > MaxPurgeBatch {
		return nil, c.fail(invalid(errors.New("purge: limit must be 1 to 1000")))
	}
	var runs []Run
	err := c.inTx(ctx, func(tx executor) error {
		var err error
		if runs, err = queryAll(ctx, tx, deletedRunsBefore, scanRun, storedTime(deletedBefore), limit); err != nil || len(runs) == 0 {
			return err
		}
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
			// A run deleted under a legal hold kept its attachments.
			if err := deleteRunAttachments(ctx, tx, r.ID); err != nil {
				return err
			}
			for _, s := range []stmt{purgeRunExecutions, purgeRun} {
				if _, err := tx.exec(ctx, s, r.ID); err != nil {
					return err
				}
			}
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, purgeRunsSearch, string(list)); err != nil {
			return err
		}
		// After the deletions, which take row locks: the audit lock last
		// (see appendAuditTx).
		for _, r := range runs {
			if err := appendAuditOf(ctx, tx, r, audit); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

// inactiveRuns are the runs not deleted, with no turn under way or
// waiting (Idle, or closed), and no activity since $1, the oldest
// activity first, at most $2 of them. No index serves it: a sweep reads
// the runs' table at most every few minutes.
var inactiveRuns = sql1(`
SELECT id FROM runs
WHERE deleted_at IS NULL AND status NOT IN ('InProgress', 'AwaitingApproval') AND last_activity_at < $1
ORDER BY last_activity_at, id LIMIT $2`)

// InactiveRuns returns the ids of up to limit (1 to MaxPurgeBatch) runs
// that DeleteInactiveRun would delete for before, the oldest activity
// first.
func (c *core) InactiveRuns(ctx context.Context, before time.Time, limit int) ([]string, error) {
	if limit < 1 || limit > MaxPurgeBatch {
		return nil, c.fail(invalid(errors.New("inactive runs: limit must be 1 to 1000")))
	}
	ids, err := queryAll(ctx, c.reader(), inactiveRuns, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, storedTime(before), limit)
	return ids, c.fail(err)
}

// DeleteInactiveRun deletes the run as DeleteRun does (w withdraws its
// open approvals), if it is still not deleted, with no turn under way or
// waiting, and no activity since before, and then appends the audit
// record audit builds of it (none when audit, or what it returns, is
// nil), in one transaction. It returns the run as it was and whether it
// deleted it: false, and nothing written, when the run no longer
// qualifies (a message came meanwhile) or is gone.
func (c *core) DeleteInactiveRun(ctx context.Context, runID string, before time.Time, w Withdrawal, audit RunAudit) (Run, bool, error) {
	if err := invalid(checkText("the reason of the withdrawal", w.Reason)); err != nil {
		return Run{}, false, c.fail(err)
	}
	var r Run
	var deleted bool
	err := c.inTx(ctx, func(tx executor) error {
		var err error
		deleted = false
		r, err = scanRun(tx.row(ctx, lockRun, runID))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		case !r.DeletedAt.IsZero() || r.Status == RunInProgress || r.Status == RunAwaitingApproval || !r.LastActivityAt.Before(storedTime(before)):
			return nil
		}
		if err := c.deleteLocked(ctx, tx, r, nil, w); err != nil {
			return err
		}
		deleted = true
		return appendAuditOf(ctx, tx, r, audit)
	})
	if err != nil {
		return Run{}, false, c.fail(err)
	}
	return r, deleted, nil
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Continued runs (manual compaction): a run continued in a new run, its
// child, whose history starts from a summary of it. The child names its
// parent (Run.ParentRunID, ParentVersion); the parent's log names the
// child; both are written, with the parent completed, in one transaction.

var (
	// openChildRun inserts the child $1 of the run $9 unless its owner
	// $2 has $8 active runs or more (then no row), as openRun does.
	openChildRun = sql1(`
INSERT INTO runs (id, owner, title, status, idempotency_key, queued_at,
	created_at, updated_at, last_activity_at, metadata, parent_run_id, parent_version)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, NULL, $6::timestamptz, $6::timestamptz, $6::timestamptz,
	$7::jsonb, $9::text, $10::bigint
WHERE (SELECT count(*) FROM runs
	WHERE owner = $2::text AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL) < $8::bigint
RETURNING ` + runColumns)

	// childRuns lists the runs that continue a run, oldest first.
	childRuns = sql1(`SELECT id FROM runs WHERE parent_run_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`)
)

// ContinueRunParams is what ContinueRun takes.
type ContinueRunParams struct {
	// From is the run continued.
	From string
	// Child is the new run that continues it.
	Child Run
	// First opens Child's log: a message event, the summary its history
	// starts from.
	First NewEvent
	// Note is appended to From: the event that names the child.
	Note NewEvent
	// Summary, when not nil, is Child's context snapshot version 1,
	// covering First.
	Summary *ContextSnapshot
	// MaxActive is how many active runs the owner may have besides From.
	MaxActive int
	// Withdrawal withdraws From's open approvals when it is completed, as
	// CloseRun does.
	Withdrawal Withdrawal
}

// ContinueRun continues the run from (p.From; and so for each field of
// p) in child, a new run of the same owner, in one transaction: child is created InProgress with no turn
// queued, naming from as its parent (child.ParentRunID is set to from;
// child.ParentVersion is kept), its log opened with first (a message
// event: the summary its history starts from) and, when summary is not
// nil, its context snapshot version 1 covering first (summary.Summary,
// Tokens, Kind and Model are used); from gets note appended (the event
// that names the child) and, unless it is closed already, is completed.
//
// from must exist, be child's owner's and not be deleted (ErrNotFound),
// with no turn open, no message waiting for one and no lease held
// (ErrConflict). With
// child.IdempotencyKey of a run the owner has, that run is returned and
// created is false. ErrLimit when the owner has maxActive active runs
// besides from.
func (c *core) ContinueRun(ctx context.Context, p ContinueRunParams) (_ Run, created bool, _ error) {
	from, child, first, note, summary, maxActive := p.From, p.Child, p.First, p.Note, p.Summary, p.MaxActive
	child.Status, child.ParentRunID = RunInProgress, from
	if err := checkNewRun(child); err != nil {
		return Run{}, false, err
	}
	if err := invalid(checkText("the reason of the withdrawal", p.Withdrawal.Reason)); err != nil {
		return Run{}, false, err
	}
	events, err := prepareEvents([]NewEvent{first, note})
	if err != nil {
		return Run{}, false, err
	}
	if !events[0].message {
		return Run{}, false, invalid(fmt.Errorf("a continued run's first event %q is not a message", first.Type))
	}
	if summary != nil {
		s := *summary
		s.RunID, s.Version, s.FromSeq, s.ToSeq = child.ID, 1, 1, 1
		if err := checkSnapshot(s); err != nil {
			return Run{}, false, err
		}
	}
	var out Run
	err = c.inTx(ctx, func(tx executor) error {
		created = false
		if existing, found, err := lockOwner(ctx, tx, child.Owner, child.IdempotencyKey); err != nil || found {
			out = existing
			return err
		}
		parent, err := scanRun(tx.row(ctx, lockRun, from))
		switch {
		case errors.Is(err, sql.ErrNoRows) || (err == nil && (parent.Owner != child.Owner || !parent.DeletedAt.IsZero())):
			return ErrNotFound
		case err != nil:
			return err
		}
		now := storedTime(c.now())
		if parent.TurnSeq != 0 || !parent.QueuedAt.IsZero() || (parent.LeaseOwner != "" && parent.LeaseExpiresAt.After(now)) {
			return fmt.Errorf("%w: run %s is working a turn, has a message waiting for one, or is leased", ErrConflict, from)
		}
		if _, _, err := advanceRun(ctx, tx, appendRun, from, now, planAppend(events[1:])); err != nil {
			return err
		}
		if !parent.Status.Terminal() {
			if _, err := c.endRun(ctx, tx, parent, RunCompleted, false, nil, p.Withdrawal); err != nil {
				return err
			}
		} else {
			tx.notifyRuns(parent)
		}
		run, err := scanRun(tx.row(ctx, openChildRun, child.ID, child.Owner, child.Title, string(child.Status),
			nullString(child.IdempotencyKey), now, metadataOf(child), maxActive, from, child.ParentVersion))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLimit
		}
		if err != nil {
			return err
		}
		if _, run, err = advanceRun(ctx, tx, appendRun, run.ID, now, planAppend(events[:1])); err != nil {
			return err
		}
		if summary != nil {
			// On the child's original line, branch 0: it has no other yet.
			if _, err := tx.exec(ctx, insertSnapshot, run.ID, 1, run.LastSeq, run.LastSeq, summary.Summary, summary.Tokens,
				string(summary.Kind), summary.Model, now, 0); err != nil {
				return err
			}
		}
		tx.notifyRuns(run)
		out, created = run, true
		return nil
	})
	if err != nil {
		return Run{}, false, c.fail(err)
	}
	return out, created, nil
}

// ChildRuns returns the ids of the runs that continue runID, oldest
// first (none is fine).
func (c *core) ChildRuns(ctx context.Context, runID string) ([]string, error) {
	out, err := queryAll(ctx, c.reader(), childRuns, func(row rowScanner) (string, error) {
		var id string
		return id, row.Scan(&id)
	}, runID)
	return out, c.fail(err)
}

// renameRun sets the title of a live run.
var renameRun = sql1(`UPDATE runs SET title = $2, updated_at = $3 WHERE id = $1 AND deleted_at IS NULL RETURNING ` + runColumns)

// RenameRun sets the run's title; ErrNotFound for a missing or deleted
// run. A closed run may be renamed too: its title is no part of the
// conversation.
func (c *core) RenameRun(ctx context.Context, runID, title string) (Run, error) {
	if err := checkText("run title", title); err != nil {
		return Run{}, invalid(err)
	}
	var out Run
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanRun(x.row(ctx, renameRun, runID, title, storedTime(c.now())))
		if err == nil {
			x.notifyRuns(out)
		}
		return err
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

// setRunMetadata sets the metadata of a live run.
var setRunMetadata = sql1(`UPDATE runs SET metadata = $2::jsonb, updated_at = $3 WHERE id = $1 AND deleted_at IS NULL RETURNING ` + runColumns)

func (c *core) SetRunMetadata(ctx context.Context, runID, metadata string) (Run, error) {
	if err := checkMetadata(metadata); err != nil {
		return Run{}, invalid(err)
	}
	var out Run
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanRun(x.row(ctx, setRunMetadata, runID, metadataOf(Run{Metadata: metadata}), storedTime(c.now())))
		if err == nil {
			x.notifyRuns(out)
		}
		return err
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// Branches of a conversation. Editing a user message, or asking for a
// reply again, starts a new branch beside the line it leaves, which stays
// stored and readable: nothing of the log is rewritten or deleted. Every
// event records the branch that was active when it was appended (its
// Branch), and each branch's line is a chain of segments: the events of
// the branches it descends from up to where each was left, then its own.
//
// A branch C forked from its parent P before P's message F sees P's line
// with seq < F, then its own events, all later than F. So a line is the
// segments (b0, f1), (b1, f2), …, (bk, ∞): an event is on it when its
// branch is some bj and its seq is before fj+1. The original line,
// branch 0, is every event of branch 0, which is every event of a run that
// never branched; the other lines are stored, one row per segment, in
// run_branch_lines, written once when the branch is made.

// BranchKind says how a branch began.
type BranchKind string

// The kinds of a Branch.
const (
	// BranchEdit: a person edited one of their messages; the branch
	// starts with the edited message.
	BranchEdit BranchKind = "edit"
	// BranchRegenerate: a person asked for the last reply again; the
	// branch starts with the same message again.
	BranchRegenerate BranchKind = "regenerate"
)

// MaxSeq is the Until of a line's last segment: the branch's own events,
// all of them.
const MaxSeq = math.MaxInt64

// ErrBusy reports that a run is not between turns: a turn is open, waits
// for an approval, or a user message waits for its turn. A run branches,
// or switches branch, only between turns. It is a conflict too:
// errors.Is(ErrBusy, ErrConflict) holds.
var ErrBusy = fmt.Errorf("store: run is not between turns: %w", ErrConflict)

// Branch is one line of a run's conversation beyond the original (branch
// 0, which has no row).
type Branch struct {
	RunID string
	// ID numbers the run's branches from 1, in the order they were made.
	ID int64
	// Parent is the branch forked from, ForkSeq the parent's user message
	// that the branch replaces: the branch sees the parent's line before
	// it. Branches forked from one parent at one message are alternatives
	// of that message, and of each other.
	Parent, ForkSeq int64
	// MessageSeq is the branch's first event: its user message (the
	// edited message, or the same message again).
	MessageSeq int64
	Kind       BranchKind
	// CreatedBy is the principal who made the branch.
	CreatedBy string
	CreatedAt time.Time
	// Line is the branch's line, in order: its last segment is the
	// branch's own, to MaxSeq.
	Line []LineSegment
}

// LineSegment is one segment of a branch's line: the events of Branch
// with seq before Until.
type LineSegment struct {
	Branch int64
	Until  int64
}

// Fork is a branch to make (ForkRun).
type Fork struct {
	// At is the user message, on the run's active line, that the branch
	// replaces: the branch sees the line before it.
	At   int64
	Kind BranchKind
	// CreatedBy is the principal who asks.
	CreatedBy string
	// Message is the user message the branch starts with (its type
	// EventUserMessage): the edited message, or the same one again.
	Message NewEvent
	// Key, when not empty, makes the fork idempotent: a fork of the run
	// with a key used before makes nothing and returns the branch that
	// key made (the key is the message's, as PostMessageOnce keeps it).
	Key string
}

// checkFork validates f before the database sees it.
func checkFork(f Fork) error {
	var errs []error
	if f.At < 1 {
		errs = append(errs, fmt.Errorf("fork at %d is no message", f.At))
	}
	if f.Kind != BranchEdit && f.Kind != BranchRegenerate {
		errs = append(errs, fmt.Errorf("branch kind %q is neither %q nor %q", f.Kind, BranchEdit, BranchRegenerate))
	}
	if f.Message.Type != EventUserMessage {
		errs = append(errs, fmt.Errorf("a branch starts with a %s event, not %s", EventUserMessage, f.Message.Type))
	}
	if f.Message.StartsTurn != 0 || f.Message.EndsTurn {
		errs = append(errs, errors.New("a branch's message neither starts nor ends a turn"))
	}
	errs = append(errs, checkText("branch creator", f.CreatedBy), checkText("fork idempotency key", f.Key))
	return invalid(errs...)
}

// branchOfMessage reads the branch that starts with the message $2.
var branchOfMessage = sql1(`SELECT ` + branchColumns + ` FROM run_branches WHERE run_id = $1 AND message_seq = $2`)

// forkedBefore is the fork made with key before: its branch, message and
// the run as it is now (found false when key made nothing yet).
// ErrConflict when key names a message that started no branch.
func forkedBefore(ctx context.Context, tx executor, runID, key string) (Branch, Event, Run, bool, error) {
	r, err := scanRun(tx.row(ctx, lockRun, runID))
	if err == nil {
		err = closedError(r)
	}
	if err != nil && !errors.Is(err, ErrClosed) {
		return Branch{}, Event{}, Run{}, false, err
	}
	ev, err := scanEvent(tx.row(ctx, messageByKey, runID, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Branch{}, Event{}, Run{}, false, nil
	}
	if err != nil {
		return Branch{}, Event{}, Run{}, false, err
	}
	b, err := scanBranch(tx.row(ctx, branchOfMessage, runID, ev.Seq))
	if errors.Is(err, sql.ErrNoRows) {
		return Branch{}, Event{}, Run{}, false, fmt.Errorf("%w: the idempotency key was used by a message that made no branch", ErrConflict)
	}
	if err != nil {
		return Branch{}, Event{}, Run{}, false, err
	}
	if b.Line, err = queryAll(ctx, tx, listBranchLinesOf, scanLineSegment, runID, b.ID); err != nil {
		return Branch{}, Event{}, Run{}, false, err
	}
	return b, ev, r, true, nil
}

// onLine is the SQL condition that the row alias (with run_id and branch
// columns) is on the line of the branch target (an SQL expression), at
// the sequence of its column seq: a row of branch 0 for the original
// line, else a row on one of the line's segments. The original line
// needs no other table: a run that never branched is read as before.
func onLine(alias, seq, target string) string {
	return `CASE WHEN ` + target + ` = 0 THEN ` + alias + `.branch = 0 ELSE EXISTS (
	SELECT 1 FROM run_branch_lines l WHERE l.run_id = ` + alias + `.run_id AND l.branch = ` + target + `
	  AND l.member = ` + alias + `.branch AND l.until_seq > ` + alias + `.` + seq + `) END`
}

// branchOr is the SQL expression of the branch param, or, when it is NULL,
// the active branch of the run runID (an SQL expression).
func branchOr(param, runID string) string {
	return `coalesce(` + param + `, (SELECT active_branch FROM runs WHERE id = ` + runID + `))`
}

// branchColumns is the column list of a Branch but its line, in field
// order.
const branchColumns = `run_id, branch, parent, fork_seq, message_seq, kind, created_by, created_at`

var (
	// runUnansweredOf: the run $1 has a user message after $2, its
	// HandledSeq.
	runUnansweredOf = sql1(`SELECT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = $1
	AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > $2)`)

	// messageOnLine reads the branch and type of the event $2 of the run
	// $1 when it is a message on the line of the branch $3.
	messageOnLine = sql1(`SELECT e.branch, e.type FROM run_events e
WHERE e.run_id = $1 AND e.seq = $2 AND e.type LIKE 'message.%' AND ` + onLine("e", "seq", "$3::bigint"))

	getBranch = sql1(`SELECT ` + branchColumns + ` FROM run_branches WHERE run_id = $1 AND branch = $2`)

	insertBranch = sql1(`INSERT INTO run_branches (` + branchColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`)

	// insertBranchLine writes the line of the new branch $2: its parent
	// $3's line with the parent's segment ending at $4, then its own.
	insertBranchLine = sql1(`INSERT INTO run_branch_lines (run_id, branch, member, until_seq)
SELECT run_id, $2::bigint, member, until_seq FROM run_branch_lines WHERE run_id = $1::text AND branch = $3::bigint AND member <> $3::bigint
UNION ALL SELECT $1::text, $2::bigint, $3::bigint, $4::bigint
UNION ALL SELECT $1::text, $2::bigint, $2::bigint, $5::bigint`)

	// activateBranch makes $2 the run's active branch, and counts it when
	// $3 (it is new).
	activateBranch = sql1(`UPDATE runs SET active_branch = $2::bigint,
	branch_count = CASE WHEN $3::boolean THEN $2::bigint ELSE branch_count END, updated_at = $4
WHERE id = $1
RETURNING ` + runColumns)

	listBranches = sql1(`SELECT ` + branchColumns + ` FROM run_branches WHERE run_id = $1 ORDER BY branch`)

	listBranchLines = sql1(`SELECT branch, member, until_seq FROM run_branch_lines WHERE run_id = $1
ORDER BY branch, until_seq`)
)

// lockIdleRun locks the run for a change of its branches and returns it:
// ErrNotFound when it is missing or deleted, ErrClosed when terminal,
// ErrBusy when it is not between turns.
func lockIdleRun(ctx context.Context, tx executor, runID string) (Run, error) {
	r, err := scanRun(tx.row(ctx, lockRun, runID))
	if err == nil {
		err = closedError(r)
	}
	if err != nil {
		return Run{}, err
	}
	if r.TurnSeq != 0 || r.Status == RunAwaitingApproval || !r.QueuedAt.IsZero() {
		return Run{}, ErrBusy
	}
	var unanswered bool
	if err := tx.row(ctx, runUnansweredOf, runID, r.HandledSeq).Scan(&unanswered); err != nil {
		return Run{}, err
	}
	if unanswered {
		return Run{}, ErrBusy
	}
	return r, nil
}

// ForkRun makes a branch of the run that replaces the user message f.At
// of its active line, makes it the active branch, and appends f.Message
// to it, queueing the run for a turn as PostMessage does (an Idle run
// wakes): one transaction. The branch's parent is the branch that holds
// f.At, or, when f.At is the first message of a branch (an edit of an
// edit), that branch's parent at the same message, so that every
// alternative of a message shares one parent and fork. It returns the
// branch, the message and the run after. ErrNotFound when the run is
// missing or deleted, ErrClosed when terminal, ErrBusy when it is not
// between turns, ErrConflict when f.At is no message of the active line
// (the line changed), ErrInvalid for a bad f or an f.At that is not a
// user message. With f.Key used by an earlier fork of the run, nothing is
// written and that fork's branch, message and the run now are returned,
// whatever the run's state (ErrConflict when the key was a plain
// message's).
func (c *core) ForkRun(ctx context.Context, runID string, f Fork) (Branch, Event, Run, error) {
	if err := checkFork(f); err != nil {
		return Branch{}, Event{}, Run{}, err
	}
	events, err := prepareEvents([]NewEvent{f.Message})
	if err != nil {
		return Branch{}, Event{}, Run{}, err
	}
	var b Branch
	var ev Event
	var out Run
	err = c.inTx(ctx, func(tx executor) error {
		if f.Key != "" {
			var found bool
			var err error
			if b, ev, out, found, err = forkedBefore(ctx, tx, runID, f.Key); err != nil || found {
				return err
			}
		}
		r, err := lockIdleRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		var holder int64
		var typ string
		err = tx.row(ctx, messageOnLine, runID, f.At, r.ActiveBranch).Scan(&holder, &typ)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: message %d is not on the run's active branch", ErrConflict, f.At)
		}
		if err != nil {
			return err
		}
		if typ != EventUserMessage {
			return invalid(fmt.Errorf("message %d is a %s, not a user message", f.At, typ))
		}
		now := storedTime(c.now())
		b = Branch{RunID: runID, ID: r.Branches + 1, Parent: holder, ForkSeq: f.At, MessageSeq: r.LastSeq + 1,
			Kind: f.Kind, CreatedBy: f.CreatedBy, CreatedAt: now}
		if holder != 0 {
			h, err := scanBranch(tx.row(ctx, getBranch, runID, holder))
			if err != nil {
				return err
			}
			if h.MessageSeq == f.At {
				b.Parent, b.ForkSeq = h.Parent, h.ForkSeq
			}
		}
		if _, err := tx.exec(ctx, insertBranch, b.RunID, b.ID, b.Parent, b.ForkSeq, b.MessageSeq, string(b.Kind), b.CreatedBy, b.CreatedAt); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, insertBranchLine, runID, b.ID, b.Parent, b.ForkSeq, int64(MaxSeq)); err != nil {
			return err
		}
		if _, err := scanRun(tx.row(ctx, activateBranch, runID, b.ID, true, now)); err != nil {
			return err
		}
		appended, run, err := advanceRun(ctx, tx, postMessage, runID, now, planAppend(events), f.Key,
			nullString(f.Message.Trace.Parent), nullString(f.Message.Trace.State))
		if err != nil {
			return err
		}
		if f.Key != "" {
			if _, err := tx.exec(ctx, insertMessageKey, runID, f.Key, appended[0].Seq, now); err != nil {
				return err
			}
		}
		if appended[0].Seq != b.MessageSeq {
			return fmt.Errorf("store: branch %d's message was appended at %d, not %d", b.ID, appended[0].Seq, b.MessageSeq)
		}
		tx.wakeAfter(postMessage)
		tx.notifyRuns(run)
		b.Line, err = queryAll(ctx, tx, listBranchLinesOf, scanLineSegment, runID, b.ID)
		ev, out = appended[0], run
		return err
	})
	if err != nil {
		return Branch{}, Event{}, Run{}, c.fail(err)
	}
	return b, ev, out, nil
}

// listBranchLinesOf reads the line of the branch $2 of the run $1.
var listBranchLinesOf = sql1(`SELECT member, until_seq FROM run_branch_lines WHERE run_id = $1 AND branch = $2
ORDER BY until_seq`)

// SwitchBranch makes branch the run's active branch: ListMessages reads
// its line, and the conversation goes on in it. Nothing of the log
// changes; it is appended to: an EventBranchSwitch, on the branch made
// active, in the same transaction (none when branch is active already). ErrNotFound when the run is missing or deleted, ErrClosed when
// terminal, ErrBusy when it is not between turns, ErrInvalid when the run
// has no such branch.
func (c *core) SwitchBranch(ctx context.Context, runID string, branch int64) (Run, error) {
	var out Run
	var switched []preparedEvent
	err := c.inTx(ctx, func(tx executor) error {
		r, err := lockIdleRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if branch < 0 || branch > r.Branches {
			return invalid(fmt.Errorf("run has no branch %d", branch))
		}
		if branch == r.ActiveBranch {
			out = r
			return nil
		}
		switched, err = prepareEvents([]NewEvent{{Type: EventBranchSwitch,
			Payload: fmt.Appendf(nil, `{"branch":%d,"from":%d}`, branch, r.ActiveBranch)}})
		if err != nil {
			return err
		}
		now := storedTime(c.now())
		if _, err := scanRun(tx.row(ctx, activateBranch, runID, branch, false, now)); err != nil {
			return err
		}
		if _, out, err = advanceRun(ctx, tx, appendRun, runID, now, planAppend(switched)); err != nil {
			return err
		}
		tx.notifyRuns(out)
		return nil
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

// ListBranches returns the run's branches beyond the original, by ID,
// each with its line (none is fine). ErrNotFound when the run does not
// exist.
func (c *core) ListBranches(ctx context.Context, runID string) ([]Branch, error) {
	x := c.reader()
	branches, err := queryAll(ctx, x, listBranches, scanBranch, runID)
	if err != nil {
		return nil, c.fail(err)
	}
	if len(branches) == 0 {
		if err := checkRunExists(ctx, x, runID); err != nil {
			return nil, c.fail(err)
		}
		return nil, nil
	}
	type lineRow struct {
		branch int64
		seg    LineSegment
	}
	rows, err := queryAll(ctx, x, listBranchLines, func(row rowScanner) (lineRow, error) {
		var l lineRow
		err := row.Scan(&l.branch, &l.seg.Branch, &l.seg.Until)
		return l, err
	}, runID)
	if err != nil {
		return nil, c.fail(err)
	}
	byID := make(map[int64]*Branch, len(branches))
	for i := range branches {
		byID[branches[i].ID] = &branches[i]
	}
	for _, l := range rows {
		if b := byID[l.branch]; b != nil {
			b.Line = append(b.Line, l.seg)
		}
	}
	return branches, nil
}

// scanBranch reads one row of branchColumns.
func scanBranch(row rowScanner) (Branch, error) {
	var b Branch
	var kind string
	err := row.Scan(&b.RunID, &b.ID, &b.Parent, &b.ForkSeq, &b.MessageSeq, &kind, &b.CreatedBy, at(&b.CreatedAt))
	b.Kind = BranchKind(kind)
	return b, err
}

// scanLineSegment reads one segment of a line.
func scanLineSegment(row rowScanner) (LineSegment, error) {
	var s LineSegment
	err := row.Scan(&s.Branch, &s.Until)
	return s, err
}

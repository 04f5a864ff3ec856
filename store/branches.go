package store

import (
	"context"
	"database/sql"
	"encoding/json"
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
// branch is some bj and its seq is before fj+1. Deleting a message makes a
// branch too, whose line is the line it leaves with that message (and, for
// a user message, its answer) cut out: a segment may then start after the
// cut (its From), and one branch may hold several segments. The original line,
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
	// BranchDelete: a person deleted a message; the branch is the line
	// it leaves without that message (and, for a user message, its
	// answer), and starts with an EventBranchDelete that records it.
	BranchDelete BranchKind = "delete"
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
	// edited message, or the same message again), or, for a deletion,
	// its EventBranchDelete.
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
// with seq from From and before Until. From is 0 but on a segment that
// starts right after a cut a deletion made (then the first seq after it).
type LineSegment struct {
	Branch int64
	From   int64
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
	  AND l.member = ` + alias + `.branch AND l.until_seq > ` + alias + `.` + seq + `
	  AND l.from_seq <= ` + alias + `.` + seq + `) END`
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

	// insertLineSegment writes one segment of the line of the branch $2.
	insertLineSegment = sql1(`INSERT INTO run_branch_lines (run_id, branch, member, from_seq, until_seq)
VALUES ($1, $2, $3, $4, $5)`)

	// activateBranch makes $2 the run's active branch, and counts it when
	// $3 (it is new).
	activateBranch = sql1(`UPDATE runs SET active_branch = $2::bigint,
	branch_count = CASE WHEN $3::boolean THEN $2::bigint ELSE branch_count END, updated_at = $4
WHERE id = $1
RETURNING ` + runColumns)

	listBranches = sql1(`SELECT ` + branchColumns + ` FROM run_branches WHERE run_id = $1 ORDER BY branch`)

	listBranchLines = sql1(`SELECT branch, member, from_seq, until_seq FROM run_branch_lines WHERE run_id = $1
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
				if err == nil && b.Kind == BranchDelete {
					err = fmt.Errorf("%w: the idempotency key was used by a deletion", ErrConflict)
				}
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
		active, err := lineOf(ctx, tx, r)
		if err != nil {
			return err
		}
		if err := insertLine(ctx, tx, b, truncateLine(active, holder, f.At, holder != 0 && b.Parent != holder)); err != nil {
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
var listBranchLinesOf = sql1(`SELECT member, from_seq, until_seq FROM run_branch_lines WHERE run_id = $1 AND branch = $2
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
		err := row.Scan(&l.branch, &l.seg.Branch, &l.seg.From, &l.seg.Until)
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
	err := row.Scan(&s.Branch, &s.From, &s.Until)
	return s, err
}

// lineOf reads the line of the run's active branch.
func lineOf(ctx context.Context, tx executor, r Run) ([]LineSegment, error) {
	if r.ActiveBranch == 0 {
		return []LineSegment{{Branch: 0, Until: MaxSeq}}, nil
	}
	return queryAll(ctx, tx, listBranchLinesOf, scanLineSegment, r.ID, r.ActiveBranch)
}

// truncateLine is the part of line before the event at of branch holder:
// the segments before the one that holds it, then that one cut at at —
// or not at all when skip (at is the first event of holder's own line,
// so nothing of holder comes before it).
func truncateLine(line []LineSegment, holder, at int64, skip bool) []LineSegment {
	var out []LineSegment
	for _, s := range line {
		if s.Branch == holder && s.From <= at && at < s.Until {
			if !skip {
				out = append(out, LineSegment{Branch: s.Branch, From: s.From, Until: at})
			}
			return out
		}
		out = append(out, s)
	}
	return out
}

// cutLine is line without the events from cut to keep (the first seq of
// the line it keeps after the cut; MaxSeq keeps nothing after): each
// segment is split around the cut, and the segment that resumes at keep
// starts there (its From), so that a snapshot covering the cut is not
// taken for one of the line (snapshotApplies). start is the first seq of
// each branch's events: a part that holds none of them is left out.
func cutLine(line []LineSegment, cut, keep int64, start map[int64]int64) []LineSegment {
	var out []LineSegment
	for _, s := range line {
		first := max(s.From, start[s.Branch])
		if before := min(s.Until, cut); first < before {
			out = append(out, LineSegment{Branch: s.Branch, From: s.From, Until: before})
		}
		if keep == MaxSeq {
			continue
		}
		from := s.From
		if first <= keep {
			from = keep
		}
		if max(first, from) < s.Until {
			out = append(out, LineSegment{Branch: s.Branch, From: from, Until: s.Until})
		}
	}
	return out
}

// insertLine writes the line of the new branch b: line, then b's own
// segment.
func insertLine(ctx context.Context, tx executor, b Branch, line []LineSegment) error {
	for _, s := range append(line, LineSegment{Branch: b.ID, Until: MaxSeq}) {
		if _, err := tx.exec(ctx, insertLineSegment, b.RunID, b.ID, s.Branch, s.From, s.Until); err != nil {
			return err
		}
	}
	return nil
}

// Deletion is a message to delete (DeleteMessage).
type Deletion struct {
	// At is the message, on the run's active line: a user message goes
	// with its answer (every message after it up to the next user
	// message of the line), a reply with the tool results that follow
	// it. A tool result alone is refused: it belongs to its call.
	At int64
	// CreatedBy is the principal who asks.
	CreatedBy string
	// Key, when not empty, makes the deletion idempotent, as Fork.Key
	// does a fork.
	Key string
}

var (
	// messageAfterOnLine reads the first message of the line of the
	// branch $3 after $2 whose type is $4 (any other type when $5).
	messageAfterOnLine = sql1(`SELECT min(e.seq) FROM run_events e
WHERE e.run_id = $1 AND e.seq > $2 AND e.type LIKE 'message.%'
  AND (e.type = $4::text) <> $5::boolean AND ` + onLine("e", "seq", "$3::bigint"))

	// branchStarts reads the first seq of each branch of the run $1.
	branchStarts = sql1(`SELECT branch, message_seq FROM run_branches WHERE run_id = $1`)

	// insertKey records the idempotency key $2 of the event $3 of the run
	// $1, at $4.
	insertKey = sql1(`INSERT INTO run_message_keys (run_id, idempotency_key, seq, created_at) VALUES ($1, $2, $3, $4)`)
)

// The message types a deletion tells apart.
const (
	eventAssistantMessage = MessageEventPrefix + "assistant"
	eventToolMessage      = MessageEventPrefix + "tool"
)

// DeleteMessage makes a branch of the run whose line is its active line
// without the message d.At (and what goes with it, see Deletion), makes
// it active, and appends its EventBranchDelete: one transaction. The line
// left stays as it is, and SwitchBranch goes back to it. The branch's
// parent and fork are the message's, as ForkRun's (so a deletion is one
// more alternative of that message). It returns the branch, its event
// and the run after. ErrNotFound when the run is missing or deleted,
// ErrClosed when terminal, ErrBusy when it is not between turns,
// ErrConflict when d.At is no message of the active line, ErrInvalid for
// a bad d or a tool result. With d.Key used by an earlier deletion of the
// run, nothing is written and that deletion's branch, event and the run
// now are returned (ErrConflict when the key was used otherwise).
func (c *core) DeleteMessage(ctx context.Context, runID string, d Deletion) (Branch, Event, Run, error) {
	if err := invalid(checkText("branch creator", d.CreatedBy), checkText("deletion idempotency key", d.Key)); err != nil {
		return Branch{}, Event{}, Run{}, err
	}
	if d.At < 1 {
		return Branch{}, Event{}, Run{}, invalid(fmt.Errorf("deletion at %d is no message", d.At))
	}
	var b Branch
	var ev Event
	var out Run
	err := c.inTx(ctx, func(tx executor) error {
		if d.Key != "" {
			var found bool
			var err error
			if b, ev, out, found, err = forkedBefore(ctx, tx, runID, d.Key); err != nil || found {
				if err == nil && b.Kind != BranchDelete {
					err = fmt.Errorf("%w: the idempotency key was used by a %s", ErrConflict, b.Kind)
				}
				return err
			}
		}
		r, err := lockIdleRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		var holder int64
		var typ string
		err = tx.row(ctx, messageOnLine, runID, d.At, r.ActiveBranch).Scan(&holder, &typ)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: message %d is not on the run's active branch", ErrConflict, d.At)
		}
		if err != nil {
			return err
		}
		// keep: the first message the line keeps after the cut.
		var keep sql.NullInt64
		switch typ {
		case EventUserMessage:
			err = tx.row(ctx, messageAfterOnLine, runID, d.At, r.ActiveBranch, EventUserMessage, false).Scan(&keep)
		case eventAssistantMessage:
			err = tx.row(ctx, messageAfterOnLine, runID, d.At, r.ActiveBranch, eventToolMessage, true).Scan(&keep)
		default:
			return invalid(fmt.Errorf("message %d is a %s, which goes with its call", d.At, typ))
		}
		if err != nil {
			return err
		}
		now := storedTime(c.now())
		b = Branch{RunID: runID, ID: r.Branches + 1, Parent: holder, ForkSeq: d.At, MessageSeq: r.LastSeq + 1,
			Kind: BranchDelete, CreatedBy: d.CreatedBy, CreatedAt: now}
		start := map[int64]int64{0: 1} // a log's first seq is 1
		branches, err := queryAll(ctx, tx, branchStarts, func(row rowScanner) ([2]int64, error) {
			var p [2]int64
			err := row.Scan(&p[0], &p[1])
			return p, err
		}, runID)
		if err != nil {
			return err
		}
		for _, p := range branches {
			start[p[0]] = p[1]
			if p[0] == holder && p[1] == d.At {
				h, err := scanBranch(tx.row(ctx, getBranch, runID, holder))
				if err != nil {
					return err
				}
				b.Parent, b.ForkSeq = h.Parent, h.ForkSeq
			}
		}
		active, err := lineOf(ctx, tx, r)
		if err != nil {
			return err
		}
		// The line left goes on after this; the branch sees it as it is.
		for i := range active {
			active[i].Until = min(active[i].Until, r.LastSeq+1)
		}
		payload := map[string]int64{"deletes": d.At, "from": r.ActiveBranch}
		until := int64(MaxSeq)
		if keep.Valid {
			until = keep.Int64
			payload["untilSeq"] = until
		}
		if _, err := tx.exec(ctx, insertBranch, b.RunID, b.ID, b.Parent, b.ForkSeq, b.MessageSeq, string(b.Kind), b.CreatedBy, b.CreatedAt); err != nil {
			return err
		}
		if err := insertLine(ctx, tx, b, cutLine(active, d.At, until, start)); err != nil {
			return err
		}
		if _, err := scanRun(tx.row(ctx, activateBranch, runID, b.ID, true, now)); err != nil {
			return err
		}
		body, err := json.Marshal(payload)
		if err != nil {
			return err
		}
		events, err := prepareEvents([]NewEvent{{Type: EventBranchDelete, Payload: body}})
		if err != nil {
			return err
		}
		appended, run, err := advanceRun(ctx, tx, appendRun, runID, now, planAppend(events))
		if err != nil {
			return err
		}
		if appended[0].Seq != b.MessageSeq {
			return fmt.Errorf("store: branch %d's deletion was appended at %d, not %d", b.ID, appended[0].Seq, b.MessageSeq)
		}
		if d.Key != "" {
			if _, err := tx.exec(ctx, insertKey, runID, d.Key, appended[0].Seq, now); err != nil {
				return err
			}
		}
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

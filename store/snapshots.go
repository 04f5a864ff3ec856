package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Context snapshots: summaries of a run's conversation, each covering an
// exact span of its event log. They sit beside the log and never change it:
// appending one writes one row of context_snapshots and touches neither the
// run's events nor its row.

// SnapshotKind says who asked for a context snapshot.
type SnapshotKind string

// The kinds of a ContextSnapshot.
const (
	// SnapshotAutomatic: the runtime compacted the run by itself, when its
	// context neared the model's limit.
	SnapshotAutomatic SnapshotKind = "automatic"
	// SnapshotManual: a person asked for the compaction.
	SnapshotManual SnapshotKind = "manual"
)

// ContextSnapshot is one version of a run's context summary. It covers the
// run's message events from FromSeq to ToSeq, both included: Summary
// stands for them in the model context, and the messages after ToSeq
// follow it verbatim. Every snapshot covers a prefix of the conversation:
// FromSeq is the run's first message, so a later snapshot folds the
// earlier ones rather than chaining after them.
type ContextSnapshot struct {
	RunID string
	// Version numbers the run's snapshots from 1; each is the previous
	// one's plus one. The latest version is the one in force.
	Version int64
	// FromSeq and ToSeq are the first and last event the summary covers,
	// both message events of the run.
	FromSeq, ToSeq int64
	// Summary is the summary's text, at most MaxSnapshotSummary bytes.
	Summary string
	// Tokens is the summary's estimated size in tokens.
	Tokens int64
	Kind   SnapshotKind
	// Model names the model that wrote the summary (may be empty).
	Model string
	// CreatedAt is when the snapshot was stored; the store sets it.
	CreatedAt time.Time
	// Branch is the run's active branch when the snapshot was stored;
	// the store sets it. A snapshot applies to the lines that share what
	// it covers (see LatestSnapshot).
	Branch int64
}

// MaxSnapshotSummary bounds a ContextSnapshot's Summary, in bytes: a
// summary stands for many messages in a bounded context, so one this large
// is a summariser gone wrong, not a summary.
const MaxSnapshotSummary = 64 << 10

// maxSnapshotModel bounds a ContextSnapshot's Model, in bytes.
const maxSnapshotModel = 256

// snapshotColumns is the column list of a ContextSnapshot, in field order.
const snapshotColumns = `run_id, version, from_seq, to_seq, summary, tokens, kind, model, created_at, branch`

// checkSnapshot validates a snapshot AppendSnapshot writes, before the
// database sees it.
func checkSnapshot(s ContextSnapshot) error {
	var errs []error
	if s.RunID == "" {
		errs = append(errs, errors.New("snapshot run ID is empty"))
	}
	if s.Version < 1 {
		errs = append(errs, fmt.Errorf("snapshot version is %d, want 1 or more", s.Version))
	}
	if s.FromSeq < 1 || s.ToSeq < s.FromSeq {
		errs = append(errs, fmt.Errorf("snapshot coverage %d to %d is not a span of the log", s.FromSeq, s.ToSeq))
	}
	switch {
	case s.Summary == "":
		errs = append(errs, errors.New("snapshot summary is empty"))
	case len(s.Summary) > MaxSnapshotSummary:
		errs = append(errs, fmt.Errorf("snapshot summary is %d bytes, over %d", len(s.Summary), MaxSnapshotSummary))
	}
	if s.Tokens < 0 || s.Tokens > MaxContextTokens {
		errs = append(errs, fmt.Errorf("snapshot tokens %d are out of range", s.Tokens))
	}
	if s.Kind != SnapshotAutomatic && s.Kind != SnapshotManual {
		errs = append(errs, fmt.Errorf("snapshot kind %q is neither %q nor %q", s.Kind, SnapshotAutomatic, SnapshotManual))
	}
	if len(s.Model) > maxSnapshotModel {
		errs = append(errs, fmt.Errorf("snapshot model name is %d bytes, over %d", len(s.Model), maxSnapshotModel))
	}
	errs = append(errs,
		checkText("snapshot run ID", s.RunID),
		checkText("snapshot summary", s.Summary),
		checkText("snapshot model", s.Model))
	return invalid(errs...)
}

// snapshotApplies is the SQL condition that the snapshot s applies to the
// line of the branch target (an SQL expression): it was written on a
// branch of that line, and covers only what the line shares with it (its
// to_seq is before the line leaves that branch). The messages it covers
// are then exactly the line's first ones. A line cut by a deletion
// before to_seq (a segment starting after the cut, at or before it) takes
// only a snapshot written on a line with the same cut.
func snapshotApplies(target string) string {
	return onLine("s", "to_seq", target) + ` AND NOT EXISTS (
	SELECT 1 FROM run_branch_lines c WHERE c.run_id = s.run_id AND c.branch = ` + target + `
	  AND c.from_seq > 0 AND c.from_seq <= s.to_seq
	  AND NOT EXISTS (SELECT 1 FROM run_branch_lines c2 WHERE c2.run_id = s.run_id AND c2.branch = s.branch
	    AND c2.from_seq = c.from_seq))`
}

var (
	// snapshotBounds reads what a new snapshot of the run is checked
	// against, on its active line: the line's first message, whether $2
	// is a message of the line, the latest snapshot that applies to the
	// line (its version and end), and the active branch. No row: the
	// run does not exist or is deleted.
	snapshotBounds = sql1(`
SELECT
	(SELECT e.seq FROM run_events e WHERE e.run_id = r.id AND e.type LIKE 'message.%'
	   AND ` + onLine("e", "seq", "r.active_branch") + ` ORDER BY e.seq LIMIT 1),
	EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.seq = $2 AND e.type LIKE 'message.%'
	   AND ` + onLine("e", "seq", "r.active_branch") + `),
	(SELECT s.version FROM context_snapshots s WHERE s.run_id = r.id AND ` + snapshotApplies("r.active_branch") + `
	 ORDER BY s.version DESC, s.created_at DESC LIMIT 1),
	(SELECT s.to_seq FROM context_snapshots s WHERE s.run_id = r.id AND ` + snapshotApplies("r.active_branch") + `
	 ORDER BY s.version DESC, s.created_at DESC LIMIT 1),
	r.active_branch
FROM runs r WHERE r.id = $1 AND r.deleted_at IS NULL`)

	insertSnapshot = sql1(`
INSERT INTO context_snapshots (` + snapshotColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`)

	// latestSnapshot reads the latest snapshot that applies to the run's
	// active line.
	latestSnapshot = sql1(`
SELECT ` + snapshotColumns + ` FROM context_snapshots s WHERE s.run_id = $1
  AND ` + snapshotApplies(`(SELECT active_branch FROM runs WHERE id = $1)`) + `
ORDER BY s.version DESC, s.created_at DESC LIMIT 1`)

	listSnapshots = sql1(`
SELECT ` + snapshotColumns + ` FROM context_snapshots WHERE run_id = $1 ORDER BY version, branch`)
)

func (c *core) AppendSnapshot(ctx context.Context, s ContextSnapshot) (ContextSnapshot, error) {
	if err := checkSnapshot(s); err != nil {
		return ContextSnapshot{}, err
	}
	s.CreatedAt, s.Branch = storedTime(c.now()), 0
	err := c.inTx(ctx, func(tx executor) error {
		var first, version, to sql.NullInt64
		var isMessage bool
		if err := tx.row(ctx, snapshotBounds, s.RunID, s.ToSeq).Scan(&first, &isMessage, &version, &to, &s.Branch); err != nil {
			return err // sql.ErrNoRows: the run is missing
		}
		if !isMessage {
			return invalid(fmt.Errorf("snapshot coverage ends at %d, which is not a message of the run's active line", s.ToSeq))
		}
		if s.FromSeq != first.Int64 {
			return invalid(fmt.Errorf("snapshot coverage starts at %d, not at the active line's first message %d", s.FromSeq, first.Int64))
		}
		if s.Version != version.Int64+1 {
			return fmt.Errorf("%w: snapshot version %d does not follow the latest, %d", ErrConflict, s.Version, version.Int64)
		}
		if s.ToSeq < to.Int64 {
			return fmt.Errorf("%w: snapshot coverage ends at %d, before the latest snapshot's %d", ErrConflict, s.ToSeq, to.Int64)
		}
		// A concurrent append of the same version fails here, on the
		// primary key: ErrConflict.
		_, err := tx.exec(ctx, insertSnapshot, s.RunID, s.Version, s.FromSeq, s.ToSeq, s.Summary, s.Tokens, string(s.Kind), s.Model, s.CreatedAt, s.Branch)
		return err
	})
	if err != nil {
		return ContextSnapshot{}, c.fail(err)
	}
	return s, nil
}

func (c *core) LatestSnapshot(ctx context.Context, runID string) (ContextSnapshot, error) {
	s, err := scanSnapshot(c.reader().row(ctx, latestSnapshot, runID))
	return s, c.fail(err)
}

func (c *core) ListSnapshots(ctx context.Context, runID string) ([]ContextSnapshot, error) {
	x := c.reader()
	out, err := queryAll(ctx, x, listSnapshots, scanSnapshot, runID)
	if err != nil {
		return nil, c.fail(err)
	}
	if len(out) == 0 {
		if err := checkRunExists(ctx, x, runID); err != nil {
			return nil, c.fail(err)
		}
	}
	return out, nil
}

// scanSnapshot reads one row of snapshotColumns.
func scanSnapshot(row rowScanner) (ContextSnapshot, error) {
	var s ContextSnapshot
	var kind string
	err := row.Scan(&s.RunID, &s.Version, &s.FromSeq, &s.ToSeq, &s.Summary, &s.Tokens, &kind, &s.Model, at(&s.CreatedAt), &s.Branch)
	s.Kind = SnapshotKind(kind)
	return s, err
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// AuditCheckpoint is a signed statement of the audit log's head: the
// signed note (see package internal/audit) with the head it names and its
// time repeated, for listing and paging. At most one checkpoint names a
// given Seq.
type AuditCheckpoint struct {
	Seq  int64     // the head's sequence number
	Hash string    // the head's hash
	At   time.Time // when it was signed, whole microseconds
	Note string    // the signed note, as its signer wrote it
}

// AuditCheckpoints is the store's part in the audit log's checkpoints;
// Store has it.
type AuditCheckpoints interface {
	// AuditHead returns the audit log's newest record's sequence number
	// and hash, both zero for an empty log.
	AuditHead(ctx context.Context) (AuditHead, error)
	// InsertAuditCheckpoint stores c. Seq, Hash, At and Note are
	// required. A checkpoint of the same Seq fails with ErrConflict: of
	// two replicas that sign one head, one stores its checkpoint.
	InsertAuditCheckpoint(ctx context.Context, c AuditCheckpoint) error
	// LatestAuditCheckpoint returns the checkpoint of the highest Seq, or
	// ErrNotFound when there is none.
	LatestAuditCheckpoint(ctx context.Context) (AuditCheckpoint, error)
	// ListAuditCheckpoints returns up to limit checkpoints with Seq >
	// afterSeq, in order of Seq.
	ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]AuditCheckpoint, error)
}

const auditCheckpointColumns = `seq, hash, at, note`

var (
	insertAuditCheckpoint = sql1(`INSERT INTO audit_checkpoints (` + auditCheckpointColumns + `) VALUES ($1, $2, $3, $4)`)

	latestAuditCheckpoint = sql1(`SELECT ` + auditCheckpointColumns + ` FROM audit_checkpoints ORDER BY seq DESC LIMIT 1`)

	listAuditCheckpoints = sql1(`SELECT ` + auditCheckpointColumns + ` FROM audit_checkpoints WHERE seq > $1 ORDER BY seq LIMIT $2`)
)

func (c *core) AuditHead(ctx context.Context) (AuditHead, error) {
	var head AuditHead
	err := c.reader().row(ctx, auditHead).Scan(&head.Seq, &head.Hash)
	if errors.Is(err, sql.ErrNoRows) {
		return AuditHead{}, nil
	}
	return head, c.fail(err)
}

func (c *core) InsertAuditCheckpoint(ctx context.Context, cp AuditCheckpoint) error {
	if err := checkAuditCheckpoint(cp); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, insertAuditCheckpoint, cp.Seq, cp.Hash, storedTime(cp.At), cp.Note)
		return err
	}))
}

func (c *core) LatestAuditCheckpoint(ctx context.Context) (AuditCheckpoint, error) {
	cp, err := scanAuditCheckpoint(c.reader().row(ctx, latestAuditCheckpoint))
	return cp, c.fail(err)
}

func (c *core) ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]AuditCheckpoint, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, c.reader(), listAuditCheckpoints, scanAuditCheckpoint, afterSeq, limit)
	return out, c.fail(err)
}

// checkAuditCheckpoint validates a checkpoint before it is stored.
func checkAuditCheckpoint(cp AuditCheckpoint) error {
	var errs []error
	if cp.Seq < 1 {
		errs = append(errs, fmt.Errorf("audit checkpoint seq is %d, want 1 or more", cp.Seq))
	}
	if cp.Hash == "" {
		errs = append(errs, errors.New("audit checkpoint hash is empty"))
	}
	if cp.Note == "" {
		errs = append(errs, errors.New("audit checkpoint note is empty"))
	}
	if cp.At.IsZero() {
		errs = append(errs, errors.New("audit checkpoint time is zero"))
	}
	errs = append(errs,
		checkText("audit checkpoint hash", cp.Hash),
		checkText("audit checkpoint note", cp.Note),
		checkTime("audit checkpoint time", cp.At),
	)
	return invalid(errs...)
}

// scanAuditCheckpoint reads one row of auditCheckpointColumns.
func scanAuditCheckpoint(row rowScanner) (AuditCheckpoint, error) {
	var cp AuditCheckpoint
	err := row.Scan(&cp.Seq, &cp.Hash, at(&cp.At), &cp.Note)
	return cp, err
}

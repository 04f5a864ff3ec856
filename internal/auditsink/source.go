package auditsink

import (
	"context"
	"fmt"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Batch is lines of a Source, in order.
type Batch struct {
	// Body is the lines, each ending in a newline.
	Body []byte
	// Lines counts them; Last is the sequence of the last. An empty batch
	// has none.
	Lines int
	Last  int64
}

// Source hands out lines in order.
type Source interface {
	// Batch returns up to limit lines after the sequence after, stopping
	// after the line that brings Body to maxBytes or more (so a batch
	// holds at least one line when any is left).
	Batch(ctx context.Context, after int64, limit, maxBytes int) (Batch, error)
}

// Records is the audit log's records as a Source: each line as
// audit.Line writes it.
type Records struct {
	Log audit.Reader
}

// Batch implements Source.
func (r Records) Batch(ctx context.Context, after int64, limit, maxBytes int) (Batch, error) {
	recs, err := r.Log.AuditRecords(ctx, after, limit)
	if err != nil {
		return Batch{}, fmt.Errorf("read the audit log after %d: %w", after, err)
	}
	return batchOf(recs, maxBytes, audit.Line, func(r store.AuditRecord) int64 { return r.Seq })
}

// batchOf is the lines of items, in order, up to the one that brings the
// body to maxBytes or more.
func batchOf[T any](items []T, maxBytes int, line func(T) ([]byte, error), seq func(T) int64) (Batch, error) {
	var b Batch
	for _, it := range items {
		l, err := line(it)
		if err != nil {
			return Batch{}, err
		}
		b.Body = append(b.Body, l...)
		b.Lines++
		b.Last = seq(it)
		if len(b.Body) >= maxBytes {
			break
		}
	}
	return b, nil
}

// CheckpointLister reads the audit log's signed checkpoints; store.Store
// is one.
type CheckpointLister interface {
	ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]store.AuditCheckpoint, error)
}

// Checkpoints is the audit log's signed checkpoints as a Source: each
// line as audit.CheckpointLine writes it, in the order of the heads they
// sign; a line's sequence is its head's.
type Checkpoints struct {
	Log CheckpointLister
}

// Batch implements Source.
func (c Checkpoints) Batch(ctx context.Context, after int64, limit, maxBytes int) (Batch, error) {
	cps, err := c.Log.ListAuditCheckpoints(ctx, after, limit)
	if err != nil {
		return Batch{}, fmt.Errorf("read the audit checkpoints after %d: %w", after, err)
	}
	return batchOf(cps, maxBytes, audit.CheckpointLine, func(c store.AuditCheckpoint) int64 { return c.Seq })
}

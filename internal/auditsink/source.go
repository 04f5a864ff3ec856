package auditsink

import (
	"context"
	"fmt"

	"github.com/usherhq/usher/internal/audit"
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
	var b Batch
	for _, rec := range recs {
		line, err := audit.Line(rec)
		if err != nil {
			return Batch{}, err
		}
		b.Body = append(b.Body, line...)
		b.Lines++
		b.Last = rec.Seq
		if len(b.Body) >= maxBytes {
			break
		}
	}
	return b, nil
}

package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// Export writes every record after seq after to w as JSON lines, in order:
// each line is the record's hashed body (see the package documentation)
// with its hash and prev_hash added, keys sorted.
func Export(ctx context.Context, st Reader, w io.Writer, after int64) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for {
		page, err := st.AuditRecords(ctx, after, pageSize)
		if err != nil {
			return fmt.Errorf("audit: export: read after seq %d: %w", after, err)
		}
		for _, r := range page {
			line, err := exportOf(r)
			if err != nil {
				return fmt.Errorf("audit: export: record %d: %w", r.Seq, err)
			}
			if err := enc.Encode(line); err != nil {
				return fmt.Errorf("audit: export: %w", err)
			}
			after = r.Seq
		}
		if len(page) < pageSize {
			break
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("audit: export: %w", err)
	}
	return nil
}

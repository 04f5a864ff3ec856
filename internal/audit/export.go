package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/usherhq/usher/store"
)

// Export writes every record after seq after to w as JSON lines, in order:
// each line is the record's hashed body (see the package documentation)
// with its hash and prev_hash added, keys sorted (see Line).
func Export(ctx context.Context, st Reader, w io.Writer, after int64) error {
	bw := bufio.NewWriter(w)
	for {
		page, err := st.AuditRecords(ctx, after, pageSize)
		if err != nil {
			return fmt.Errorf("audit: export: read after seq %d: %w", after, err)
		}
		for _, r := range page {
			line, err := Line(r)
			if err != nil {
				return fmt.Errorf("audit: export: %w", err)
			}
			if _, err := bw.Write(line); err != nil {
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

// Line returns r as Export writes it: one JSON object, keys sorted, HTML
// characters unescaped, and a newline (see AppendRecord). It fails only
// when r.Details is not JSON.
func Line(r store.AuditRecord) ([]byte, error) {
	b, err := AppendRecord(make([]byte, 0, lineSize+len(r.Details)), r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// lineSize is about the length of a line without its details: the keys,
// two hashes and a few more.
const lineSize = 512

// KindCheckpoint is the kind of a checkpoint's line among the records'
// lines a sink receives (CheckpointLine).
const KindCheckpoint = "audit_checkpoint"

// CheckpointLine returns c as one JSON line, with its newline, as the
// audit sinks deliver it beside the records: its kind (KindCheckpoint),
// the head it signs (seq, hash), when, and the signed note, keys sorted.
// A receiver checks the note against the published audit keys
// (GET /.well-known/usher-audit-key) and that its record seq has that
// hash.
func CheckpointLine(c store.AuditCheckpoint) ([]byte, error) {
	line := struct {
		At   string `json:"at"`
		Hash string `json:"hash"`
		Kind string `json:"kind"`
		Note string `json:"note"`
		Seq  int64  `json:"seq"`
	}{c.At.UTC().Format(timeLayout), c.Hash, KindCheckpoint, c.Note, c.Seq}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(line); err != nil {
		return nil, fmt.Errorf("checkpoint %d: %w", c.Seq, err)
	}
	return b.Bytes(), nil
}

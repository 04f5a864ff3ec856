package audit

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/usherhq/usher/store"
)

// What VerifyWithCheckpoints finds besides what Verify finds.
const (
	// ProblemCheckpoint: the log does not hold the record a signed
	// checkpoint names, with the checkpoint's hash: it was cut short after
	// the checkpoint, or rewritten. Seq is the checkpoint's.
	ProblemCheckpoint ProblemKind = "checkpoint_mismatch"
	// ProblemCheckpointSignature: a stored checkpoint is not signed by a
	// trusted key, its signature does not verify, or it is not a
	// checkpoint; such a checkpoint proves nothing, and was forged or
	// altered. Seq is the one stored with it.
	ProblemCheckpointSignature ProblemKind = "checkpoint_signature"
)

// CheckpointReader reads the audit log and its checkpoints in order;
// store.Store is one.
type CheckpointReader interface {
	Reader
	ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]store.AuditCheckpoint, error)
}

// VerifyWithCheckpoints does what Verify does and checks every stored
// checkpoint: that a key among keys, the trusted verifier keys (as
// /.well-known/usher-audit-key publishes them), signed it, and that the
// log still holds the record it names, with its hash. A log cut short
// after a checkpoint, or rewritten (even with a chain of its own that
// holds together), is reported as a ProblemCheckpoint at the sequence
// number of the checkpoint it contradicts; a checkpoint forged or altered
// to match a rewritten log as a ProblemCheckpointSignature. What it cannot
// see is a checkpoint deleted along with the records after it: compare
// LastCheckpoint with one kept outside the database (a SIEM's copy). Each
// of heads is checked as Verify checks an anchor.
func VerifyWithCheckpoints(ctx context.Context, st CheckpointReader, keys note.Verifiers, heads ...store.AuditHead) (Report, error) {
	if keys == nil {
		keys = note.VerifierList()
	}
	anchors := anchorsOf(heads)
	var bad []Problem
	var verified int64
	var last Checkpoint
	for after := int64(0); ; {
		page, err := st.ListAuditCheckpoints(ctx, after, pageSize)
		if err != nil {
			return Report{}, fmt.Errorf("audit: verify: read checkpoints after seq %d: %w", after, err)
		}
		for _, cp := range page {
			after = cp.Seq
			c, err := OpenCheckpoint(cp.Note, keys)
			switch {
			case err != nil:
				bad = append(bad, Problem{cp.Seq, ProblemCheckpointSignature, fmt.Sprintf("the checkpoint stored at %s does not verify: %v", cp.At.Format(timeLayout), err)})
				continue
			case c.Seq != cp.Seq || c.Hash != cp.Hash:
				bad = append(bad, Problem{cp.Seq, ProblemCheckpointSignature, fmt.Sprintf("the checkpoint is stored as record %d, hash %.16s…, but its note signs record %d, hash %.16s…", cp.Seq, cp.Hash, c.Seq, c.Hash)})
			}
			verified++
			if c.Seq >= last.Seq {
				last = c
			}
			anchors = append(anchors, anchor{
				AuditHead: store.AuditHead{Seq: c.Seq, Hash: c.Hash},
				kind:      ProblemCheckpoint,
				says:      "the checkpoint signed at " + c.At.Format(timeLayout),
			})
		}
		if len(page) < pageSize {
			break
		}
	}
	rep, _, err := verify(ctx, st, store.AuditHead{}, 0, anchors)
	if err != nil {
		return rep, err
	}
	for _, p := range bad {
		rep.add(p)
	}
	rep.Checkpoints, rep.LastCheckpoint = verified, last
	return rep, nil
}

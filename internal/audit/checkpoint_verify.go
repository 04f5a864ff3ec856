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
	cps, err := checkpointAnchors(ctx, st, keys, 0, 0)
	if err != nil {
		return Report{}, err
	}
	anchors := append(anchorsOf(heads), cps.anchors...)
	rep, _, err := verify(ctx, st, store.AuditHead{}, 0, anchors)
	if err != nil {
		return rep, err
	}
	for _, p := range cps.bad {
		rep.add(p)
	}
	rep.Checkpoints, rep.LastCheckpoint = cps.verified, cps.last
	return rep, nil
}

// VerifyFromWithCheckpoints is VerifyFrom that checks, as
// VerifyWithCheckpoints does, the stored checkpoints of the records it
// reads — those of sequence numbers after from and at most from's plus
// limit (every one after from when limit is 0) — and, in the step that
// reaches the head, every checkpoint after it: a log cut short, each at
// the sequence number of the checkpoint it contradicts. A checkpoint of a
// record of another step is that step's to check. Steps that together
// cover the log check every checkpoint once, as VerifyWithCheckpoints
// does, but for an event recorded twice in two steps (see VerifyFrom).
func VerifyFromWithCheckpoints(ctx context.Context, st CheckpointReader, keys note.Verifiers, from store.AuditHead, limit int64) (rep Report, done bool, err error) {
	upTo := int64(0)
	if limit > 0 {
		upTo = from.Seq + limit
	}
	cps, err := checkpointAnchors(ctx, st, keys, from.Seq, upTo)
	if err != nil {
		return Report{}, false, err
	}
	rep, done, err = verify(ctx, st, from, limit, cps.anchors)
	if err != nil {
		return rep, false, err
	}
	bad := cps.bad
	if done && upTo > 0 {
		// The head came before the step's bound: the checkpoints after the
		// bound name records the log no longer holds.
		past, err := checkpointAnchors(ctx, st, keys, upTo, 0)
		if err != nil {
			return rep, false, err
		}
		for _, a := range past.anchors {
			rep.add(a.missing(rep.Head.Seq))
		}
		bad = append(bad, past.bad...)
		cps.verified += past.verified
		if past.last.Seq > cps.last.Seq {
			cps.last = past.last
		}
	}
	for _, p := range bad {
		rep.add(p)
	}
	rep.Checkpoints, rep.LastCheckpoint = cps.verified, cps.last
	return rep, done, nil
}

// checkpoints are the stored checkpoints of a range of records, read for a
// verification: each one that verifies as an anchor the log must hold,
// the problem of each that does not, how many verified, and the last.
type checkpoints struct {
	anchors  []anchor
	bad      []Problem
	verified int64
	last     Checkpoint
}

// checkpointAnchors reads the stored checkpoints of sequence numbers after
// after and at most upTo (every one after after when upTo is 0), and opens
// each with keys (none trusted when nil).
func checkpointAnchors(ctx context.Context, st CheckpointReader, keys note.Verifiers, after, upTo int64) (checkpoints, error) {
	if keys == nil {
		keys = note.VerifierList()
	}
	var out checkpoints
	for {
		page, err := st.ListAuditCheckpoints(ctx, after, pageSize)
		if err != nil {
			return checkpoints{}, fmt.Errorf("audit: verify: read checkpoints after seq %d: %w", after, err)
		}
		for _, cp := range page {
			after = cp.Seq
			if upTo > 0 && cp.Seq > upTo {
				return out, nil
			}
			c, err := OpenCheckpoint(cp.Note, keys)
			switch {
			case err != nil:
				out.bad = append(out.bad, Problem{cp.Seq, ProblemCheckpointSignature, fmt.Sprintf("the checkpoint stored at %s does not verify: %v", cp.At.Format(timeLayout), err)})
				continue
			case c.Seq != cp.Seq || c.Hash != cp.Hash:
				out.bad = append(out.bad, Problem{cp.Seq, ProblemCheckpointSignature, fmt.Sprintf("the checkpoint is stored as record %d, hash %.16s…, but its note signs record %d, hash %.16s…", cp.Seq, cp.Hash, c.Seq, c.Hash)})
			}
			out.verified++
			if c.Seq >= out.last.Seq {
				out.last = c
			}
			out.anchors = append(out.anchors, anchor{
				AuditHead: store.AuditHead{Seq: c.Seq, Hash: c.Hash},
				kind:      ProblemCheckpoint,
				says:      "the checkpoint signed at " + c.At.Format(timeLayout),
			})
		}
		if len(page) < pageSize {
			return out, nil
		}
	}
}

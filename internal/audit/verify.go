package audit

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/usherhq/usher/store"
)

// Reader reads the audit log in order; store.Store is one.
type Reader interface {
	AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]store.AuditRecord, error)
}

// pageSize is how many records Verify and Export read at a time.
const pageSize = 1000

// maxProblems bounds the problems a Report lists; it still counts them all.
const maxProblems = 100

// ProblemKind names what is wrong with the chain at a record.
type ProblemKind string

// What Verify finds.
const (
	// ProblemEdited: the record's content does not match its hash.
	ProblemEdited ProblemKind = "edited"
	// ProblemGap: records before this one are missing from the sequence.
	ProblemGap ProblemKind = "gap"
	// ProblemBrokenLink: the record's prev_hash is not the hash of the
	// record before it: a record was deleted, replaced or moved.
	ProblemBrokenLink ProblemKind = "broken_link"
	// ProblemAnchor: the log does not hold the record an anchor names,
	// with the anchor's hash: it was truncated or rewritten.
	ProblemAnchor ProblemKind = "anchor_mismatch"
	// ProblemRepeatedEvent: the record carries the event id of an earlier
	// one, so the log records that event more than once. The database
	// refuses a second record of an event (a unique index); one that got
	// in was written without that index, or put there by hand.
	ProblemRepeatedEvent ProblemKind = "repeated_event"
)

// Problem is one thing wrong with the chain.
type Problem struct {
	Seq    int64 // the record at which it shows
	Kind   ProblemKind
	Detail string
}

func (p Problem) String() string {
	return fmt.Sprintf("seq %d: %s: %s", p.Seq, p.Kind, p.Detail)
}

// Report is what Verify found.
type Report struct {
	// Records is how many records were read.
	Records int64
	// Head is the last record read: record its Seq and Hash somewhere
	// outside the database, and pass them to a later Verify as an anchor,
	// to detect truncation and rewriting.
	Head store.AuditHead
	// Checkpoints is how many signed checkpoints verified (by
	// VerifyWithCheckpoints), and LastCheckpoint the one of the highest
	// Seq among them.
	Checkpoints    int64
	LastCheckpoint Checkpoint
	// Problems lists the first problems found, in order; ProblemCount
	// counts them all.
	Problems     []Problem
	ProblemCount int
}

// Intact reports whether the chain verified with no problem.
func (r Report) Intact() bool { return r.ProblemCount == 0 }

func (r *Report) add(p Problem) {
	r.ProblemCount++
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, p)
	}
}

// Verify walks the whole audit log in order and checks every record's
// hash, its link to the record before, and that no event is recorded
// twice; see the package documentation for what that detects. Each anchor
// is a head recorded earlier: the log must still hold a record with its
// Seq and Hash. Verify returns an error only when it cannot read the log;
// a broken chain is a Report that is not Intact.
//
// Verify keeps the event id of every record read, about 40 bytes each: some
// 40 MB for a log of a million records.
func Verify(ctx context.Context, st Reader, anchors ...store.AuditHead) (Report, error) {
	rep, _, err := verify(ctx, st, store.AuditHead{}, 0, anchorsOf(anchors))
	return rep, err
}

// anchorsOf returns heads recorded by an operator as anchors.
func anchorsOf(heads []store.AuditHead) []anchor {
	marks := make([]anchor, len(heads))
	for i, h := range heads {
		marks[i] = anchor{AuditHead: h, kind: ProblemAnchor, says: "the anchor"}
	}
	return marks
}

// VerifyFrom checks, as Verify does, at most limit records (all when
// limit is 0) after from, the first chained on from: the part of a long
// log after a record verified before, so that a long log can be verified
// in bounded steps. It reports whether it reached the head; the Report's
// Head is the last record it read, where the next step starts. An event
// recorded twice is found only when both records are in one step.
func VerifyFrom(ctx context.Context, st Reader, from store.AuditHead, limit int64) (rep Report, done bool, err error) {
	return verify(ctx, st, from, limit, nil)
}

// anchor is a head the log must still hold: an operator's, or a signed
// checkpoint's.
type anchor struct {
	store.AuditHead
	kind ProblemKind // what a log that does not hold it has
	says string      // who says so, in a problem's detail
}

// missing is the problem of a log, of head head, that does not hold a.
func (a anchor) missing(head int64) Problem {
	return Problem{a.Seq, a.kind, fmt.Sprintf("the log (head %d) no longer holds the record %s names", head, a.says)}
}

// verify is Verify from the record from, of at most limit records (0: no
// limit), with anchors of any kind; done reports whether it reached the
// head.
func verify(ctx context.Context, st Reader, from store.AuditHead, limit int64, anchors []anchor) (Report, bool, error) {
	var rep Report
	want := make(map[int64][]anchor, len(anchors))
	for _, a := range anchors {
		want[a.Seq] = append(want[a.Seq], a)
	}
	seen := make(map[int64]bool, len(anchors))
	var events eventSet
	prev := from
	for {
		n := pageSize
		if limit > 0 && limit-rep.Records < int64(n) {
			n = int(limit - rep.Records)
		}
		if n == 0 {
			rep.Head = prev
			return rep, false, nil
		}
		page, err := st.AuditRecords(ctx, prev.Seq, n)
		if err != nil {
			return rep, false, fmt.Errorf("audit: verify: read after seq %d: %w", prev.Seq, err)
		}
		for _, r := range page {
			rep.Records++
			switch {
			case r.Seq != prev.Seq+1:
				rep.add(Problem{r.Seq, ProblemGap, fmt.Sprintf("records %d to %d are missing", prev.Seq+1, r.Seq-1)})
			case r.PrevHash != prev.Hash:
				rep.add(Problem{r.Seq, ProblemBrokenLink, fmt.Sprintf("prev_hash %.16s… is not the hash of record %d", r.PrevHash, prev.Seq)})
			}
			if h, err := Hash(r); err != nil || h != r.Hash {
				rep.add(Problem{r.Seq, ProblemEdited, "the record does not match its hash"})
			}
			if first, ok := events.add(r.EventID, r.Seq); !ok {
				rep.add(Problem{r.Seq, ProblemRepeatedEvent, fmt.Sprintf("event %.16s… is already recorded at seq %d", r.EventID, first)})
			}
			for _, a := range want[r.Seq] {
				seen[r.Seq] = true
				if a.Hash != r.Hash {
					rep.add(Problem{r.Seq, a.kind, fmt.Sprintf("the hash is %.16s…, %s says %.16s…", r.Hash, a.says, a.Hash)})
				}
			}
			prev = store.AuditHead{Seq: r.Seq, Hash: r.Hash}
		}
		if len(page) < n {
			break
		}
	}
	rep.Head = prev
	for _, a := range anchors {
		if !seen[a.Seq] {
			rep.add(a.missing(prev.Seq))
		}
	}
	return rep, true, nil
}

// eventSet holds the event ids Verify has read, each with the sequence
// number of its first record. Records written before event ids have none
// and are not held.
type eventSet struct {
	ids   map[[16]byte]int64 // well-formed ids, as their 128 bits
	other map[string]int64   // anything else a record carries
}

// add records id at seq and reports true, or, when id was added before,
// reports the seq it was added at and false.
func (s *eventSet) add(id string, seq int64) (int64, bool) {
	if id == "" {
		return 0, true
	}
	if eventIDPattern.MatchString(id) {
		// 32 lowercase hex digits: they decode, and to one id only.
		var k [16]byte
		_, _ = hex.Decode(k[:], []byte(id))
		if s.ids == nil {
			s.ids = make(map[[16]byte]int64)
		}
		if first, ok := s.ids[k]; ok {
			return first, false
		}
		s.ids[k] = seq
		return 0, true
	}
	if s.other == nil {
		s.other = make(map[string]int64)
	}
	if first, ok := s.other[id]; ok {
		return first, false
	}
	s.other[id] = seq
	return 0, true
}

package review

import (
	"golang.org/x/mod/sumdb/note"
	"net/http"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// head is a record's place in the chain as the API shows it.
type head struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// problem is one thing wrong with the chain as the API shows it: where,
// and what (audit.ProblemKind).
type problem struct {
	Seq  int64  `json:"seq"`
	Kind string `json:"kind"`
}

// verification is the answer of GET /api/audit/verify.
type verification struct {
	// Intact: no problem in the records this step checked.
	Intact bool `json:"intact"`
	// Head is the log's newest record when the step began.
	Head head `json:"head"`
	// From is the record the step started after (0: the first record).
	From int64 `json:"from"`
	// VerifiedTo is the last record the step checked.
	VerifiedTo int64 `json:"verified_to"`
	// Records is how many records the step checked.
	Records int64 `json:"records"`
	// Checkpoints is how many signed checkpoints of those records (and,
	// in the step that reaches the head, after it) verified.
	Checkpoints int64 `json:"checkpoints"`
	// Resume, when present, is where the next step starts (its after):
	// the step stopped at its bound before the head.
	Resume *int64 `json:"resume,omitempty"`
	// FirstBroken is the first record at which a problem shows.
	FirstBroken *int64 `json:"first_broken,omitempty"`
	// Problems are the first problems found (at most 100); ProblemCount
	// counts them all.
	Problems     []problem `json:"problems"`
	ProblemCount int       `json:"problem_count"`
}

// verify answers GET /api/audit/verify[?after=N]: it checks the chain
// after record N (from the first record without it), chained on N's
// stored hash, up to the API's bound, and the signed checkpoints of those
// records against the published keys, as
// audit.VerifyFromWithCheckpoints does (the chain alone, as
// audit.VerifyFrom does, without Options.AuditKeys).
func (a *API) verify(w http.ResponseWriter, r *http.Request) {
	after, err := afterOnly(r)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	ctx := r.Context()
	last, err := a.st.QueryAudit(ctx, store.AuditQuery{Descending: true, Limit: 1})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	var v verification
	if len(last) == 1 {
		v.Head = head{last[0].Seq, last[0].Hash}
	}
	from := store.AuditHead{}
	if after > 0 {
		rs, err := a.st.AuditRecords(ctx, after-1, 1)
		if err != nil {
			httpx.WriteError(w, r, a.log, err)
			return
		}
		if len(rs) == 0 || rs[0].Seq != after {
			httpx.WriteError(w, r, a.log, httpx.ErrNotFound)
			return
		}
		from = store.AuditHead{Seq: rs[0].Seq, Hash: rs[0].Hash}
	}
	var rep audit.Report
	var done bool
	if a.auditKeys == nil {
		rep, done, err = audit.VerifyFrom(ctx, a.st, from, a.verifyLimit)
	} else {
		var keys note.Verifiers
		if keys, err = a.auditKeys.Verifiers(ctx); err == nil {
			rep, done, err = audit.VerifyFromWithCheckpoints(ctx, a.st, keys, from, a.verifyLimit)
		}
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	v.Intact, v.From, v.VerifiedTo, v.Records = rep.Intact(), from.Seq, rep.Head.Seq, rep.Records
	v.Checkpoints = rep.Checkpoints
	v.ProblemCount = rep.ProblemCount
	v.Problems = make([]problem, 0, len(rep.Problems))
	for _, p := range rep.Problems {
		v.Problems = append(v.Problems, problem{p.Seq, string(p.Kind)})
	}
	if len(rep.Problems) > 0 {
		first := rep.Problems[0].Seq
		v.FirstBroken = &first
	}
	if !done {
		resume := rep.Head.Seq
		v.Resume = &resume
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

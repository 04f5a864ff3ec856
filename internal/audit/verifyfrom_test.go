package audit_test

import (
	"database/sql"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// VerifyFrom walks the log in steps of a bounded number of records, each
// chained on the last record of the step before, reaches the head, and
// finds an edited record in the step that holds it, at its sequence
// number.
func TestVerifyFromInSteps(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, db *sql.DB) {
		appendAll(t, st) // records 1 to 6
		if _, err := db.ExecContext(t.Context(), `UPDATE audit_log SET principal = 'mallory' WHERE seq = 5`); err != nil {
			t.Fatal(err)
		}
		var from store.AuditHead
		var steps []audit.Report
		for range 10 {
			rep, done, err := audit.VerifyFrom(t.Context(), st, from, 2)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, rep)
			from = rep.Head
			if done {
				break
			}
		}
		// Three steps of two records, and a fourth that finds the head.
		if len(steps) != 4 || steps[2].Head.Seq != 6 || steps[3].Records != 0 || steps[3].Head.Seq != 6 {
			t.Fatalf("steps = %+v", steps)
		}
		for i, rep := range steps {
			wantIntact := i != 2
			if rep.Intact() != wantIntact {
				t.Errorf("step %d: intact %v, want %v: %v", i, rep.Intact(), wantIntact, rep.Problems)
			}
		}
		if p := steps[2].Problems; len(p) != 1 || p[0].Seq != 5 || p[0].Kind != audit.ProblemEdited {
			t.Errorf("step 3 found %v, want record 5 edited", p)
		}
		// A step from a record whose hash is not the one its successor
		// was chained on is a broken link.
		rep, done, err := audit.VerifyFrom(t.Context(), st, store.AuditHead{Seq: 2, Hash: "not-its-hash"}, 0)
		if err != nil || !done || rep.Intact() || rep.Problems[0].Seq != 3 || rep.Problems[0].Kind != audit.ProblemBrokenLink {
			t.Errorf("from a wrong hash: done %v, %v, %v", done, rep.Problems, err)
		}
	})
}

package privacy

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// TestHolds: a hold placed is recorded legal_hold_placed with its reason
// and placer, and refuses the person's erasure, a dry run's too; lifted,
// it is recorded legal_hold_lifted with the hold as it stood, and the
// erasure goes ahead; lifting none is ErrNotFound and records nothing;
// every record is in the chain.
func TestHolds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, log := twoPeople(t, "todo")

	h, err := PlaceHold(ctx, st, log, "alice", "matter 7", "counsel")
	if err != nil || h.Principal != "alice" || h.Reason != "matter 7" || h.PlacedBy != "counsel" {
		t.Fatalf("PlaceHold = %+v, %v", h, err)
	}
	for _, dry := range []bool{true, false} {
		if _, err := Erase(ctx, st, log, "alice", "usher erase", dry); !errors.Is(err, store.ErrLegalHold) {
			t.Errorf("Erase (dry run %v) under a hold = %v, want ErrLegalHold", dry, err)
		}
	}
	if _, err := st.GetNote(ctx, "alice", "todo"); err != nil {
		t.Errorf("alice's note after refused erasures: %v", err)
	}
	if _, err := LiftHold(ctx, st, log, "bob", "counsel"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LiftHold of no hold = %v, want ErrNotFound", err)
	}
	lifted, err := LiftHold(ctx, st, log, "alice", "counsel")
	if err != nil || lifted != h {
		t.Fatalf("LiftHold = %+v, %v; want %+v", lifted, err, h)
	}
	if _, err := Erase(ctx, st, log, "alice", "usher erase", false); err != nil {
		t.Errorf("Erase after the lift = %v", err)
	}

	recs, err := st.AuditRecords(ctx, 0, 100)
	if err != nil || len(recs) != 3 {
		t.Fatalf("audit records = %d, %v; want the placement, the lift and the erasure", len(recs), err)
	}
	var placed, gone map[string]string
	if recs[0].Kind != "legal_hold_placed" || recs[0].Principal != "alice" || json.Unmarshal(recs[0].Details, &placed) != nil ||
		placed["reason"] != "matter 7" || placed["by"] != "counsel" {
		t.Errorf("the placement's record = %+v", recs[0])
	}
	if recs[1].Kind != "legal_hold_lifted" || recs[1].Principal != "alice" || json.Unmarshal(recs[1].Details, &gone) != nil ||
		gone["reason"] != "matter 7" || gone["placedBy"] != "counsel" || gone["placedAt"] == "" || gone["by"] != "counsel" {
		t.Errorf("the lift's record = %+v", recs[1])
	}
	if recs[2].Kind != "principal_erased" {
		t.Errorf("the last record = %s, want principal_erased", recs[2].Kind)
	}
	if rep, err := audit.Verify(ctx, st); err != nil || len(rep.Problems) != 0 || rep.Records != 3 {
		t.Errorf("audit.Verify = %+v, %v; want 3 records, no problem", rep, err)
	}
}

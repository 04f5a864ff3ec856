package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// erasedRecord is the audit record of r's erasure the tests append.
func erasedRecord(r store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
	return chained(store.AuditRecord{At: time.Now().Truncate(time.Microsecond), Kind: "run_erased", RunID: r.ID, Principal: r.Owner}), nil
}

// testPurgeDeletedRuns: the runs deleted before a time are erased with
// what they hold, the oldest deletion first and at most the limit at a
// time, each with its audit record; a live run, a run deleted after the
// time and a run that continues an erased one are kept; the audit log's
// records are kept.
func testPurgeDeletedRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	start := time.Now().Add(-time.Minute)
	f := newApprovalFixture(t, s) // run-1 and run-2
	f.create(f.approval("apr-1", testBinding()))
	if _, started, err := s.BeginExecutionAudited(ctx, testExecution("run-1/call-1", time.Now()), nil); err != nil || !started {
		t.Fatalf("BeginExecutionAudited = %v, %v", started, err)
	}
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("the secret plans")); err != nil {
		t.Fatal(err)
	}
	continueParent(t, s, "run-p", `{}`)
	child, first, note, summary := continueArgs("run-p", "run-c")
	if _, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-p", Child: child, First: first, Note: note, Summary: summary, MaxActive: 5}); err != nil {
		t.Fatal(err)
	}
	mustOpenRun(t, s, "run-live", nil)
	if _, err := s.AppendAudit(ctx, chained(store.AuditRecord{At: time.Now().Truncate(time.Microsecond), Kind: "executed", RunID: "run-1", Principal: "issuer|tenant|alice"})); err != nil {
		t.Fatal(err)
	}
	before, err := s.AuditRecords(ctx, 0, 100)
	if err != nil || len(before) != 1 {
		t.Fatalf("audit records before = %d, %v", len(before), err)
	}
	for _, id := range []string{"run-1", "run-p", "run-2"} {
		if err := s.DeleteRun(ctx, id, nil, store.Withdrawal{}); err != nil {
			t.Fatalf("DeleteRun(%s) = %v", id, err)
		}
	}

	if runs, err := s.PurgeDeletedRuns(ctx, start, 10, erasedRecord); err != nil || len(runs) != 0 {
		t.Fatalf("PurgeDeletedRuns before the deletions = %v, %v; want none", runIDs(runs), err)
	}
	runs, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 2, erasedRecord)
	if ids := runIDs(runs); err != nil || len(ids) != 2 || ids[0] != "run-1" || ids[1] != "run-p" || runs[0].DeletedAt.IsZero() || runs[0].Owner != "alice" {
		t.Fatalf("PurgeDeletedRuns(limit 2) = %v, %v; want run-1 and run-p, the oldest deletions, as they were", ids, err)
	}
	for _, id := range []string{"run-1", "run-p"} {
		if _, err := s.GetRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetRun(%s) after the purge = %v, want ErrNotFound", id, err)
		}
		if msgs, err := s.ListMessages(ctx, id, store.MessageQuery{Limit: 10}); len(msgs) != 0 {
			t.Errorf("ListMessages(%s) after the purge = %d messages, %v; want none", id, len(msgs), err)
		}
	}
	if _, err := s.GetApproval(ctx, "apr-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetApproval of the erased run's approval = %v, want ErrNotFound", err)
	}
	if _, err := s.GetExecution(ctx, "run-1/call-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetExecution of the erased run's call = %v, want ErrNotFound", err)
	}
	// The child keeps its history, and names no parent.
	c, err := s.GetRun(ctx, "run-c")
	if err != nil || c.ParentRunID != "" {
		t.Errorf("the continuing run after its parent's purge = %+v, %v; want it, with no parent", c, err)
	}
	if msgs, err := s.ListMessages(ctx, "run-c", store.MessageQuery{Limit: 10}); err != nil || len(msgs) == 0 {
		t.Errorf("the continuing run's messages after its parent's purge = %d, %v", len(msgs), err)
	}
	if r, err := s.GetRun(ctx, "run-2"); err != nil || r.DeletedAt.IsZero() {
		t.Errorf("run-2, deleted and past the limit = %+v, %v; want it kept, deleted", r, err)
	}
	after, err := s.AuditRecords(ctx, 0, 100)
	if err != nil || len(after) != 3 || !reflect.DeepEqual(after[0], before[0]) ||
		after[1].Kind != "run_erased" || after[1].RunID != "run-1" || after[1].Principal != "alice" || after[2].RunID != "run-p" {
		t.Errorf("audit records after the purge = %+v, %v; want the one before, then an erasure of each", after, err)
	}

	// Without an audit builder: erased, nothing recorded.
	if runs, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, nil); err != nil || len(runs) != 1 || runs[0].ID != "run-2" {
		t.Fatalf("PurgeDeletedRuns again = %v, %v; want run-2", runIDs(runs), err)
	}
	if runs, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, erasedRecord); err != nil || len(runs) != 0 {
		t.Fatalf("PurgeDeletedRuns once all are erased = %v, %v", runIDs(runs), err)
	}
	if recs, _ := s.AuditRecords(ctx, 0, 100); len(recs) != 3 {
		t.Errorf("%d audit records after the purges, want 3", len(recs))
	}
	// A failing audit builder erases nothing.
	mustOpenRun(t, s, "run-3", nil)
	if err := s.DeleteRun(ctx, "run-3", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	errAudit := errors.New("no record")
	if _, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, func(store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return nil, errAudit
	}); !errors.Is(err, errAudit) {
		t.Errorf("PurgeDeletedRuns with a failing audit builder = %v, want its error", err)
	}
	if r, err := s.GetRun(ctx, "run-3"); err != nil || r.DeletedAt.IsZero() {
		t.Errorf("run-3 after a purge whose record failed = %+v, %v; want it kept", r, err)
	}
	for _, id := range []string{"run-live", "run-c"} {
		if _, err := s.GetRun(ctx, id); err != nil {
			t.Errorf("GetRun(%s), never deleted = %v", id, err)
		}
	}
	for _, limit := range []int{0, -1, store.MaxPurgeBatch + 1} {
		if _, err := s.PurgeDeletedRuns(ctx, time.Now(), limit, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PurgeDeletedRuns(limit %d) = %v, want ErrInvalid", limit, err)
		}
	}
}

// testDeleteInactiveRuns: the runs with no activity since a time, Idle or
// closed, are found oldest first and deleted one by one, with their open
// approvals withdrawn and an audit record each; a run with a turn under
// way, one with activity since, and one deleted already are not.
func testDeleteInactiveRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	start := time.Now().Add(-time.Minute)
	f := newApprovalFixture(t, s) // run-1 and run-2, InProgress
	mustCreateRun(t, s, store.Run{ID: "run-done", Owner: "alice", Status: store.RunCompleted})
	b := testBinding()
	b.RunID = "run-done"
	f.create(f.approval("apr-d", b))
	mustOpenRun(t, s, "run-idle", nil)
	if _, err := s.ParkRun(ctx, "run-idle"); err != nil {
		t.Fatal(err)
	}
	mustOpenRun(t, s, "run-gone", nil)
	if err := s.DeleteRun(ctx, "run-gone", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)

	if ids, err := s.InactiveRuns(ctx, start, 10); err != nil || len(ids) != 0 {
		t.Errorf("InactiveRuns before any activity = %v, %v; want none", ids, err)
	}
	ids, err := s.InactiveRuns(ctx, later, 10)
	if err != nil || len(ids) != 2 || ids[0] != "run-done" || ids[1] != "run-idle" {
		t.Fatalf("InactiveRuns = %v, %v; want run-done and run-idle, the oldest activity first", ids, err)
	}
	if ids, err := s.InactiveRuns(ctx, later, 1); err != nil || len(ids) != 1 || ids[0] != "run-done" {
		t.Errorf("InactiveRuns(limit 1) = %v, %v", ids, err)
	}

	w := store.Withdrawal{Reason: "This session was deleted after a year without activity."}
	for _, id := range []string{"run-1", "run-gone", "missing"} {
		if _, deleted, err := s.DeleteInactiveRun(ctx, id, later, w, erasedRecord); err != nil || deleted {
			t.Errorf("DeleteInactiveRun(%s) = %v, %v; want nothing deleted", id, deleted, err)
		}
	}
	if _, deleted, err := s.DeleteInactiveRun(ctx, "run-idle", start, w, erasedRecord); err != nil || deleted {
		t.Errorf("DeleteInactiveRun of a run active since = %v, %v; want nothing deleted", deleted, err)
	}
	records := func() []store.AuditRecord {
		recs, err := s.AuditRecords(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	before := len(records())
	for _, id := range []string{"run-done", "run-idle"} {
		r, deleted, err := s.DeleteInactiveRun(ctx, id, later, w, erasedRecord)
		if err != nil || !deleted || r.ID != id {
			t.Fatalf("DeleteInactiveRun(%s) = %+v, %v, %v; want it deleted", id, r, deleted, err)
		}
		if got, err := s.GetRun(ctx, id); err != nil || got.DeletedAt.IsZero() {
			t.Errorf("GetRun(%s) after = %+v, %v; want it deleted", id, got, err)
		}
	}
	if st := f.status("apr-d"); st != store.ApprovalWithdrawn {
		t.Errorf("the deleted run's open approval is %s, want withdrawn", st)
	}
	if recs := records(); len(recs) != before+2 || recs[len(recs)-1].RunID != "run-idle" || recs[len(recs)-2].RunID != "run-done" {
		t.Errorf("audit records after the deletions: %d (was %d); want one for each", len(recs), before)
	}
	if ids, err := s.InactiveRuns(ctx, later, 10); err != nil || len(ids) != 0 {
		t.Errorf("InactiveRuns after = %v, %v; want none", ids, err)
	}
	// A failing audit builder deletes nothing.
	mustCreateRun(t, s, store.Run{ID: "run-old", Owner: "alice", Status: store.RunCompleted})
	errAudit := errors.New("no record")
	if _, _, err := s.DeleteInactiveRun(ctx, "run-old", later, w, func(store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return nil, errAudit
	}); !errors.Is(err, errAudit) {
		t.Errorf("DeleteInactiveRun with a failing audit builder = %v, want its error", err)
	}
	if r, err := s.GetRun(ctx, "run-old"); err != nil || !r.DeletedAt.IsZero() {
		t.Errorf("run-old after a deletion whose record failed = %+v, %v; want it kept", r, err)
	}
	for _, limit := range []int{0, store.MaxPurgeBatch + 1} {
		if _, err := s.InactiveRuns(ctx, later, limit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("InactiveRuns(limit %d) = %v, want ErrInvalid", limit, err)
		}
	}
}

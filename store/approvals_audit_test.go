package store_test

import (
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestPostgresApprovalRecordsInTheChain checks that approval records,
// which PostgreSQL appends in the approval's own transaction rather than
// through the process's queue of appends, and queued appends interleave
// into one gapless chain: the queue finds the head moved and chains after
// it.
func TestPostgresApprovalRecordsInTheChain(t *testing.T) {
	s := storetest.NewPostgres(t)
	ctx := t.Context()
	now := time.Now()
	b := store.ApprovalBinding{Principal: "issuer|tenant|alice", Tool: "notes_write", DefinitionHash: "d", ArgumentsHash: "a", PolicyHash: "p"}
	want := []string{"decision", "approval_requested", "decision", "approval_decided", "decision", "approval_consumed", "executed"}
	if _, err := s.AppendAudit(ctx, link("decision")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateApprovalAudited(ctx, store.Approval{ID: "apr-1", Binding: b, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, link("approval_requested")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(ctx, link("decision")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-1", To: store.ApprovalApproved, DecidedBy: "bob", Now: now}, link("approval_decided")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(ctx, link("decision")); err != nil {
		t.Fatal(err)
	}
	e := store.Execution{IdempotencyKey: "k", Principal: b.Principal, Tool: b.Tool, ArgumentsHash: b.ArgumentsHash, ApprovalID: "apr-1"}
	if _, _, started, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: "apr-1", Binding: b, Now: now, Execution: &e}, link("approval_consumed")); err != nil || !started {
		t.Fatalf("ConsumeApprovalAudited = started %v, %v", started, err)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "k", Status: store.ExecutionSucceeded, Now: now}, link("executed")); err != nil {
		t.Fatal(err)
	}
	records := auditLog(t, s)
	if len(records) != len(want) {
		t.Fatalf("the log has %d records, want %d", len(records), len(want))
	}
	prev := ""
	for i, r := range records {
		if r.Seq != int64(i+1) || r.PrevHash != prev || r.Kind != want[i] {
			t.Errorf("record %d = seq %d, kind %s, prev %q; want seq %d, kind %s, prev %q", i, r.Seq, r.Kind, r.PrevHash, i+1, want[i], prev)
		}
		prev = r.Hash
	}
}

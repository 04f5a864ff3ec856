package storetest

import (
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testBacklog checks the counts of waiting work: runs queued and not
// leased (with the oldest's queue time), runs leased, and approvals
// pending and not expired (with the oldest's request time).
func testBacklog(t *testing.T, s store.Store) {
	ctx := t.Context()
	backlog := func() store.Backlog {
		t.Helper()
		b, err := s.Backlog(ctx)
		if err != nil {
			t.Fatalf("Backlog: %v", err)
		}
		return b
	}
	if b := backlog(); b != (store.Backlog{}) {
		t.Fatalf("Backlog of an empty store = %+v, want zero", b)
	}

	mustOpenRun(t, s, "quiet", nil)
	var queued []store.Run
	for _, id := range []string{"q-1", "q-2", "q-3"} {
		m := userMessage("hi")
		queued = append(queued, mustOpenRun(t, s, id, &m))
	}
	if b := backlog(); b.Queued != 3 || !b.OldestQueued.Equal(queued[0].QueuedAt) || b.Running != 0 {
		t.Fatalf("Backlog with three queued runs = %+v, want 3 queued since %v", b, queued[0].QueuedAt)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Hour)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "q-1" {
		t.Fatalf("ClaimRuns = %+v, %v; want q-1", claimed, err)
	}
	if b := backlog(); b.Queued != 2 || !b.OldestQueued.Equal(queued[1].QueuedAt) || b.Running != 1 {
		t.Fatalf("Backlog after a claim = %+v, want 2 queued since %v and 1 running", b, queued[1].QueuedAt)
	}
	// A message during the turn queues the run without freeing it: it
	// is running, not waiting for a replica.
	m := userMessage("and another thing")
	if _, _, err := s.PostMessage(ctx, "q-1", m); err != nil {
		t.Fatal(err)
	}
	if b := backlog(); b.Queued != 2 || b.Running != 1 {
		t.Fatalf("Backlog after a message to a running run = %+v, want 2 queued and 1 running", b)
	}
	if _, err := s.CloseRun(ctx, "q-2", store.RunCancelled, nil); err != nil {
		t.Fatal(err)
	}
	if b := backlog(); b.Queued != 1 || !b.OldestQueued.Equal(queued[2].QueuedAt) {
		t.Fatalf("Backlog after a queued run is closed = %+v, want 1 queued since %v", b, queued[2].QueuedAt)
	}

	f := newApprovalFixture(t, s)
	call := func(args string) store.ApprovalBinding {
		b := testBinding()
		b.ArgumentsHash = args
		return b
	}
	first := f.create(f.approval("a-1", call("args-1")))
	later := f.approval("a-2", call("args-2"))
	later.CreatedAt = f.now.Add(time.Minute)
	f.create(later)
	f.approved("a-3", call("args-3"))
	expired := f.approval("a-4", call("args-4"))
	expired.CreatedAt, expired.ExpiresAt = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	f.create(expired)
	if b := backlog(); b.PendingApprovals != 2 || !b.OldestPendingApproval.Equal(first.CreatedAt) {
		t.Fatalf("Backlog with approvals = %+v, want 2 pending since %v", b, first.CreatedAt)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testRequeueLeases: the lease owners are listed once each; requeueing an
// owner's leases ends them before they expire, queues their runs for a
// claim now, fences off the old lease's writes, and leaves other owners'
// leases alone.
func testRequeueLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 3 {
		first := userMessage("hi")
		mustOpenRun(t, s, fmt.Sprintf("run-%d", i), &first)
	}
	old, err := s.ClaimRuns(ctx, "host-aaaa", 2, time.Hour)
	if err != nil || len(old) != 2 {
		t.Fatalf("ClaimRuns = %v, %v", old, err)
	}
	other, err := s.ClaimRuns(ctx, "host-bbbb", 1, time.Hour)
	if err != nil || len(other) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", other, err)
	}
	owners, err := s.LeaseOwners(ctx)
	if err != nil || !slices.Equal(owners, []string{"host-aaaa", "host-bbbb"}) {
		t.Fatalf("LeaseOwners = %v, %v; want each owner once, in order", owners, err)
	}
	runs, err := s.RequeueLeases(ctx, "host-aaaa")
	if err != nil || len(runs) != 2 {
		t.Fatalf("RequeueLeases = %v, %v; want the two runs", runs, err)
	}
	for _, r := range runs {
		if r.LeaseOwner != "" || r.QueuedAt.IsZero() {
			t.Errorf("a requeued run = %+v, want no lease and queued", r)
		}
	}
	if _, err := s.AppendLeased(ctx, old[0].Lease(), store.NewEvent{Type: "message.assistant"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendLeased under a requeued lease = %v, want ErrConflict", err)
	}
	// Claimable now, though the old leases had an hour to go.
	taken, err := s.ClaimRuns(ctx, "host-cccc", 10, time.Hour)
	if err != nil || len(taken) != 2 {
		t.Errorf("ClaimRuns after the requeue = %v, %v; want the two runs", taken, err)
	}
	if r, err := s.GetRun(ctx, other[0].ID); err != nil || r.LeaseOwner != "host-bbbb" {
		t.Errorf("another owner's run = %+v, %v; want its lease kept", r, err)
	}
	if runs, err := s.RequeueLeases(ctx, "host-aaaa"); err != nil || len(runs) != 0 {
		t.Errorf("RequeueLeases again = %v, %v; want none", runs, err)
	}
	if _, err := s.RequeueLeases(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RequeueLeases of no owner = %v, want ErrInvalid", err)
	}
}

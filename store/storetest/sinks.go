package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// appendRecords appends n records of the kind "test" to the audit log.
func appendRecords(t *testing.T, s store.Store, n int) {
	t.Helper()
	for range n {
		r := store.AuditRecord{At: time.Now().UTC().Truncate(time.Microsecond), Kind: "test"}
		if _, err := s.AppendAudit(t.Context(), chained(r)); err != nil {
			t.Fatal(err)
		}
	}
}

func testAuditSinkCursor(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.AuditSink(ctx, "siem")
	if err != nil || got.Name != "siem" || got.DeliveredSeq != 0 || got.HeadSeq != 0 || !got.PendingAt.IsZero() || got.LeaseOwner != "" {
		t.Fatalf("AuditSink of a sink never claimed, on an empty log = %+v, %v", got, err)
	}
	appendRecords(t, s, 3)
	first, err := s.AuditRecords(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.ClaimAuditSink(ctx, "siem", "replica-a", time.Minute)
	if err != nil || l.Token != 1 || l.DeliveredSeq != 0 || l.Owner != "replica-a" || l.ExpiresAt.IsZero() {
		t.Fatalf("ClaimAuditSink = %+v, %v", l, err)
	}
	got, err = s.AuditSink(ctx, "siem")
	if err != nil || got.HeadSeq != 3 || !got.PendingAt.Equal(first[0].At) || got.LeaseOwner != "replica-a" || got.FencingToken != 1 {
		t.Fatalf("AuditSink with 3 records pending = %+v, %v (first record at %v)", got, err, first[0].At)
	}
	if l, err = s.AdvanceAuditSink(ctx, l, 2, time.Minute); err != nil || l.DeliveredSeq != 2 {
		t.Fatalf("AdvanceAuditSink to 2 = %+v, %v", l, err)
	}
	third, err := s.AuditRecords(ctx, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.AuditSink(ctx, "siem")
	if err != nil || got.DeliveredSeq != 2 || got.DeliveredAt.IsZero() || !got.PendingAt.Equal(third[0].At) {
		t.Fatalf("AuditSink after delivering 2 = %+v, %v", got, err)
	}
	// The cursor never moves back.
	if _, err := s.AdvanceAuditSink(ctx, store.AuditSinkLease{Sink: "siem", Owner: "replica-a", Token: 1}, 1, time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceAuditSink backwards = %v, want ErrConflict", err)
	}
	if _, err := s.AdvanceAuditSink(ctx, l, 1, time.Minute); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AdvanceAuditSink before the lease's cursor = %v, want ErrInvalid", err)
	}
	// Renewing keeps the cursor and when it moved.
	if l, err = s.AdvanceAuditSink(ctx, l, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if again, err := s.AuditSink(ctx, "siem"); err != nil || !again.DeliveredAt.Equal(got.DeliveredAt) || again.DeliveredSeq != 2 {
		t.Fatalf("AuditSink after a renewal = %+v, %v; want it delivered at %v", again, err, got.DeliveredAt)
	}
	if l, err = s.AdvanceAuditSink(ctx, l, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err = s.AuditSink(ctx, "siem"); err != nil || got.DeliveredSeq != 3 || !got.PendingAt.IsZero() {
		t.Fatalf("AuditSink with every record delivered = %+v, %v", got, err)
	}
	// Sinks are independent.
	if other, err := s.AuditSink(ctx, "local"); err != nil || other.DeliveredSeq != 0 || other.HeadSeq != 3 {
		t.Fatalf("AuditSink of another sink = %+v, %v", other, err)
	}
	for _, bad := range []struct {
		name, owner string
		leaseFor    time.Duration
	}{{"", "replica-a", time.Minute}, {"siem", "", time.Minute}, {"siem", "replica-a", 0}, {"si\x00em", "replica-a", time.Minute}} {
		if _, err := s.ClaimAuditSink(ctx, bad.name, bad.owner, bad.leaseFor); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ClaimAuditSink(%q, %q, %v) = %v, want ErrInvalid", bad.name, bad.owner, bad.leaseFor, err)
		}
	}
}

func testAuditSinkLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, err := s.ClaimAuditSink(ctx, "siem", "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimAuditSink(ctx, "siem", "replica-b", time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ClaimAuditSink of a leased sink = %v, want ErrConflict", err)
	}
	if err := s.ReleaseAuditSink(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := s.ClaimAuditSink(ctx, "siem", "replica-b", time.Second)
	if err != nil || b.Token != a.Token+1 {
		t.Fatalf("ClaimAuditSink after a release = %+v, %v", b, err)
	}
	// The lease released, its holder writes nothing.
	if _, err := s.AdvanceAuditSink(ctx, a, 1, time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceAuditSink by a released lease = %v, want ErrConflict", err)
	}
	if err := s.ReleaseAuditSink(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ReleaseAuditSink twice = %v, want ErrConflict", err)
	}
	// An expired lease is taken over, and its holder's writes refused.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	var c store.AuditSinkLease
	for {
		c, err = s.ClaimAuditSink(ctx, "siem", "replica-c", time.Minute)
		if !errors.Is(err, store.ErrConflict) || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	if err != nil || c.Token != b.Token+1 {
		t.Fatalf("ClaimAuditSink of an expired lease = %+v, %v", c, err)
	}
	if _, err := s.AdvanceAuditSink(ctx, b, 1, time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceAuditSink by a lease taken over = %v, want ErrConflict", err)
	}
}

func testAuditSinkClaimRace(t *testing.T, s store.Store) {
	const claimers = 8
	var mu sync.Mutex
	var won []string
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			owner := fmt.Sprintf("replica-%d", i)
			_, err := s.ClaimAuditSink(t.Context(), "siem", owner, time.Minute)
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, owner)
				mu.Unlock()
			case !errors.Is(err, store.ErrConflict):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d concurrent claims of one sink won: %v, want exactly one", len(won), won)
	}
}

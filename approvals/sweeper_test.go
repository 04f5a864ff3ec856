package approvals_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestSweeperRevokesAndExpires checks one sweep's work: the open approvals
// of a tool whose definition changed are revoked (once: a tool is checked
// again only when its hash changes), and requests past their expiry, by
// the service's clock, are expired.
func TestSweeperRevokesAndExpires(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		changed := e.request(t, binding())
		other := binding()
		other.Tool = "notes_read"
		kept := e.request(t, other)

		hashes := map[string]string{"notes_write": "def-2", "notes_read": "def-1"}
		sw, err := approvals.NewSweeper(e.svc, &approvals.SweeperOptions{
			Tools: func(context.Context) (map[string]string, error) { return hashes, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		if revoked, expired, err := sw.Sweep(ctx); err != nil || revoked != 1 || expired != 0 {
			t.Fatalf("Sweep = %d revoked, %d expired, %v; want 1, 0", revoked, expired, err)
		}
		if a, err := e.st.GetApproval(ctx, changed.ID); err != nil || a.Status != store.ApprovalRevoked {
			t.Errorf("the changed tool's approval = %s, %v; want revoked", a.Status, err)
		}
		if a, err := e.st.GetApproval(ctx, kept.ID); err != nil || a.Status != store.ApprovalPending {
			t.Errorf("the unchanged tool's approval = %s, %v; want pending", a.Status, err)
		}

		e.clock.Advance(approvals.DefaultTTL + time.Second)
		if revoked, expired, err := sw.Sweep(ctx); err != nil || revoked != 0 || expired != 1 {
			t.Errorf("Sweep after the TTL = %d revoked, %d expired, %v; want 0, 1", revoked, expired, err)
		}
		if a, err := e.st.GetApproval(ctx, kept.ID); err != nil || a.Status != store.ApprovalExpired {
			t.Errorf("the overdue approval = %s, %v; want expired", a.Status, err)
		}
	})
}

// TestSweeperListingFails checks that a failed listing of the tools is
// reported, that the tools it did list are still checked, and that expiry
// runs all the same.
func TestSweeperListingFails(t *testing.T) {
	e := newEnv(t, storetest.NewSQLite(t))
	e.request(t, binding())
	errListing := errors.New("an upstream is down")
	sw, err := approvals.NewSweeper(e.svc, &approvals.SweeperOptions{
		Tools: func(context.Context) (map[string]string, error) {
			return map[string]string{"notes_write": "def-2"}, errListing
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(approvals.DefaultTTL + time.Second)
	revoked, expired, err := sw.Sweep(t.Context())
	if !errors.Is(err, errListing) || revoked != 1 || expired != 0 {
		t.Errorf("Sweep = %d revoked, %d expired, %v; want 1 revoked (before expiry) and the listing's error", revoked, expired, err)
	}
}

// TestSweeperLifecycle checks that a Sweeper starts once, sweeps at once,
// and that Stop, idempotent, joins its goroutine (TestMain finds any left).
func TestSweeperLifecycle(t *testing.T) {
	e := newEnv(t, storetest.NewSQLite(t))
	listed := make(chan struct{}, 1)
	sw, err := approvals.NewSweeper(e.svc, &approvals.SweeperOptions{
		Interval: time.Hour,
		Tools: func(context.Context) (map[string]string, error) {
			select {
			case listed <- struct{}{}:
			default:
			}
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sw.Stop() // before Start
	if err := sw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-listed // the first sweep runs at once
	if err := sw.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	sw.Stop()
	sw.Stop()
	if _, err := approvals.NewSweeper(nil, &approvals.SweeperOptions{Interval: -time.Second}); err == nil {
		t.Error("NewSweeper without a service and with a negative interval succeeded")
	}
}

package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testHolds: a hold is recorded per run; another hold of the run takes it
// over, releasing the one before; a release is a compare-and-swap that
// succeeds once, whoever races; closing, deleting or parking a run
// releases its hold with it; the holds of replicas without a live
// heartbeat are released, those of live ones and the caller's are not.
func testHolds(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"run-a", "run-b", "run-c", "run-d"} {
		first := userMessage("hi")
		mustOpenRun(t, s, id, &first)
	}
	hold := func(run, replica, id string) store.HeldSession {
		t.Helper()
		h, err := s.HoldSession(ctx, store.HeldSession{RunID: run, Replica: replica, HoldID: id})
		if err != nil {
			t.Fatalf("HoldSession(%s, %s): %v", run, replica, err)
		}
		return h
	}
	get := func(run string) store.HeldSession {
		t.Helper()
		h, err := s.GetHold(ctx, run)
		if err != nil {
			t.Fatalf("GetHold(%s): %v", run, err)
		}
		return h
	}
	if _, err := s.GetHold(ctx, "run-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetHold of a run never held = %v, want ErrNotFound", err)
	}
	if _, err := s.HoldSession(ctx, store.HeldSession{RunID: "run-a"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("HoldSession without replica and hold id = %v, want ErrInvalid", err)
	}
	if _, err := s.HoldSession(ctx, store.HeldSession{RunID: "run-x", Replica: "r", HoldID: "h"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("HoldSession of a missing run = %v, want ErrNotFound", err)
	}

	a := hold("run-a", "replica-1", "h1")
	checkStoreTime(t, "HeldAt", a.HeldAt)
	if a.Replica != "replica-1" || a.HoldID != "h1" || !a.ReleasedAt.IsZero() || a.Reason != "" {
		t.Errorf("HoldSession = %+v", a)
	}
	// Another replica takes the run's hold over: one holder per run; the
	// first replica's release then finds nothing to release.
	hold("run-a", "replica-2", "h2")
	if h := get("run-a"); h.Replica != "replica-2" || h.HoldID != "h2" || !h.ReleasedAt.IsZero() {
		t.Errorf("after the takeover = %+v, want replica-2's hold", h)
	}
	if ok, err := s.ReleaseHold(ctx, "run-a", "h1", store.ReleaseHoldIdle); err != nil || ok {
		t.Errorf("ReleaseHold of the hold taken over = %t, %v; want false", ok, err)
	}
	if holds, err := s.HoldsOf(ctx, "replica-1"); err != nil || len(holds) != 0 {
		t.Errorf("HoldsOf(replica-1) = %v, %v; want none", holds, err)
	}
	if holds, err := s.HoldsOf(ctx, "replica-2"); err != nil || len(holds) != 1 || holds[0].RunID != "run-a" {
		t.Errorf("HoldsOf(replica-2) = %v, %v; want run-a", holds, err)
	}

	// Racing releases: exactly one succeeds, and its reason stays.
	var won atomic.Int32
	var wg sync.WaitGroup
	for _, reason := range []string{store.ReleaseHoldIdle, store.ReleaseLost, store.ReleaseTurnFailed, store.ReleaseStopped} {
		wg.Go(func() {
			ok, err := s.ReleaseHold(ctx, "run-a", "h2", reason)
			if err != nil {
				t.Errorf("ReleaseHold: %v", err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if n := won.Load(); n != 1 {
		t.Errorf("%d racing releases succeeded, want 1", n)
	}
	if h := get("run-a"); h.ReleasedAt.IsZero() || h.Reason == "" {
		t.Errorf("after the release = %+v, want released with its reason", h)
	}

	// Closing, deleting and parking release the run's hold in their
	// transaction.
	hold("run-b", "replica-1", "hb")
	hold("run-c", "replica-1", "hc")
	hold("run-d", "replica-1", "hd")
	if _, err := s.CloseRun(ctx, "run-b", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRun(ctx, "run-c", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if h := get("run-b"); h.Reason != store.ReleaseCompleted || h.ReleasedAt.IsZero() {
		t.Errorf("a completed run's hold = %+v, want released, completed", h)
	}
	if h := get("run-c"); h.Reason != store.ReleaseDeleted || h.ReleasedAt.IsZero() {
		t.Errorf("a deleted run's hold = %+v, want released, deleted", h)
	}
	// run-d: handled and quiet, then parked.
	claimed, err := s.ClaimRuns(ctx, "replica-1", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range claimed {
		if r.ID != "run-d" {
			continue
		}
		if _, _, err := s.EndLease(ctx, r.Lease(), store.Release{},
			store.NewEvent{Type: "agent.turn.start", Payload: []byte(`{}`), StartsTurn: 1},
			store.NewEvent{Type: store.EventTurnEnd, Payload: []byte(`{}`), EndsTurn: true}); err != nil {
			t.Fatal(err)
		}
	}
	if parked, err := s.ParkIdleRuns(ctx, time.Now().Add(time.Hour)); err != nil || len(parked) == 0 {
		t.Fatalf("ParkIdleRuns = %v, %v", parked, err)
	}
	if h := get("run-d"); h.Reason != store.ReleaseParked || h.ReleasedAt.IsZero() {
		t.Errorf("a parked run's hold = %+v, want released, parked", h)
	}

	// Holds of replicas whose heartbeat is gone are released; a live
	// replica's and the caller's are not.
	for _, id := range []string{"run-a", "run-b"} {
		if _, err := s.ReleaseHold(ctx, id, get(id).HoldID, store.ReleaseStopped); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.BeatReplica(ctx, store.Replica{ID: "alive", Version: "v1", StartedAt: time.Now()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	hold("run-a", "alive", "live")
	hold("run-b", "dead", "dead")
	hold("run-d", "me", "mine")
	gone, err := s.ReleaseGoneHolds(ctx, "me")
	if err != nil || len(gone) != 1 || gone[0].RunID != "run-b" || gone[0].Reason != store.ReleaseGone {
		t.Errorf("ReleaseGoneHolds = %+v, %v; want run-b's, replica_gone", gone, err)
	}
	if h := get("run-a"); !h.ReleasedAt.IsZero() {
		t.Errorf("a live replica's hold = %+v, want held", h)
	}
	if h := get("run-d"); !h.ReleasedAt.IsZero() {
		t.Errorf("the caller's own hold = %+v, want held", h)
	}
}

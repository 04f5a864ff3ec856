package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testReplicas: a heartbeat creates, then replaces, a replica's row; a
// replica is listed while its heartbeat is alive, and not after; one that
// leaves is gone at once, and expired rows are deleted.
func testReplicas(t *testing.T, s store.Store) {
	ctx := t.Context()
	started := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	a := store.Replica{ID: "host-a-1", Version: "v1.0.0", Addr: "10.0.0.1:8080", StartedAt: started,
		Upstreams: json.RawMessage(`[{"name":"github","state":"up"}]`)}
	first, err := s.BeatReplica(ctx, a, time.Minute)
	if err != nil {
		t.Fatalf("BeatReplica: %v", err)
	}
	checkStoreTime(t, "SeenAt", first.SeenAt)
	if first.ID != a.ID || first.Version != a.Version || first.Addr != a.Addr || !first.StartedAt.Equal(started.Truncate(time.Microsecond)) ||
		!first.ExpiresAt.Equal(first.SeenAt.Add(time.Minute)) || string(first.Upstreams) != string(a.Upstreams) {
		t.Errorf("BeatReplica = %+v, want %+v seen now, alive a minute", first, a)
	}
	b, err := s.BeatReplica(ctx, store.Replica{ID: "host-b-2", Version: "v1.0.1", StartedAt: started}, 2*time.Minute)
	if err != nil {
		t.Fatalf("BeatReplica(b): %v", err)
	}
	if string(b.Upstreams) != "[]" {
		t.Errorf("a heartbeat without upstreams stores %s, want []", b.Upstreams)
	}

	// The next heartbeat replaces the row.
	a.Version, a.Upstreams = "v1.1.0", json.RawMessage(`[]`)
	again, err := s.BeatReplica(ctx, a, time.Minute)
	if err != nil {
		t.Fatalf("BeatReplica again: %v", err)
	}
	if again.Version != "v1.1.0" || string(again.Upstreams) != "[]" || again.SeenAt.Before(first.SeenAt) {
		t.Errorf("the second heartbeat = %+v, want the new version and upstreams, seen no earlier than %v", again, first.SeenAt)
	}

	list := func(at time.Time) []string {
		t.Helper()
		rs, err := s.ListReplicas(ctx, at)
		if err != nil {
			t.Fatalf("ListReplicas: %v", err)
		}
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if got := list(again.SeenAt); len(got) != 2 || got[0] != "host-a-1" || got[1] != "host-b-2" {
		t.Errorf("ListReplicas now = %v, want both, by id", got)
	}
	// a's heartbeat lasts a minute, b's two: at a's expiry only b is alive.
	if got := list(again.ExpiresAt); len(got) != 1 || got[0] != "host-b-2" {
		t.Errorf("ListReplicas at a's expiry = %v, want b only", got)
	}
	if got := list(b.ExpiresAt.Add(time.Hour)); len(got) != 0 {
		t.Errorf("ListReplicas after both expired = %v, want none", got)
	}

	// Rows that expired before a time are deleted; the others stay.
	if n, err := s.DeleteExpiredReplicas(ctx, again.ExpiresAt.Add(time.Microsecond)); err != nil || n != 1 {
		t.Errorf("DeleteExpiredReplicas = %d, %v; want a's row deleted", n, err)
	}
	if got := list(again.SeenAt); len(got) != 1 || got[0] != "host-b-2" {
		t.Errorf("after deleting the expired: %v, want b", got)
	}
	// A replica that stops leaves; leaving twice is not an error.
	for range 2 {
		if err := s.DeleteReplica(ctx, "host-b-2"); err != nil {
			t.Errorf("DeleteReplica: %v", err)
		}
	}
	if got := list(again.SeenAt); len(got) != 0 {
		t.Errorf("after b left: %v, want none", got)
	}

	for name, bad := range map[string]struct {
		r        store.Replica
		aliveFor time.Duration
	}{
		"no id":             {store.Replica{Version: "v", StartedAt: started}, time.Minute},
		"no version":        {store.Replica{ID: "x", StartedAt: started}, time.Minute},
		"no start":          {store.Replica{ID: "x", Version: "v"}, time.Minute},
		"not alive":         {store.Replica{ID: "x", Version: "v", StartedAt: started}, 0},
		"upstreams object":  {store.Replica{ID: "x", Version: "v", StartedAt: started, Upstreams: json.RawMessage(`{}`)}, time.Minute},
		"upstreams invalid": {store.Replica{ID: "x", Version: "v", StartedAt: started, Upstreams: json.RawMessage(`[`)}, time.Minute},
	} {
		if _, err := s.BeatReplica(ctx, bad.r, bad.aliveFor); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: BeatReplica = %v, want ErrInvalid", name, err)
		}
	}
}

// testRunQueue: a run queued for a turn waits; claimed, it runs; its lease
// expired, it waits again, from its lease's expiry.
func testRunQueue(t *testing.T, s store.Store) {
	ctx := t.Context()
	q, err := s.RunQueue(ctx, time.Now())
	if err != nil || q != (store.RunQueue{}) {
		t.Fatalf("RunQueue of an empty store = %+v, %v; want zero", q, err)
	}
	mustOpenRun(t, s, "quiet", nil)
	first := userMessage("hi")
	older := mustOpenRun(t, s, "run-1", &first)
	mustOpenRun(t, s, "run-2", &first)
	q, err = s.RunQueue(ctx, older.QueuedAt)
	if err != nil || q.Queued != 2 || q.Running != 0 || !q.OldestQueuedAt.Equal(older.QueuedAt) {
		t.Fatalf("RunQueue with two queued = %+v, %v; want 2 queued since %v", q, err, older.QueuedAt)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Hour)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "run-1" {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	now := claimed[0].LeaseExpiresAt.Add(-time.Hour)
	q, err = s.RunQueue(ctx, now)
	if err != nil || q.Queued != 1 || q.Running != 1 || q.OldestQueuedAt.IsZero() || q.OldestQueuedAt.Before(older.QueuedAt) {
		t.Errorf("RunQueue with one claimed = %+v, %v; want 1 running, 1 queued", q, err)
	}
	// Past its lease, the claimed run waits for another replica.
	later := claimed[0].LeaseExpiresAt
	if q, err = s.RunQueue(ctx, later); err != nil || q.Queued != 2 || q.Running != 0 || !q.OldestQueuedAt.Before(later) {
		t.Errorf("RunQueue past the lease = %+v, %v; want 2 queued, none running", q, err)
	}
}

// testApprovalBacklog: the pending approvals not expired are counted, and
// the oldest named; decided and expired ones are not.
func testApprovalBacklog(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newApprovalFixture(t, s)
	if b, err := s.ApprovalBacklog(ctx, f.now); err != nil || b != (store.ApprovalBacklog{}) {
		t.Fatalf("ApprovalBacklog with none = %+v, %v; want zero", b, err)
	}
	old := f.approval("apr-old", testBinding())
	f.create(old)
	other := testBinding()
	other.Tool, other.ArgumentsHash = "notes_delete", "args-2"
	newer := f.approval("apr-new", other)
	newer.CreatedAt, newer.ExpiresAt = f.now.Add(time.Minute), f.now.Add(3*time.Hour)
	f.create(newer)
	decided := testBinding()
	decided.ArgumentsHash = "args-3"
	f.approved("apr-decided", decided)

	b, err := s.ApprovalBacklog(ctx, f.now.Add(2*time.Minute))
	want := store.ApprovalBacklog{Pending: 2, OldestID: "apr-old", OldestTool: "notes_write", OldestServer: "demo", OldestAt: f.now.Truncate(time.Microsecond)}
	if err != nil || b != want {
		t.Errorf("ApprovalBacklog = %+v, %v; want %+v", b, err, want)
	}
	// Past the first one's expiry, only the newer is pending.
	b, err = s.ApprovalBacklog(ctx, f.now.Add(2*time.Hour))
	if err != nil || b.Pending != 1 || b.OldestID != "apr-new" || b.OldestTool != "notes_delete" {
		t.Errorf("ApprovalBacklog past the first's expiry = %+v, %v; want apr-new only", b, err)
	}
}

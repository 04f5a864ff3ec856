package status_test

import (
	"testing"
	"time"

	"github.com/usherhq/usher/status"
	"github.com/usherhq/usher/store"
)

// TestEarlierIncarnation: a replica takes for an earlier start of itself
// an id of its own name (host name) and another suffix whose heartbeat is
// gone, or whose heartbeat recorded its own listen address; never a live
// replica of its host on another address, another host's replica, or
// itself. Alone (the embedded default) takes every other id.
func TestEarlierIncarnation(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	ctx := t.Context()
	beat := func(id, addr string) {
		t.Helper()
		if _, err := st.BeatReplica(ctx, store.Replica{ID: id, Version: "v1", Addr: addr, StartedAt: time.Now()}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	beat("host-a-111111111111", "127.0.0.1:8080") // killed; restarted as me
	beat("host-a-222222222222", "127.0.0.1:9090") // alive beside me
	beat("host-b-333333333333", "127.0.0.1:8080") // another host
	me, err := status.NewHeartbeat(st, &status.HeartbeatOptions{ID: "host-a-444444444444", Addr: "127.0.0.1:8080", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := status.NewHeartbeat(st, &status.HeartbeatOptions{ID: "host-a-444444444444", Alone: true, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owner        string
		want, wantIf bool // wantIf: with Alone
	}{
		{"host-a-111111111111", true, true},
		{"host-a-555555555555", true, true},  // no heartbeat: gone
		{"host-a-222222222222", false, true}, // alive, elsewhere on the host
		{"host-b-333333333333", false, true},
		{"host-b-666666666666", false, true},
		{"host-a-444444444444", false, false}, // itself
		{"host-a", false, true},
		{"replica-a", false, true},
	} {
		if got, err := me.EarlierIncarnation(ctx, c.owner); err != nil || got != c.want {
			t.Errorf("EarlierIncarnation(%s) = %t, %v; want %t", c.owner, got, err, c.want)
		}
		if got, err := alone.EarlierIncarnation(ctx, c.owner); err != nil || got != c.wantIf {
			t.Errorf("Alone: EarlierIncarnation(%s) = %t, %v; want %t", c.owner, got, err, c.wantIf)
		}
	}
}

package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// upgradeEngines are the engines an upgrade test runs on: a store not
// migrated, and a time literal of the engine for the rows it writes as an
// older release would.
var upgradeEngines = []struct {
	name string
	open func(testing.TB) store.Store
	at   string
}{
	{"sqlite", storetest.OpenSQLite, `'2026-11-30T10:00:00.000000Z'`},
	{"postgres", storetest.OpenPostgres, `'2026-11-30T10:00:00Z'`},
}

// TestUpgradeQueuesStrandedRuns: runs an older release left with a user
// message no turn answers, neither leased nor queued (some parked Idle
// since), are queued for their turn by the migration that brings the
// retries; other runs are left as they were.
func TestUpgradeQueuesStrandedRuns(t *testing.T) {
	for _, e := range upgradeEngines {
		t.Run(e.name, func(t *testing.T) {
			ctx := t.Context()
			s := e.open(t)
			if err := store.MigrateTo(ctx, s, 3); err != nil {
				t.Fatal(err)
			}
			for _, r := range []struct {
				id, status   string
				handled      int64
				leased, turn bool
			}{
				{id: "stranded", status: "InProgress"},
				{id: "parked", status: "Idle"},
				{id: "answered", status: "Idle", handled: 1},
				{id: "leased", status: "InProgress", leased: true},
				{id: "completed", status: "Completed"},
			} {
				lease := "NULL, NULL"
				if r.leased {
					lease = "'replica-a', " + e.at
				}
				stmts := []string{
					fmt.Sprintf(`INSERT INTO runs (id, owner, status, last_seq, handled_seq, lease_owner, lease_expires_at,
						created_at, updated_at, last_activity_at) VALUES ('%s', 'alice', '%s', 1, %d, %s, %s, %s, %s)`,
						r.id, r.status, r.handled, lease, e.at, e.at, e.at),
					fmt.Sprintf(`INSERT INTO run_events (run_id, seq, type, payload, created_at)
						VALUES ('%s', 1, 'message.user', '{"content":"hi"}', %s)`, r.id, e.at),
				}
				for _, q := range stmts {
					if err := store.ExecRaw(ctx, s, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			before := time.Now().Add(-time.Minute)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for id, queued := range map[string]bool{"stranded": true, "parked": true, "answered": false, "leased": false, "completed": false} {
				r, err := s.GetRun(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got := !r.QueuedAt.IsZero(); got != queued || (queued && (r.Status != store.RunInProgress || r.QueuedAt.Before(before))) {
					t.Errorf("run %s after the upgrade: %s, queued at %v; want queued %v (and InProgress)", id, r.Status, r.QueuedAt, queued)
				}
			}
		})
	}
}

package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestPostgresLegalHoldWaitsForErasures: on PostgreSQL, a legal hold
// placed while a purge of the person's deleted run, an erasure of the
// person, or a sweep of their unsent attachments is under way waits until
// that has committed — so that no
// placement returns while something it stops may still erase their data
// — and then stands. (On SQLite the write transactions serialise them.)
func TestPostgresLegalHoldWaitsForErasures(t *testing.T) {
	type erasure func(ctx context.Context, s store.Store, dsn, owner string, wait func()) error
	for name, erase := range map[string]erasure{
		"purge": func(ctx context.Context, s store.Store, _, _ string, wait func()) error {
			_, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, func(store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
				wait()
				return nil, nil
			})
			return err
		},
		"erasure": func(ctx context.Context, s store.Store, _, owner string, wait func()) error {
			_, err := s.ErasePrincipal(ctx, owner, func(store.PrincipalErasure) (func(store.AuditHead) (store.AuditRecord, error), error) {
				wait()
				return nil, nil
			})
			return err
		},
		// The sweep of unsent attachments locks their contents first, as
		// this transaction does, then deletes them.
		"sweep": func(ctx context.Context, _ store.Store, dsn, owner string, wait func()) error {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background())
			for i, q := range []string{
				`SELECT owner, sha256 FROM attachment_contents WHERE owner = $1 ORDER BY sha256 FOR UPDATE`,
				`DELETE FROM attachments WHERE owner = $1 AND run_id IS NULL`,
				`DELETE FROM attachment_contents WHERE owner = $1`,
			} {
				if _, err := tx.Exec(ctx, q, owner); err != nil {
					return err
				}
				if i == 0 {
					wait()
				}
			}
			return tx.Commit(ctx)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := storetest.PostgresURL(t)
			s := openMigrated(t, dsn)
			owner := "issuer|tenant|held-" + name
			if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-1", Owner: owner}, 5, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteRun(ctx, "run-1", nil, store.Withdrawal{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-draft", Owner: owner, Tenant: "tenant", Name: "draft.txt", ContentType: "text/plain"}, []byte("a draft"), 1<<10); err != nil {
				t.Fatal(err)
			}
			// The erasure holds its locks while its record is built, after
			// its deletions.
			inside, release := make(chan struct{}), make(chan struct{})
			// Released on a failure too, before the store closes.
			var once sync.Once
			let := func() { once.Do(func() { close(release) }) }
			t.Cleanup(let)
			erased := make(chan error, 1)
			go func() {
				erased <- erase(context.Background(), s, dsn, owner, func() { close(inside); <-release })
			}()
			<-inside
			placed := make(chan error, 1)
			go func() {
				_, err := s.PlaceLegalHold(context.Background(), store.LegalHold{Principal: owner, Reason: "matter 7", PlacedBy: "test"}, nil)
				placed <- err
			}()
			waitForLockWait(t, dsn, placed)
			let()
			if err := <-erased; err != nil {
				t.Fatalf("the %s: %v", name, err)
			}
			if err := <-placed; err != nil {
				t.Fatalf("PlaceLegalHold after the %s: %v", name, err)
			}
			gone, what := "run-1", error(nil)
			if name == "sweep" {
				_, _, what = s.AttachmentData(ctx, "att-draft")
			} else {
				_, what = s.GetRun(ctx, gone)
			}
			if !errors.Is(what, store.ErrNotFound) {
				t.Errorf("what the %s that began first erases: %v, want erased", name, what)
			}
			if holds, err := s.LegalHolds(ctx); err != nil || len(holds) != 1 || holds[0].Principal != owner {
				t.Errorf("LegalHolds = %+v, %v; want the hold placed after the %s", holds, err, name)
			}
		})
	}
}

// waitForLockWait waits until a backend of the database dsn names waits
// for a lock (the placement of a legal hold, behind the erasure); it fails
// the test if placed has an answer first: the placement did not wait.
func waitForLockWait(t *testing.T, dsn string, placed <-chan error) {
	t.Helper()
	waitForActivity(t, dsn, func() {
		select {
		case err := <-placed:
			t.Fatalf("PlaceLegalHold returned (%v) while the erasure was under way", err)
		default:
		}
	}, `datname = current_database() AND wait_event_type = 'Lock'
AND (query LIKE '%usher.runs.owner.%' OR query LIKE '%WHERE owner = $1 FOR UPDATE%')`)
}

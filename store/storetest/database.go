package storetest

import (
	"context"
	"crypto/rand"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// NewPostgresDatabase returns a migrated store on a PostgreSQL database of
// the test's own, created on the server named by TEST_DATABASE_URL and
// dropped when the test ends, and a function that terminates every backend
// connected to that database, and only to it: a fault-injection test kills
// its own connections, never those of the shared database. Without
// TEST_DATABASE_URL the test is skipped, or fails under CI (see
// testenv.DatabaseURL).
func NewPostgresDatabase(t testing.TB) (_ store.Store, terminate func()) {
	t.Helper()
	base := testenv.DatabaseURL(t)
	u, _ := url.Parse(base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", DatabaseURLEnv, err)
	}
	name := "usher_test_" + strings.ToLower(rand.Text()[:16])
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		admin.Close(ctx)
		t.Fatalf("create test database: %v", err)
	}
	var mu sync.Mutex // the admin connection, one query at a time
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
		admin.Close(ctx)
	})
	u.Path = "/" + name
	s := migrated(t, open(t, u.String()))
	return s, func() {
		mu.Lock()
		defer mu.Unlock()
		// The timeout makes each call wait until its backend has exited,
		// so that the next statement on that connection fails for sure.
		if _, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
			t.Errorf("terminate the backends of %s: %v", name, err)
		}
	}
}

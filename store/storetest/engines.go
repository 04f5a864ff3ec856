package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// DatabaseURLEnv names the environment variable holding the PostgreSQL URL
// the tests run against (testenv.DatabaseURLEnv).
const DatabaseURLEnv = testenv.DatabaseURLEnv

// NewSQLite returns a migrated store on a new SQLite file in t.TempDir(),
// closed when the test ends.
func NewSQLite(t testing.TB) store.Store {
	t.Helper()
	return migrated(t, OpenSQLite(t))
}

// OpenSQLite returns a store on a new, empty SQLite file in t.TempDir(),
// not migrated, closed when the test ends.
func OpenSQLite(t testing.TB) store.Store {
	t.Helper()
	return open(t, filepath.Join(t.TempDir(), "usher.db"))
}

// NewPostgres returns a migrated store in a schema of its own on the
// PostgreSQL server named by TEST_DATABASE_URL (see PostgresURL), closed and
// dropped when the test ends.
func NewPostgres(t testing.TB) store.Store {
	t.Helper()
	return migrated(t, OpenPostgres(t))
}

// OpenPostgres is NewPostgres without the migration: the schema is empty.
func OpenPostgres(t testing.TB) store.Store {
	t.Helper()
	return open(t, PostgresURL(t))
}

// PostgresURL creates a schema with a random name on the PostgreSQL server
// named by TEST_DATABASE_URL and returns a URL whose connections use it
// (through the search_path parameter). The schema is dropped when the test
// ends. Tests that need two stores on one database, as two replicas would
// share it, open this URL twice.
//
// Without TEST_DATABASE_URL the test is skipped, or fails under CI (see
// testenv.DatabaseURL). With a URL that does not work it fails.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := testenv.DatabaseURL(t)
	u, _ := url.Parse(base)

	var b [8]byte
	rand.Read(b[:])
	schema := "usher_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{schema}.Sanitize()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", DatabaseURLEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// open opens dsn and closes the store when the test ends.
func open(t testing.TB, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// migrated migrates s, failing the test if it cannot.
func migrated(t testing.TB, s store.Store) store.Store {
	t.Helper()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

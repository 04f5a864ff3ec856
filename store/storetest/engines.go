package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sync"
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
// closed when the test ends. The file is a copy of one the store's own
// migrations made once in this process (see sqliteTemplate): migrating
// a file takes a second and a half under the race detector, copying one
// a few milliseconds.
func NewSQLite(t testing.TB) store.Store {
	t.Helper()
	files, err := sqliteTemplate()
	if err != nil {
		t.Fatalf("a migrated SQLite file: %v", err)
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return open(t, filepath.Join(dir, sqliteFile))
}

// sqliteFile is the name of a test's SQLite file.
const sqliteFile = "usher.db"

// sqliteTemplate is the migrated SQLite database the process's NewSQLite
// copies: its files' contents by name, made at the first call.
var sqliteTemplate = sync.OnceValues(migrateSQLiteTemplate)

// migrateSQLiteTemplate migrates a new SQLite file in a directory of its
// own, closes it, and returns the directory's files (the database, and
// its write-ahead log if closing left one), then removes the directory.
func migrateSQLiteTemplate() (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "usher-storetest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(dir, sqliteFile), nil)
	if err != nil {
		return nil, err
	}
	err = s.Migrate(ctx)
	if err := errors.Join(err, s.Close()); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, name := range []string{sqliteFile, sqliteFile + "-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist) && name != sqliteFile:
		case err != nil:
			return nil, err
		default:
			files[name] = b
		}
	}
	return files, nil
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

// Migrated returns a migrated store on dsn (a SQLite file's path, made if
// missing, or a PostgresURL), closed when the test ends: for a test that
// reaches the database under the store too, as whoever holds it could.
func Migrated(t testing.TB, dsn string) store.Store {
	t.Helper()
	return migrated(t, open(t, dsn))
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

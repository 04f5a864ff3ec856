package audit_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// forEachEngine runs test on a migrated store of each engine, with a
// connection of its own to the same database for tampering with it.
func forEachEngine(t *testing.T, test func(t *testing.T, st store.Store, db *sql.DB)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "usher.db")
		test(t, openStore(t, path), openDB(t, "sqlite", path))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		url := storetest.PostgresURL(t)
		test(t, openStore(t, url), openDB(t, "pgx", url))
	})
}

// forEachDSN runs test with the address of a new database of each engine.
func forEachDSN(t *testing.T, test func(t *testing.T, dsn string)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, filepath.Join(t.TempDir(), "usher.db"))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		test(t, storetest.PostgresURL(t))
	})
}

func openStore(t *testing.T, dsn string) store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// openEngineDB is openDB with the driver of dsn's engine.
func openEngineDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres") {
		return openDB(t, "pgx", dsn)
	}
	return openDB(t, "sqlite", dsn)
}

// openDB opens the database directly, as someone with write access to it
// would, outside the store.
func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// clock is a test clock that moves step each time it is read (a
// newClock), or only when the test advances it (a newManualClock).
type clock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func newClock() *clock {
	return &clock{now: time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.UTC), step: time.Millisecond}
}

func newManualClock() *clock {
	return &clock{now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

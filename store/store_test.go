package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The conformance suite (storetest.Run) runs against each engine in a
// package of its own: store/storetest/sqlite and store/storetest/postgres.

// Two processes sharing one database migrate it at once: both succeed and
// the schema is migrated once.
func TestSQLiteConcurrentMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usher.db")
	testConcurrentMigrate(t, path)
}

func TestPostgresConcurrentMigrate(t *testing.T) {
	testConcurrentMigrate(t, storetest.PostgresURL(t))
}

func testConcurrentMigrate(t *testing.T, dsn string) {
	const processes = 3
	stores := make([]store.Store, processes)
	for i := range stores {
		s, err := store.Open(t.Context(), dsn, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	start := make(chan struct{})
	errs := make([]error, processes)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-start
			errs[i] = s.Migrate(t.Context())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate in process %d: %v", i, err)
		}
	}
	for i, s := range stores {
		if err := s.Ready(t.Context()); err != nil {
			t.Errorf("Ready in process %d: %v", i, err)
		}
	}
	// Each sees the others' writes: one database, not several.
	if _, err := stores[0].CreateRun(t.Context(), store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress}); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if _, err := stores[processes-1].GetRun(t.Context(), "run-1"); err != nil {
		t.Errorf("GetRun through another store: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		dsn  string
		opts *store.Options
	}{
		{"empty DSN", "", nil},
		{"in-memory SQLite", ":memory:", nil},
		{"SQLite URI", "file:" + filepath.Join(dir, "a.db"), nil},
		{"SQLite path with a query", filepath.Join(dir, "a.db") + "?mode=ro", nil},
		{"other URL scheme", "mysql://usher:secret@127.0.0.1/usher", nil},
		{"mistyped PostgreSQL scheme", "postgress://usher:secret@127.0.0.1/usher", nil},
		{"negative MaxConns", filepath.Join(dir, "b.db"), &store.Options{MaxConns: -1}},
		{"unreachable PostgreSQL", "postgres://usher:secret@127.0.0.1:1/usher?connect_timeout=5", nil},
		{"malformed PostgreSQL URL", "postgres://usher:secret@127.0.0.1:notaport/usher", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.Open(t.Context(), tt.dsn, tt.opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) = nil error, want a refusal", tt.dsn)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Open's error %q shows the password", err)
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "usher.db"), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Ready(context.Background()); err == nil {
		t.Error("Ready after Close = nil, want an error")
	} else if errors.Is(err, store.ErrNotFound) {
		t.Errorf("Ready after Close = %v, want a plain error", err)
	}
}

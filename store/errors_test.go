package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

func TestPgError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error // nil: passed through unchanged
	}{
		{"no rows", pgx.ErrNoRows, ErrNotFound},
		{"wrapped no rows", fmt.Errorf("scan: %w", pgx.ErrNoRows), ErrNotFound},
		{"unique violation", &pgconn.PgError{Code: "23505"}, ErrConflict},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, ErrConflict},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, ErrConflict},
		{"wrapped unique violation", fmt.Errorf("commit: %w", &pgconn.PgError{Code: "23505"}), ErrConflict},
		{"foreign key violation", &pgconn.PgError{Code: "23503"}, ErrNotFound},
		{"check violation", &pgconn.PgError{Code: "23514"}, ErrInvalid},
		{"not null violation", &pgconn.PgError{Code: "23502"}, ErrInvalid},
		{"invalid JSON text", &pgconn.PgError{Code: "22P02"}, ErrInvalid},
		{"NUL in jsonb", &pgconn.PgError{Code: "22P05"}, ErrInvalid},
		{"NUL in text", &pgconn.PgError{Code: "22021"}, ErrInvalid},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, nil},
		{"connection lost", io.ErrUnexpectedEOF, ErrUnavailable},
		{"backend terminated", &pgconn.PgError{Code: "57P01"}, ErrUnavailable},
		{"server crashed", &pgconn.PgError{Code: "57P02"}, ErrUnavailable},
		{"server starting", &pgconn.PgError{Code: "57P03"}, ErrUnavailable},
		{"connection failure", &pgconn.PgError{Code: "08006"}, ErrUnavailable},
		{"terminated, then the cleanup failed", errors.Join(&pgconn.PgError{Code: "57P01"}, errors.New("conn closed")), ErrUnavailable},
		{"broken connection", fmt.Errorf("begin: %w", driver.ErrBadConn), ErrUnavailable},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, ErrUnavailable},
		{"canceled", context.Canceled, nil},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), nil},
		{"query canceled", &pgconn.PgError{Code: "57014"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkTranslation(t, pgError(tt.err), tt.err, tt.want)
		})
	}
	if pgError(nil) != nil {
		t.Error("pgError(nil) != nil")
	}
}

// TestSQLiteError provokes each error from a real SQLite database, so the
// codes tested are the ones modernc.org/sqlite really returns.
func TestSQLiteError(t *testing.T) {
	s := openTestSQLite(t)
	ctx := t.Context()
	mustExec(t, s.write, `INSERT INTO runs (id, owner, status, idempotency_key, created_at, updated_at, last_activity_at)
		VALUES ('run-1', 'alice', 'Idle', 'key', 'now', 'now', 'now')`)
	mustExec(t, s.write, `INSERT INTO audit_log (seq, at, kind, prev_hash, hash) VALUES (1, 'now', 'k', '', 'h1')`)

	tests := []struct {
		name  string
		query string
		want  error
	}{
		{"primary key", `INSERT INTO runs (id, owner, status, created_at, updated_at, last_activity_at)
			VALUES ('run-1', 'bob', 'Idle', 'now', 'now', 'now')`, ErrConflict},
		{"unique", `INSERT INTO runs (id, owner, status, idempotency_key, created_at, updated_at, last_activity_at)
			VALUES ('run-2', 'alice', 'Idle', 'key', 'now', 'now', 'now')`, ErrConflict},
		{"integer primary key", `INSERT INTO audit_log (seq, at, kind, prev_hash, hash) VALUES (1, 'now', 'k', '', 'h2')`, ErrConflict},
		{"foreign key", `INSERT INTO run_events (run_id, seq, type, created_at) VALUES ('missing', 1, 't', 'now')`, ErrNotFound},
		{"check", `UPDATE runs SET status = 'Running' WHERE id = 'run-1'`, ErrInvalid},
		{"invalid JSON", `INSERT INTO run_events (run_id, seq, type, payload, created_at) VALUES ('run-1', 1, 't', '{', 'now')`, ErrInvalid},
		{"not null", `UPDATE runs SET owner = NULL WHERE id = 'run-1'`, ErrInvalid},
		{"strict type", `UPDATE runs SET last_seq = 'many' WHERE id = 'run-1'`, ErrInvalid},
		{"syntax", `UPDATE nowhere SET x = 1`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.write.ExecContext(ctx, tt.query)
			var liteErr *sqlite.Error
			if !errors.As(err, &liteErr) {
				t.Fatalf("query returned %v, want a *sqlite.Error", err)
			}
			checkTranslation(t, sqliteError(err), err, tt.want)
		})
	}

	var id string
	err := s.read.QueryRowContext(ctx, `SELECT id FROM runs WHERE id = 'missing'`).Scan(&id)
	if got := sqliteError(err); !errors.Is(got, ErrNotFound) {
		t.Errorf("sqliteError(%v) = %v, want ErrNotFound", err, got)
	}
	if sqliteError(nil) != nil {
		t.Error("sqliteError(nil) != nil")
	}
}

// checkTranslation checks that got, the translation of err, is the sentinel
// want and still wraps err for logs; or, for want nil, that it is err.
func checkTranslation(t *testing.T, got, err, want error) {
	t.Helper()
	if want == nil {
		if got != err {
			t.Errorf("translated %v into %v, want it passed through", err, got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Errorf("translated %v into %v, want %v", err, got, want)
	}
	for _, other := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrUnavailable} {
		if other != want && errors.Is(got, other) {
			t.Errorf("translated %v into %v, which is also %v", err, got, other)
		}
	}
	if !errors.Is(got, err) && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("translated %v into %v, which no longer wraps the driver error", err, got)
	}
}

// The SQLite connections are configured as the store relies on: the file in
// WAL mode, foreign keys enforced, the writer waiting for locks, the readers
// unable to write.
func TestSQLiteConnections(t *testing.T) {
	s := openTestSQLite(t)
	pragmas := []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.write, "journal_mode", "wal"},
		{s.write, "foreign_keys", "1"},
		{s.write, "busy_timeout", "5000"},
		{s.read, "journal_mode", "wal"},
		{s.read, "query_only", "1"},
		{s.read, "busy_timeout", "5000"},
	}
	for _, p := range pragmas {
		var got string
		if err := p.db.QueryRowContext(t.Context(), "PRAGMA "+p.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", p.pragma, err)
		}
		if got != p.want {
			t.Errorf("PRAGMA %s = %s, want %s", p.pragma, got, p.want)
		}
	}
	if _, err := s.read.ExecContext(t.Context(), `DELETE FROM runs`); err == nil {
		t.Error("a read connection could write")
	}
	if got := s.write.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("write pool allows %d connections, want 1", got)
	}
}

func openTestSQLite(t *testing.T) *sqliteStore {
	t.Helper()
	o, err := (*Options)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s, err := openSQLite(t.Context(), filepath.Join(t.TempDir(), "usher.db"), o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

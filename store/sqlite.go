package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteStore is the Store on one SQLite file. SQLite admits one writer at a
// time, so every write goes through a pool of exactly one connection whose
// transactions start with BEGIN IMMEDIATE: writers of this process queue in
// database/sql instead of failing with SQLITE_BUSY, and the busy timeout
// covers other processes. Reads use their own pool; in WAL mode they never
// wait for the writer.
type sqliteStore struct {
	core
	migrator *goose.Provider
	// path is the database file, which Backup will not write over.
	path    string
	wakes   wakeHub
	updates updateHub

	closeOnce sync.Once
}

// sqliteBusyTimeout is how long a connection waits for another process's
// lock before failing with SQLITE_BUSY.
const sqliteBusyTimeout = 5 * time.Second

func openSQLite(ctx context.Context, path string, o Options) (*sqliteStore, error) {
	// The DSN is not echoed: a mistyped URL may carry a password. A string
	// with a scheme is refused rather than taken for a path, which would
	// create directories named after it.
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") ||
		strings.Contains(path, "://") || strings.ContainsAny(path, "?#") {
		return nil, errors.New("store: the DSN must be a postgres:// or postgresql:// URL, or the path of a SQLite file " +
			"(not :memory:, not a file: URI, without ? or #)")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("store: SQLite directory: %w", err)
	}
	busy := fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds())

	// Connections keep the statements they prepare (sqlite_stmtcache.go).
	writer, err := newStmtCachingConnector(path + "?" + url.Values{
		"_pragma": {busy, "foreign_keys(1)", "journal_mode(WAL)"},
		"_txlock": {"immediate"},
	}.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open SQLite: %w", err)
	}
	write := sql.OpenDB(writer)
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	// The writer connects first: it switches the file to WAL, which the
	// read-only connections cannot do.
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open SQLite %s: %w", path, err)
	}

	reader, err := newStmtCachingConnector(path + "?" + url.Values{
		"_pragma": {busy, "query_only(1)"},
	}.Encode())
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open SQLite: %w", err)
	}
	read := sql.OpenDB(reader)
	readers := o.MaxConns
	if readers == 0 {
		readers = max(4, runtime.NumCPU())
	}
	read.SetMaxOpenConns(readers)
	read.SetMaxIdleConns(readers)
	if err := read.PingContext(ctx); err != nil {
		read.Close()
		write.Close()
		return nil, fmt.Errorf("store: open SQLite %s: %w", path, err)
	}

	migrator, err := newMigrator(goose.DialectSQLite3, write, sqliteMigrations, "migrations/sqlite")
	if err != nil {
		read.Close()
		write.Close()
		return nil, err
	}
	s := &sqliteStore{migrator: migrator, path: path}
	s.core = core{
		read: read, write: write, lite: true,
		now: o.Now, log: o.Logger,
		translate: sqliteError, afterCommit: s.published,
	}
	return s, nil
}

// published is the SQLite core's afterCommit: this process's subscribers
// are every subscriber there is.
func (s *sqliteStore) published(p *txState) {
	for _, n := range p.notes {
		s.updates.publish(n)
	}
	if p.wake {
		s.wakes.wake()
	}
}

// sqliteMigrationTableExists reports whether goose's table exists.
const sqliteMigrationTableExists = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)`

func (s *sqliteStore) Migrate(ctx context.Context) error {
	if err := s.createMigrationTable(ctx); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	// Within this process the single write connection serialises
	// migrations. Another process sharing the file may apply a migration
	// between goose's check and its write, failing ours. Each migration is
	// one transaction, so trying again (the busy timeout waits out the
	// other writer) resumes after what it applied; when nothing is pending
	// any more, the schema is where it should be.
	var err error
	for range sqliteMigrateAttempts {
		var results []*goose.MigrationResult
		if results, err = s.migrator.Up(ctx); err == nil {
			logApplied(s.log, results)
			return nil
		}
		if s.pending(ctx) == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("store: migrate: %w", err)
}

// sqliteMigrateAttempts bounds Migrate's retries when other processes
// migrate the same file at once: one more than there are migrations is
// always enough, as every failed attempt follows another process's commit.
const sqliteMigrateAttempts = 8

// createMigrationTable creates goose's table, as goose itself would, but
// checks and creates under the write lock: two processes migrating a new
// file at once then never both try to create it.
func (s *sqliteStore) createMigrationTable(ctx context.Context) error {
	versions, err := database.NewStore(database.DialectSQLite3, migrationTable)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx executor) error {
		var exists bool
		if err := tx.q.QueryRowContext(ctx, sqliteMigrationTableExists, migrationTable).Scan(&exists); err != nil || exists {
			return err
		}
		if err := versions.CreateVersionTable(ctx, tx.q); err != nil {
			return err
		}
		return versions.Insert(ctx, tx.q, database.InsertRequest{Version: 0})
	})
}

func (s *sqliteStore) Ready(ctx context.Context) error {
	if err := s.write.PingContext(ctx); err != nil {
		return fmt.Errorf("store: SQLite is not ready: %w", err)
	}
	return s.pending(ctx)
}

// pending returns nil when the schema is at the newest migration, an error
// naming what is pending otherwise.
func (s *sqliteStore) pending(ctx context.Context) error {
	var exists bool
	if err := s.read.QueryRowContext(ctx, sqliteMigrationTableExists, migrationTable).Scan(&exists); err != nil {
		return fmt.Errorf("store: SQLite is not ready: %w", err)
	}
	if !exists {
		return allMigrations(s.migrator)
	}
	return pendingMigrations(ctx, s.migrator)
}

func (s *sqliteStore) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.updates.close()
		err = errors.Join(s.read.Close(), s.write.Close())
	})
	return err
}

// sqliteTimeLayout is how times are stored in SQLite: UTC, fixed width, six
// fractional digits, so that comparing the text compares the times.
const sqliteTimeLayout = "2006-01-02T15:04:05.000000Z"

// sqliteTime formats t for a SQLite time column.
func sqliteTime(t time.Time) string {
	return storedTime(t).Format(sqliteTimeLayout)
}

// parseSQLiteTime reads a time column.
func parseSQLiteTime(s string) (time.Time, error) {
	t, err := time.Parse(sqliteTimeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: SQLite time column holds %q: %w", s, err)
	}
	return t, nil
}

// sqliteDuplicateEvent reports whether err is SQLite refusing an audit
// record whose event id another record has. SQLite names the column
// of the unique index it enforced, not the index.
func sqliteDuplicateEvent(err error) bool {
	var liteErr *sqlite.Error
	return errors.As(err, &liteErr) && liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE &&
		strings.Contains(liteErr.Error(), "audit_log.event_id")
}

// sqliteError translates a modernc.org/sqlite error into the store's
// sentinels. It is the one place that knows SQLite's result codes; the
// driver error stays wrapped for logs, and errors.Is finds the sentinel.
func sqliteError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var liteErr *sqlite.Error
	if !errors.As(err, &liteErr) {
		return err
	}
	switch liteErr.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_ROWID:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		// A row refers to one that does not exist.
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case sqlite3.SQLITE_CONSTRAINT_NOTNULL, sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_DATATYPE:
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

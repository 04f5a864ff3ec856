package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetAuditLinger sets how long lazy audit appends of a PostgreSQL store
// wait to be carried (see appendAudit).
func SetAuditLinger(s Store, d time.Duration) {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	c.linger = d
	c.mu.Unlock()
}

// QueuedAudit returns how many audit appends of a PostgreSQL store are
// queued.
func QueuedAudit(s Store) int {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// AppendAuditAfter appends build's record on a PostgreSQL store after the
// statement stmt with args, in the same transaction, as BeginExecutionAudited
// does with its own.
func AppendAuditAfter(ctx context.Context, s Store, stmt string, args []any, build func(AuditHead) (AuditRecord, error), lazy bool) (AuditRecord, error) {
	step := &pgTxStep{
		queue: func(b *pgx.Batch) { b.Queue(stmt, args...) },
		read: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		},
	}
	kind := appendAnswers
	if lazy {
		kind = appendLazy
	}
	r, err := s.(*postgresStore).appendAudit(ctx, step, build, kind)
	if err != nil {
		return AuditRecord{}, appendError(err, pgError)
	}
	return r, nil
}

// AppendEndAfter is AppendAuditAfter for how a tool call ended while no
// other call is in progress (WriteNow): written at once, no one waiting
// for it to be answered.
func AppendEndAfter(ctx context.Context, s Store, stmt string, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	step := &pgTxStep{
		queue: func(b *pgx.Batch) { b.Queue(stmt) },
		read: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		},
	}
	r, err := s.(*postgresStore).appendAudit(ctx, step, build, appendAlone)
	if err != nil {
		return AuditRecord{}, appendError(err, pgError)
	}
	return r, nil
}

// MigrateTo applies the migrations up to version and no further: the
// schema of an older release.
func MigrateTo(ctx context.Context, s Store, version int64) error {
	switch s := s.(type) {
	case *sqliteStore:
		if err := s.createMigrationTable(ctx); err != nil {
			return err
		}
		_, err := s.migrator.UpTo(ctx, version)
		return err
	case *postgresStore:
		_, err := s.migrator.UpTo(ctx, version)
		return err
	}
	return nil
}

// ExecRaw runs a statement on the store's database, past the store: the
// rows an older release wrote.
func ExecRaw(ctx context.Context, s Store, query string, args ...any) error {
	switch s := s.(type) {
	case *sqliteStore:
		_, err := s.write.ExecContext(ctx, query, args...)
		return err
	case *postgresStore:
		_, err := s.pool.Exec(ctx, query, args...)
		return err
	}
	return nil
}

// ChainedAudit returns how many audit writes of a PostgreSQL store were
// chained on another, and how many of those were rolled back and written
// again.
func ChainedAudit(s Store) (writes, retries int) {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chainedWrites, c.chainedRetries
}

// SkipKnownAuditHead makes the next n audit writes of a PostgreSQL store
// not chain on the head it knows, as after a collision. Call it while no
// write is under way.
func SkipKnownAuditHead(s Store, n int) {
	s.(*postgresStore).audit.skip = n
}

// AuditAhead reports whether a PostgreSQL store's audit chain has a write
// under way that the next write may be chained on.
func AuditAhead(s Store) bool {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ahead != nil
}

// ListenBackends counts the backends of a PostgreSQL store's database
// whose last statement was the LISTEN of its updates channel.
func ListenBackends(ctx context.Context, s Store) (int, error) {
	var n int
	err := s.(*postgresStore).pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN ' || quote_ident(`+pgUpdatesChannel+`)`).Scan(&n)
	return n, err
}

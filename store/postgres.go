package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// postgresStore is the Store on PostgreSQL, through a pgx pool.
type postgresStore struct {
	core
	pool     *pgxpool.Pool
	sqlDB    *sql.DB // the same pool through database/sql: core's, and goose's
	migrator *goose.Provider
	audit    *pgAuditChain

	closeOnce sync.Once
}

func openPostgres(ctx context.Context, dsn string, o Options) (*postgresStore, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL URL: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = int32(min(o.MaxConns, math.MaxInt32))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to PostgreSQL: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	migrator, err := newMigrator(goose.DialectPostgres, sqlDB, postgresMigrations, "migrations/postgres")
	if err != nil {
		sqlDB.Close()
		pool.Close()
		return nil, err
	}
	return &postgresStore{
		core: core{
			read: sqlDB, write: sqlDB, autocommit: true,
			now: o.Now, log: o.Logger,
			translate: pgError, retryable: pgRetryable, beforeCommit: pgSendNotifications,
		},
		pool: pool, sqlDB: sqlDB, migrator: migrator, audit: newPGAuditChain(),
	}, nil
}

// pgNotifyAll sends a transaction's notifications: $1 says of each whether
// it goes to the queue channel (a wake-up) or the updates channel, $2
// holds its payload. Inside a transaction they are delivered at commit.
const pgNotifyAll = `SELECT pg_notify(CASE WHEN n.queue THEN 'usher_queue.' ELSE 'usher_updates.' END || current_schema(), n.payload)
FROM unnest($1::boolean[], $2::text[]) AS n(queue, payload)`

// pgSendNotifications is the PostgreSQL core's beforeCommit.
func pgSendNotifications(ctx context.Context, q querier, p *txState) error {
	queue := make([]bool, 0, len(p.notes)+1)
	payloads := make([]string, 0, len(p.notes)+1)
	for _, n := range p.notes {
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		queue, payloads = append(queue, false), append(payloads, string(b))
	}
	if p.wake {
		queue, payloads = append(queue, true), append(payloads, "")
	}
	_, err := q.ExecContext(ctx, pgNotifyAll, queue, payloads)
	return err
}

// pgRetryable reports a failure after which a transaction may be run
// again: it lost to a concurrent one, and nothing it did committed.
func pgRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgSerializationFailure || pgErr.Code == pgDeadlockDetected)
}

// pgMigrationLock serialises Migrate across processes. It is a session lock
// keyed by the schema, so deployments in different schemas of one database
// do not wait for each other, and it blocks in the server rather than
// polling.
const pgMigrationLock = `SELECT pg_advisory_lock(hashtextextended('usher.migrate.' || current_schema(), 0))`

// pgMigrationTableExists reports whether goose's table exists in the schema
// the connection resolves unqualified names to.
const pgMigrationTableExists = `
SELECT EXISTS (
	SELECT 1 FROM pg_catalog.pg_tables
	WHERE schemaname = current_schema() AND tablename = $1
)`

func (s *postgresStore) Migrate(ctx context.Context) error {
	// The lock lives on a connection of its own, outside the pool: it can
	// never return to the pool still held, and closing the connection
	// releases it even if the unlock would fail. Holding it across the whole
	// of goose's work (including its first creation of the migration table)
	// means a second process simply waits, then finds nothing to do.
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("store: migrate: connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, pgMigrationLock); err != nil {
		return fmt.Errorf("store: migrate: take the migration lock: %w", err)
	}
	results, err := s.migrator.Up(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	logApplied(s.log, results)
	return nil
}

func (s *postgresStore) Ready(ctx context.Context) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, pgMigrationTableExists, migrationTable).Scan(&exists); err != nil {
		return fmt.Errorf("store: PostgreSQL is not ready: %w", err)
	}
	if !exists {
		return allMigrations(s.migrator)
	}
	return pendingMigrations(ctx, s.migrator)
}

func (s *postgresStore) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.sqlDB.Close()
		s.pool.Close()
	})
	return err
}

const (
	pgInsertRun = `
INSERT INTO runs (id, owner, title, status, idempotency_key, queued_at,
	created_at, updated_at, last_activity_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7)
RETURNING ` + runColumns

	pgGetRun = `SELECT ` + runColumns + ` FROM runs WHERE id = $1`

	pgListRuns = `
SELECT ` + runColumns + ` FROM runs
WHERE owner = $1 AND deleted_at IS NULL
ORDER BY created_at DESC, id DESC`

	// pgTransitionRun is the compare-and-swap of a run's status; $5 is the
	// completion time when the new status is terminal, NULL otherwise.
	pgTransitionRun = `
UPDATE runs SET status = $3, updated_at = $4, completed_at = coalesce($5, completed_at)
WHERE id = $1 AND status = $2
RETURNING ` + runColumns

	pgRunExists = `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`
)

func (s *postgresStore) CreateRun(ctx context.Context, r Run) (Run, error) {
	if err := checkNewRun(r); err != nil {
		return Run{}, err
	}
	now := storedTime(s.now())
	row := s.pool.QueryRow(ctx, pgInsertRun,
		r.ID, r.Owner, r.Title, r.Status, nullString(r.IdempotencyKey), pgNullTime(r.QueuedAt), now)
	out, err := scanPostgresRun(row)
	if err != nil {
		return Run{}, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanPostgresRun(s.pool.QueryRow(ctx, pgGetRun, id))
	if err != nil {
		return Run{}, pgError(err)
	}
	return r, nil
}

func (s *postgresStore) ListRuns(ctx context.Context, owner string) ([]Run, error) {
	rows, err := s.pool.Query(ctx, pgListRuns, owner)
	if err != nil {
		return nil, pgError(err)
	}
	return collectPostgresRuns(rows)
}

func (s *postgresStore) TransitionRun(ctx context.Context, id string, from, to RunStatus) (Run, error) {
	if err := checkTransition(from, to); err != nil {
		return Run{}, err
	}
	now := storedTime(s.now())
	var completedAt *time.Time
	if to.Terminal() {
		completedAt = &now
	}
	r, err := scanPostgresRun(s.pool.QueryRow(ctx, pgTransitionRun, id, from, to, now, completedAt))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, s.missingOrConflict(ctx, id)
	}
	if err != nil {
		return Run{}, pgError(err)
	}
	return r, nil
}

// missingOrConflict explains why a write conditioned on a run's state
// touched no row: ErrNotFound when the run does not exist, ErrConflict when
// its state was not the expected one.
func (s *postgresStore) missingOrConflict(ctx context.Context, id string) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, pgRunExists, id).Scan(&exists); err != nil {
		return pgError(err)
	}
	if !exists {
		return ErrNotFound
	}
	return ErrConflict
}

const (
	// pgNextEventSeq takes the run's row lock and its next sequence. The
	// lock is held until the event is inserted in the same transaction, so
	// concurrent appends queue behind each other and leave no gap.
	pgNextEventSeq = `
UPDATE runs SET last_seq = last_seq + 1, updated_at = $2, last_activity_at = $2
WHERE id = $1
RETURNING last_seq`

	pgInsertEvent = `INSERT INTO run_events (` + eventColumns + `) VALUES ($1, $2, $3, $4, $5)`

	pgListEvents = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3`
)

func (s *postgresStore) AppendEvent(ctx context.Context, runID, typ string, payload json.RawMessage) (Event, error) {
	payload, err := eventPayload(typ, payload)
	if err != nil {
		return Event{}, err
	}
	e := Event{RunID: runID, Type: typ, Payload: payload, CreatedAt: storedTime(s.now())}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, pgNextEventSeq, runID, e.CreatedAt).Scan(&e.Seq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgInsertEvent, e.RunID, e.Seq, e.Type, e.Payload, e.CreatedAt)
		return err
	})
	if err != nil {
		return Event{}, pgError(err)
	}
	return e, nil
}

func (s *postgresStore) ListEvents(ctx context.Context, runID string, after int64, limit int) ([]Event, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, pgListEvents, runID, after, limit)
	if err != nil {
		return nil, pgError(err)
	}
	events, err := pgx.CollectRows(rows, scanPostgresEvent)
	if err != nil {
		return nil, pgError(err)
	}
	if len(events) == 0 {
		// An empty page is either the end of the log or a missing run.
		var exists bool
		if err := s.pool.QueryRow(ctx, pgRunExists, runID).Scan(&exists); err != nil {
			return nil, pgError(err)
		}
		if !exists {
			return nil, ErrNotFound
		}
	}
	return events, nil
}

const (
	pgInsertSigningKey = `
INSERT INTO signing_keys (` + signingKeyColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

	pgSigningKeys = `
SELECT ` + signingKeyColumns + ` FROM signing_keys
WHERE purpose = $1 AND published_until > $2
ORDER BY generation`
)

func (s *postgresStore) InsertSigningKey(ctx context.Context, k SigningKey) error {
	if err := checkSigningKey(k); err != nil {
		return err
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.now()
	}
	_, err := s.pool.Exec(ctx, pgInsertSigningKey,
		k.ID, k.Purpose, k.Generation, k.Algorithm, k.PublicKey, k.PrivateKey,
		storedTime(k.CreatedAt), storedTime(k.SignsFrom), storedTime(k.PublishedUntil))
	return pgError(err)
}

func (s *postgresStore) SigningKeys(ctx context.Context, purpose string, now time.Time) ([]SigningKey, error) {
	rows, err := s.pool.Query(ctx, pgSigningKeys, purpose, storedTime(now))
	if err != nil {
		return nil, pgError(err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SigningKey, error) {
		var k SigningKey
		err := row.Scan(&k.ID, &k.Purpose, &k.Generation, &k.Algorithm, &k.PublicKey, &k.PrivateKey,
			&k.CreatedAt, &k.SignsFrom, &k.PublishedUntil)
		k.CreatedAt, k.SignsFrom, k.PublishedUntil = k.CreatedAt.UTC(), k.SignsFrom.UTC(), k.PublishedUntil.UTC()
		return k, err
	})
	if err != nil {
		return nil, pgError(err)
	}
	return keys, nil
}

// scanPostgresRun reads one row of runColumns.
func scanPostgresRun(row pgx.Row) (Run, error) {
	var r Run
	var queuedAt, leaseExpiresAt, completedAt, deletedAt, notBefore *time.Time
	err := row.Scan(&r.ID, &r.Owner, &r.Title, &r.Status, &r.IdempotencyKey,
		&r.LastSeq, &r.MessageCount, &r.Preview,
		&queuedAt, &r.LeaseOwner, &leaseExpiresAt, &r.FencingToken,
		&r.CreatedAt, &r.UpdatedAt, &r.LastActivityAt, &completedAt, &deletedAt,
		&r.TurnSeq, &r.HandledSeq, &r.Failures, &notBefore)
	if err != nil {
		return Run{}, err
	}
	r.QueuedAt = pgTimeOrZero(queuedAt)
	r.LeaseExpiresAt = pgTimeOrZero(leaseExpiresAt)
	r.CompletedAt = pgTimeOrZero(completedAt)
	r.DeletedAt = pgTimeOrZero(deletedAt)
	r.NotBefore = pgTimeOrZero(notBefore)
	r.CreatedAt, r.UpdatedAt, r.LastActivityAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC(), r.LastActivityAt.UTC()
	return r, nil
}

// pgNullTime maps the zero time to NULL, for nullable timestamptz columns.
func pgNullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	st := storedTime(t)
	return &st
}

// pgTimeOrZero maps NULL to the zero time; pgx returns times in the local
// zone, the store in UTC.
func pgTimeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// PostgreSQL error codes the store translates (SQLSTATE, Appendix A of the
// PostgreSQL manual).
const (
	pgUniqueViolation          = "23505"
	pgForeignKeyViolation      = "23503"
	pgNotNullViolation         = "23502"
	pgCheckViolation           = "23514"
	pgSerializationFailure     = "40001"
	pgDeadlockDetected         = "40P01"
	pgInvalidTextRepr          = "22P02"
	pgUntranslatableCharacter  = "22P05"
	pgCharacterNotInRepertoire = "22021"
)

// pgError translates a pgx error into the store's sentinels. It is the one
// place that knows PostgreSQL's error codes; the driver error stays wrapped
// for logs, and errors.Is finds the sentinel.
func pgError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgUniqueViolation, pgSerializationFailure, pgDeadlockDetected:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case pgForeignKeyViolation:
		// A row refers to one that does not exist.
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case pgNotNullViolation, pgCheckViolation, pgInvalidTextRepr, pgUntranslatableCharacter, pgCharacterNotInRepertoire:
		// A value the schema refuses, such as a JSON string holding \u0000,
		// which jsonb cannot store, or text holding NUL or invalid UTF-8.
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

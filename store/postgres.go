package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// postgresStore is the Store on PostgreSQL, through a pgx pool.
type postgresStore struct {
	core
	pool     *pgxpool.Pool
	sqlDB    *sql.DB // the same pool through database/sql: core's, and goose's
	migrator *goose.Provider
	audit    *pgAuditChain
	updates  pgUpdates // the listener of Updates (updates.go)

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
	if o.TracerProvider != nil {
		cfg.ConnConfig.Tracer = newStatementTracer(o.TracerProvider, cfg.ConnConfig)
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

// statementTracer is otelpgx's tracer with a span of each statement sent
// on its own and one span of each batch, and none of the driver's other
// steps: a batch's statements (an audit write's, say) go to the server in
// one round trip, as one implicit transaction, and its span is that round
// trip, as the database conventions describe a batch — db.operation.name
// "BATCH" (or "BATCH INSERT" when every statement is an INSERT),
// db.operation.batch.size, and db.query.text the statements' texts joined
// by "; ". Preparing a statement (once per connection, pgx's statement
// cache) is no span.
type statementTracer struct {
	*otelpgx.Tracer
	tracer trace.Tracer
	attrs  []attribute.KeyValue // the pool's: system, server, database
}

// newStatementTracer is the statementTracer of the pool of cfg, making
// its spans with tp.
func newStatementTracer(tp trace.TracerProvider, cfg *pgx.ConnConfig) statementTracer {
	// Statements' text only: bound arguments carry what users wrote. Each
	// span is named by its operation (INSERT, SELECT, …). The connection's
	// attributes are the pool's, set once here rather than built again for
	// each statement.
	attrs := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(cfg.Host),
		semconv.ServerPort(int(cfg.Port)), semconv.DBNamespace(cfg.Database)}
	return statementTracer{
		Tracer: otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithDisableAcquireTracer(),
			otelpgx.WithDisableConnectionDetailsInAttributes(), otelpgx.WithTracerAttributes(attrs[1:]...)),
		tracer: tp.Tracer(batchScope),
		attrs:  attrs,
	}
}

// batchScope is the instrumentation scope of the batches' spans.
const batchScope = "github.com/usherhq/usher/store"

// clientSpan is the start option of a batch's span, made once.
var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// TraceBatchStart starts the span of the batch, when the span it is sent
// in is recording.
func (t statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	var queries []*pgx.QueuedQuery
	if data.Batch != nil {
		queries = data.Batch.QueuedQueries
	}
	op, text := batchOperation(ctx, queries)
	ctx, span := t.tracer.Start(ctx, op, clientSpan...)
	attrs := make([]attribute.KeyValue, 0, len(t.attrs)+3)
	attrs = append(attrs, t.attrs...)
	span.SetAttributes(append(attrs, semconv.DBOperationName(op), semconv.DBOperationBatchSize(len(queries)),
		semconv.DBQueryText(text))...)
	return ctx
}

// batchOperation is the db.operation.name and db.query.text of a batch of
// queries.
func batchOperation(ctx context.Context, queries []*pgx.QueuedQuery) (op, text string) {
	var b strings.Builder
	for i, q := range queries {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(q.SQL)
		switch name := otelpgx.SQLOperationName(ctx, q.SQL); {
		case i == 0:
			op = name
		case op != name:
			op = ""
		}
	}
	if op == "" {
		return "BATCH", b.String()
	}
	return "BATCH " + op, b.String()
}

// TraceBatchQuery marks the batch's span failed when a statement failed;
// a statement that found no row did not.
func (statementTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if span := trace.SpanFromContext(ctx); data.Err != nil && !errors.Is(data.Err, sql.ErrNoRows) && span.IsRecording() {
		span.SetStatus(codes.Error, data.Err.Error())
		var pgErr *pgconn.PgError
		if errors.As(data.Err, &pgErr) {
			span.SetAttributes(otelpgx.SQLStateKey.String(pgErr.Code))
		}
	}
}

// TraceBatchEnd ends the batch's span: the span in ctx, which is the
// caller's own only when that one is not recording (then ending it does
// nothing).
func (statementTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	span := trace.SpanFromContext(ctx)
	if data.Err != nil && !errors.Is(data.Err, sql.ErrNoRows) {
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.End()
}

// TracePrepareStart starts no span.
func (statementTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

// TracePrepareEnd ends none: the span in ctx is the caller's.
func (statementTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

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
		s.closeUpdates()
		err = s.sqlDB.Close()
		s.pool.Close()
	})
	return err
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
	pgAdminShutdown            = "57P01"
	pgCrashShutdown            = "57P02"
	pgCannotConnectNow         = "57P03"
	pgConnectionExceptionClass = "08"
)

// pgUnavailable reports whether err is the database being out of reach:
// the server shutting the connection down or not taking it, a connection
// exception, the connection found broken, or a failure to connect or to
// talk to the server at all. A context that ended, whatever the driver
// made of it, is not.
func pgUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgAdminShutdown, pgCrashShutdown, pgCannotConnectNow:
			return true
		}
		return strings.HasPrefix(pgErr.Code, pgConnectionExceptionClass)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// pgDuplicateEvent reports whether err is PostgreSQL refusing an audit
// record whose event id another record has.
func pgDuplicateEvent(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation && pgErr.ConstraintName == auditEventIndex
}

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
	if pgUnavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
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

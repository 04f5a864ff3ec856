package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"
)

// core is the engine-neutral half of the Store: every domain operation is
// written once, as methods of core over an executor, and each engine
// (postgresStore, sqliteStore) embeds a core configured with what differs:
// its pools, its error translation, and how notifications leave a
// transaction. An engine overrides a method only for a performance path of
// its own (see doc.go).
type core struct {
	// read serves reads: SQLite's read-only pool, PostgreSQL's pool.
	read *sql.DB
	// write serves write transactions: SQLite's one writer (BEGIN
	// IMMEDIATE), PostgreSQL's pool.
	write *sql.DB
	lite  bool

	now func() time.Time
	log *slog.Logger

	// translate maps a driver error to the store's sentinels (pgError,
	// sqliteError); it returns any other error as it is.
	translate func(error) error
	// retryable reports an error after which the whole transaction may be
	// run again: a serialization failure or deadlock on PostgreSQL.
	retryable func(error) bool
	// beforeCommit, when set, runs in the transaction just before it
	// commits, with what the transaction collected: PostgreSQL sends the
	// notifications there (pg_notify), so that they are delivered when,
	// and only when, the transaction commits.
	beforeCommit func(ctx context.Context, q querier, p *txState) error
	// afterCommit, when set, runs once the transaction has committed:
	// SQLite publishes to this process's subscribers there.
	afterCommit func(p *txState)
	// autocommit: a write of one statement needs no transaction of its
	// own (PostgreSQL). On SQLite every write takes the write lock first,
	// in a BEGIN IMMEDIATE transaction.
	autocommit bool

	// mcpSweep paces the sweeps of MCP events past their retention.
	mcpSweep mcpEventSweep
}

// txState is what a transaction collects for after it commits.
type txState struct {
	notes []Notification
	// wake: a run may have been queued, so schedulers should look.
	wake bool
}

// notify queues n for the transaction's subscribers, and schedulers'
// wake-ups when it queued a run.
func (x executor) notify(n ...Notification) {
	x.tx.notes = append(x.tx.notes, n...)
}

// wake tells schedulers, once the transaction commits, that a run may
// have been queued.
func (x executor) wake() { x.tx.wake = true }

// notifyAfter queues n as notify does, unless s sent them itself: the
// PostgreSQL text of a statement built with sendsNotifications sends its
// own (pg_notify in the statement), so that a write of one statement
// stays one round trip.
func (x executor) notifyAfter(s stmt, n ...Notification) {
	if x.lite || !s.pgNotifies {
		x.notify(n...)
	}
}

// wakeAfter is wake, unless s sent the wake-up itself (see notifyAfter).
func (x executor) wakeAfter(s stmt) {
	if x.lite || !s.pgNotifies {
		x.wake()
	}
}

// notifyRuns queues a NotifyRun for each run.
func (x executor) notifyRuns(runs ...Run) {
	for _, r := range runs {
		x.notify(runNotification(r))
	}
}

// runNotification tells that the run's row changed.
func runNotification(r Run) Notification {
	return Notification{Kind: NotifyRun, RunID: r.ID, Owner: r.Owner}
}

// reader is the executor for reads outside a transaction.
func (c *core) reader() executor { return executor{q: c.read, lite: c.lite} }

// maxTxAttempts bounds how often inTx runs a transaction that failed with
// a retryable error.
const maxTxAttempts = 3

// inTx runs fn in one write transaction and commits it. fn may be run
// more than once (after a serialization failure), so it must have no
// effect outside the transaction. The error is fn's or the driver's,
// untranslated: see fail.
func (c *core) inTx(ctx context.Context, fn func(tx executor) error) error {
	for attempt := 1; ; attempt++ {
		err := c.tryTx(ctx, fn)
		if err == nil || attempt == maxTxAttempts || c.retryable == nil || !c.retryable(err) || ctx.Err() != nil {
			return err
		}
	}
}

func (c *core) tryTx(ctx context.Context, fn func(tx executor) error) error {
	sqlTx, err := c.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	p := &txState{}
	tx := executor{q: sqlTx, lite: c.lite, tx: p}
	if err := fn(tx); err != nil {
		if rbErr := sqlTx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			return errors.Join(err, rbErr)
		}
		return err
	}
	if c.beforeCommit != nil && (len(p.notes) > 0 || p.wake) {
		if err := c.beforeCommit(ctx, sqlTx, p); err != nil {
			_ = sqlTx.Rollback()
			return err
		}
	}
	if err := sqlTx.Commit(); err != nil {
		return err
	}
	if c.afterCommit != nil {
		c.afterCommit(p)
	}
	return nil
}

// writeOne runs fn, a write of one statement, as inTx does; where the
// engine commits a lone statement by itself (PostgreSQL) it runs on the
// pool, saving the round trips of BEGIN and COMMIT, and its notifications
// follow the statement.
func (c *core) writeOne(ctx context.Context, fn func(x executor) error) error {
	if !c.autocommit {
		return c.inTx(ctx, fn)
	}
	p := &txState{}
	if err := fn(executor{q: c.write, lite: c.lite, tx: p}); err != nil {
		return err
	}
	if c.beforeCommit != nil && (len(p.notes) > 0 || p.wake) {
		// The write has committed: a notification lost now is logged, not
		// returned, for the caller must not take the write for failed.
		// Subscribers resynchronise, and the schedulers' sweep finds a
		// queued run, on their own.
		if err := c.beforeCommit(ctx, c.write, p); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "store: notifying a committed write failed", "err", err)
		}
	}
	return nil
}

// fail is the error an operation returns for err: an audit build
// function's error as it returned it, the store's sentinels as they are,
// a driver error translated.
func (c *core) fail(err error) error {
	if err == nil {
		return nil
	}
	return appendError(err, c.translate)
}

// missingOrConflict explains why a write conditioned on a row's state
// touched no row: ErrNotFound when exists (a statement taking the row's
// key) finds no row, ErrConflict when the row was not in the expected
// state.
func missingOrConflict(ctx context.Context, x executor, exists stmt, key ...any) error {
	var found bool
	if err := x.row(ctx, exists, key...).Scan(&found); err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	return ErrConflict
}

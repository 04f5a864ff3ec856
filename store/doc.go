// Package store owns Usher's database: the schema and its migrations for
// PostgreSQL (pgx) and SQLite (modernc.org/sqlite, no cgo), the queries, and
// the translation of driver errors into the sentinels callers branch on
// (ErrNotFound, ErrConflict).
//
// The database is the only authority in Usher: any replica may serve any
// request, so everything that must survive a restart is written here. The
// package storetest holds one conformance suite that both engines pass.
//
// Open picks the engine from the DSN: a postgres:// URL, or the path of a
// SQLite file. Open never changes the schema; Migrate applies the embedded
// migrations (migrations/postgres, migrations/sqlite: the same logical
// schema, only ever added to), and Ready reports whether the schema is
// current. Times are stored in UTC at microsecond precision on both
// engines; on SQLite as fixed-width text, so that text order is time order.
//
// # Layers
//
// Every operation is written once. The layers, from the bottom:
//
//   - executor (executor.go) runs statements on a pool or in a
//     transaction, on either engine: *sql.DB and *sql.Tx both implement
//     what it needs. PostgreSQL is reached through pgx's database/sql
//     adapter over the same pgx pool that LISTEN and the audit queue use
//     directly. It converts arguments to what the engine stores (on
//     SQLite, times to fixed-width text) and timeCol scans a time from
//     either.
//   - stmt (executor.go) is one statement, written once in PostgreSQL's
//     form and translated for SQLite when the package initialises, as dex's
//     storage/sql does with its flavors: $N placeholders become ?N, casts
//     (::bigint) and row locks (FOR UPDATE [SKIP LOCKED]) are dropped,
//     since SQLite's columns have affinities and its write transaction
//     locks the whole database. Translation was chosen over generated code
//     (sqlc) because the engines' statements differ in little more than
//     that: one text per statement keeps the SQL beside the Go that runs
//     it. Where they differ, the statement says so: perEngine (two texts:
//     the approval listings' JSON array functions, the run writes and the
//     claim below, keyShared's FOR KEY SHARE in oauth.go), postgresOnly
//     (advisory locks, which SQLite's single writer makes moot) and
//     sqliteFollowUp (what a PostgreSQL statement did in a data-modifying
//     CTE, which SQLite runs after it).
//   - core (core.go) is the engine-neutral Store: the domain operations
//     (validation, conflict detection, the lifecycle compare-and-swaps,
//     fencing, the audit chain, notifications) as methods over an
//     executor; inTx, the one transaction runner (retried after a
//     serialization failure on PostgreSQL); and writeOne, for a write of
//     one statement, which PostgreSQL runs without BEGIN and COMMIT. A
//     domain step is a function of an executor, so an operation that must
//     be atomic, such as a decision and its audit record, or the use of an
//     approval, the start of its execution and the record, is a plain
//     transaction of steps (approvals.go; appendAuditTx in audit.go).
//     Notifications are collected by the transaction and leave with its
//     commit: pg_notify inside it on PostgreSQL, this process's hubs after
//     it on SQLite. A statement may send its own on PostgreSQL
//     (stmt.pgNotifies; executor.notifyAfter), so that each write of a
//     turn stays one round trip: the run writes built with advancing
//     (queue.go) advance the run's row, insert its events and notify in
//     one statement there.
//   - postgresStore (postgres*.go) and sqliteStore (sqlite*.go) embed a
//     core configured with their pools, error translation (pgError,
//     sqliteError: the one place each knows its driver's codes) and
//     notification delivery, and add only what is theirs: opening,
//     migrating, LISTEN (notify.go; updates.go, one listener per store
//     whose notifications the hub both engines share fans out to every
//     subscriber, updatehub.go), SQLite's one writer with
//     BEGIN IMMEDIATE beside a read pool and its per-connection statement
//     cache (sqlite_stmtcache.go), and PostgreSQL's audit group commit
//     (postgres_audit*.go), which the start and the end of every tool
//     call ride (postgres_executions.go) in one round trip, a start sent
//     while the previous outcome's write is under way, and the OAuth
//     token endpoint's grants in two (postgres_oauth.go), whose every
//     refusal is core's.
//
// # Adding a table
//
//  1. A migration in both migrations/postgres and migrations/sqlite, with
//     the same number; the schema-parity test (schema_test.go) fails until
//     both engines expose the same tables, columns, nullability and
//     indexes.
//  2. The type, its validation, its statements (sql1) and its operations
//     as core methods, in one file named for the domain (notes.go is the
//     smallest example), and the methods on the Store interface
//     (store.go).
//  3. Conformance tests in storetest, which run on both engines.
//
// Nothing in the engine files changes, unless the new table needs an
// engine's performance path of its own.
package store

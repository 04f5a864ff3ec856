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
package store

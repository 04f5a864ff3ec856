// Package store owns Usher's database: the schema and its migrations for
// PostgreSQL (pgx) and SQLite (modernc.org/sqlite, no cgo), the queries, and
// the translation of driver errors into the sentinels callers branch on
// (ErrNotFound, ErrConflict).
//
// The database is the only authority in Usher: any replica may serve any
// request, so everything that must survive a restart is written here. The
// package storetest holds one conformance suite that both engines pass.
package store

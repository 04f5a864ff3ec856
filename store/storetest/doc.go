// Package storetest owns the conformance suite of package store, which every
// engine passes, and the helpers other packages' tests use to get a real
// database: NewSQLite (always available) and NewPostgres (when
// TEST_DATABASE_URL names a PostgreSQL server).
package storetest

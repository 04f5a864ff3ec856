// Package postgres_test runs the store's conformance suite against
// PostgreSQL (TEST_DATABASE_URL; skipped without it, failed under CI): a
// package of its own, so that the suite of each engine has its own test
// binary and timeout beside the store's other tests.
package postgres_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestMain fails the suite when a goroutine it started is still running
// after it: whoever starts one must stop it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPostgres(t *testing.T) {
	storetest.PostgresURL(t) // skips without TEST_DATABASE_URL, fails if it does not work
	storetest.Run(t, storetest.Engine{Open: func(t *testing.T) store.Store { return storetest.OpenPostgres(t) }})
}

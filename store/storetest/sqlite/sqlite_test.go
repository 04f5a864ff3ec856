// Package sqlite_test runs the store's conformance suite against the
// embedded SQLite engine: a package of its own, so that the suite of each
// engine has its own test binary and timeout beside the store's other
// tests.
package sqlite_test

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

func TestSQLite(t *testing.T) {
	storetest.Run(t, storetest.Engine{
		Open:     func(t *testing.T) store.Store { return storetest.OpenSQLite(t) },
		Migrated: func(t *testing.T) store.Store { return storetest.NewSQLite(t) },
	})
}

package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after them: whoever starts one must stop it. It deletes
// the usher binary the process-level tests built, if they built one.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testenv.Remove()
		os.Exit(code)
	}))
}

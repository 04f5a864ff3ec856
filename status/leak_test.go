package status_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after them: whoever starts one must stop it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package main

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after them: whoever starts one must stop it. It deletes
// the usher binary the process-level tests built, if they built one.
//
// The tests run up to four at a time, not GOMAXPROCS (unless -parallel
// says otherwise): most of their time is spent waiting for the usher
// processes they start, which use the machine's processors themselves.
func TestMain(m *testing.M) {
	flag.Parse()
	parallel := false
	flag.Visit(func(f *flag.Flag) { parallel = parallel || f.Name == "test.parallel" })
	if !parallel {
		flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0))))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testenv.Remove()
		os.Exit(code)
	}))
}

package main

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// serve holds the collector's pace unless the process was started with
// GOGC, and puts the previous target back when it returns.
func TestTuneGC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	current := func() int {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}
	before := current()

	t.Setenv("GOGC", "150")
	restore := tuneGC(log)
	if got := current(); got != before {
		t.Errorf("with GOGC set, the target is %d, want it left at %d", got, before)
	}
	restore()

	os.Unsetenv("GOGC") // t.Setenv restores it after the test
	restore = tuneGC(log)
	// The pace follows each collection from a cleanup the runtime runs
	// after it, on a goroutine of its own: collect until that has run (a
	// few times at most), as it never does without the pace.
	runtime.GC()
	for i := 0; heapGoal() < servePace.Floor && i < 100; i++ {
		runtime.Gosched()
		runtime.GC()
	}
	if got := current(); got < servePace.Percent {
		t.Errorf("without GOGC, the target is %d, want at least %d", got, servePace.Percent)
	}
	if got := heapGoal(); got < servePace.Floor {
		t.Errorf("without GOGC, the heap goal is %d MiB, want at least the floor's %d", got>>20, servePace.Floor>>20)
	}
	restore()
	if got := current(); got != before {
		t.Errorf("after serve, the target is %d, want %d back", got, before)
	}
}

// heapGoal returns the heap size the collector aims its next cycle at.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

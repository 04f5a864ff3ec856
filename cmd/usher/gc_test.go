package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

// serve raises the collector's target unless the process was started with
// GOGC, and puts the previous one back when it returns.
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
	if got := current(); got != serveGCPercent {
		t.Errorf("without GOGC, the target is %d, want %d", got, serveGCPercent)
	}
	restore()
	if got := current(); got != before {
		t.Errorf("after serve, the target is %d, want %d back", got, before)
	}
}

package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// serveGCPercent is the garbage collector's target that serve sets when
// the process was not started with GOGC: the heap may grow to five times
// what is live after a collection before the next one, where Go's default
// (GOGC=100) allows twice. Usher's live heap is small (tens of MiB) and each
// MCP message it decodes allocates a 32 KiB buffer in the MCP SDK, so at
// the default the collector runs every few calls and its work is a large
// share of a call's time: docs/benchmarks.md measures both. GOGC, and
// GOMEMLIMIT for a hard ceiling, override it as they do for any Go program.
const serveGCPercent = 400

// tuneGC sets serveGCPercent unless GOGC is set, and returns a function
// that restores the previous target.
func tuneGC(log *slog.Logger) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	prev := debug.SetGCPercent(serveGCPercent)
	log.Info("garbage collector target set; set GOGC to choose another", "GOGC", serveGCPercent)
	return func() { debug.SetGCPercent(prev) }
}

package main

import (
	"log/slog"
	"os"

	"github.com/usherhq/usher/internal/gcpace"
)

// servePace is the garbage collector's pace that serve holds when the
// process was not started with GOGC: the heap may grow to five times what
// is live after a collection (Go's default, GOGC=100, allows twice), and no
// collection starts for the target before the heap reaches 64 MiB. Usher's
// live heap is small (a few MiB on the MCP path) and each MCP message it
// decodes allocates a 32 KiB buffer in the MCP SDK, so at Go's default the
// collector runs every few calls and its work is a large share of a call's
// time, and at GOGC=400 alone still every few dozen. GOGC, and GOMEMLIMIT for a hard ceiling, override it as
// they do for any Go program.
var servePace = gcpace.Pace{Percent: 400, Floor: 64 << 20}

// tuneGC holds servePace unless GOGC is set, and returns a function that
// lets it go, restoring the previous target.
func tuneGC(log *slog.Logger) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	release := gcpace.Hold(servePace)
	log.Info("garbage collector pace set; set GOGC to choose another",
		"GOGC", servePace.Percent, "heap_floor_mib", servePace.Floor>>20)
	return release
}

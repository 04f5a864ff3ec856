package buildinfo

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// version and date are set at link time:
//
//	go build -ldflags "-X github.com/usherhq/usher/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/usherhq/usher/internal/buildinfo.date=2026-12-06T00:00:00Z"
var version, date string

// Info is a binary's build.
type Info struct {
	// Version is the release, such as v1.2.3, or "(devel)" for a build
	// that was given none.
	Version string
	// Revision is the commit it was built from; empty when unknown.
	Revision string
	// Time is the commit's time, or the build date given at link time;
	// zero when unknown.
	Time time.Time
	// Modified is set when the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Read returns this binary's build.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: cmp.Or(version, "unknown")}
	}
	return fromBuildInfo(bi, version, date)
}

func fromBuildInfo(bi *debug.BuildInfo, linkedVersion, linkedDate string) Info {
	in := Info{Version: cmp.Or(linkedVersion, bi.Main.Version, "(devel)"), GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time, _ = time.Parse(time.RFC3339, s.Value)
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	if t, err := time.Parse(time.RFC3339, linkedDate); err == nil {
		in.Time = t
	}
	return in
}

// String is the version with what else is known, as `usher version`
// prints it: "v1.2.3 (commit 0123456789ab, 2026-12-06, modified, go1.26.8)".
func (in Info) String() string {
	var parts []string
	if in.Revision != "" {
		parts = append(parts, "commit "+in.Revision[:min(12, len(in.Revision))])
	}
	if !in.Time.IsZero() {
		parts = append(parts, in.Time.UTC().Format(time.DateOnly))
	}
	if in.Modified {
		parts = append(parts, "modified")
	}
	if in.GoVersion != "" {
		parts = append(parts, in.GoVersion)
	}
	if len(parts) == 0 {
		return in.Version
	}
	return fmt.Sprintf("%s (%s)", in.Version, strings.Join(parts, ", "))
}

package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-05T08:17:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	tests := []struct {
		name          string
		bi            *debug.BuildInfo
		version, date string
		want          string
	}{
		{"a release", stamped, "v1.2.3", "2026-12-06T10:00:00Z", "v1.2.3 (commit 0123456789ab, 2026-12-06, modified, go1.26.8)"},
		{"a checkout", stamped, "", "", "(devel) (commit 0123456789ab, 2026-12-05, modified, go1.26.8)"},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, "", "", "v1.2.3 (go1.26.8)"},
		{"nothing known", &debug.BuildInfo{}, "", "", "(devel)"},
	}
	for _, tt := range tests {
		if got := fromBuildInfo(tt.bi, tt.version, tt.date).String(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

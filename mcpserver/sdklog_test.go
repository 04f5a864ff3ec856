package mcpserver

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestSDKLogger checks that a stateless server's SDK logs its Info lines at
// Debug, only when Debug is on, and its warnings as they are; stateful, the
// logger is Usher's.
func TestSDKLogger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		level slog.Level
		want  []string
		not   []string
	}{
		{slog.LevelInfo, []string{"level=WARN msg=careful a=1"}, []string{"connected"}},
		{slog.LevelDebug, []string{"level=DEBUG msg=connected g.b=2", "level=WARN msg=careful a=1"}, []string{"level=INFO"}},
	} {
		var buf bytes.Buffer
		base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
		l := sdkLogger(base, false)
		if got, want := l.Enabled(ctx, slog.LevelInfo), tc.level == slog.LevelDebug; got != want {
			t.Errorf("level %v: Enabled(Info) = %v, want %v", tc.level, got, want)
		}
		l.WithGroup("g").Info("connected", "b", 2)
		l.With("a", 1).Warn("careful")
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("level %v: log %q lacks %q", tc.level, buf.String(), w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(buf.String(), n) {
				t.Errorf("level %v: log %q has %q", tc.level, buf.String(), n)
			}
		}
	}
	base := slog.New(slog.DiscardHandler)
	if sdkLogger(base, true) != base {
		t.Error("a stateful server's SDK logger is not Usher's")
	}
}

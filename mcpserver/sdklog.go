package mcpserver

import (
	"context"
	"log/slog"
)

// sdkLogger is the logger given to the Go SDK's server. Stateless, the SDK
// opens and closes a session for every request and logs each step at Info
// ("server connecting", "server session connected", "server session
// disconnected", with an empty session id): three lines per call that say
// nothing the request does not. Those Info lines become Debug lines, asked
// for with the rest at log level debug; the SDK's warnings and errors are
// logged as they are. Stateful sessions are long-lived, and their lines
// are kept at Info.
func sdkLogger(l *slog.Logger, stateful bool) *slog.Logger {
	if stateful {
		return l
	}
	return slog.New(infoAsDebug{l.Handler()})
}

// infoAsDebug is a slog.Handler that logs Info records at Debug.
type infoAsDebug struct{ h slog.Handler }

// level is the level a record at l is logged at.
func (infoAsDebug) level(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

// Enabled reports whether the wrapped handler takes records at the level
// one at l is logged at; it is checked before a record is made.
func (d infoAsDebug) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, d.level(l))
}

// Handle passes r on at its new level.
func (d infoAsDebug) Handle(ctx context.Context, r slog.Record) error {
	r.Level = d.level(r.Level)
	return d.h.Handle(ctx, r)
}

// WithAttrs wraps the wrapped handler's WithAttrs.
func (d infoAsDebug) WithAttrs(as []slog.Attr) slog.Handler {
	return infoAsDebug{d.h.WithAttrs(as)}
}

// WithGroup wraps the wrapped handler's WithGroup.
func (d infoAsDebug) WithGroup(name string) slog.Handler {
	return infoAsDebug{d.h.WithGroup(name)}
}

package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Options configures Open. A nil *Options means every default.
type Options struct {
	// Logger receives what the store reports on its own, such as applied
	// migrations. Nil discards it.
	Logger *slog.Logger
	// MaxConns caps the connections the store opens for queries: the pool
	// size on PostgreSQL, the read pool on SQLite (which always writes
	// through one connection). Zero keeps the engine default: pgxpool's
	// (the greater of 4 and the number of CPUs) on PostgreSQL, the same
	// number on SQLite.
	MaxConns int
	// Now is the clock the store stamps rows with. Nil means time.Now.
	Now func() time.Time
	// TracerProvider, when not nil, makes a client span of each statement
	// on PostgreSQL (otelpgx, by the database semantic conventions), in
	// the trace of the context the statement runs with: its text, never
	// its arguments. Nil (the default, and what tracing off passes) adds
	// nothing to a statement's path. SQLite's statements have no spans.
	TracerProvider trace.TracerProvider
}

// Open connects to the database named by dsn. A postgres:// or
// postgresql:// URL selects PostgreSQL; anything else is the path of a
// SQLite file, created (with its directory) when missing. Open checks that
// the database answers but does not migrate it: call Migrate.
func Open(ctx context.Context, dsn string, opts *Options) (Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if isPostgresURL(dsn) {
		return openPostgres(ctx, dsn, o)
	}
	return openSQLite(ctx, dsn, o)
}

// isPostgresURL reports whether dsn selects PostgreSQL.
func isPostgresURL(dsn string) bool {
	lower := strings.ToLower(dsn)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

// withDefaults validates o and returns a copy with every default filled in.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.MaxConns < 0 {
		return Options{}, fmt.Errorf("store: MaxConns is %d, want 0 (the default) or more", out.MaxConns)
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out, nil
}

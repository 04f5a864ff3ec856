package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
)

// The migrations of each engine: the same logical schema, numbered alike.
// Migrations only ever add, so replicas of the previous release keep
// working against a newer schema.
var (
	//go:embed migrations/postgres/*.sql
	postgresMigrations embed.FS
	//go:embed migrations/sqlite/*.sql
	sqliteMigrations embed.FS
)

// migrationTable records the applied migrations. It carries the product's
// name so it cannot collide with another application's migration table in a
// shared schema.
const migrationTable = "usher_migrations"

// newMigrator returns a goose provider for the migrations under dir of fsys.
func newMigrator(dialect goose.Dialect, db *sql.DB, fsys embed.FS, dir string) (*goose.Provider, error) {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	p, err := goose.NewProvider(dialect, db, sub,
		goose.WithTableName(migrationTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	return p, nil
}

// pendingMigrations returns nil when every migration m knows is applied, and
// an error naming the pending versions otherwise. The migration table must
// exist: goose creates it on first use, which a readiness check must not do.
func pendingMigrations(ctx context.Context, m *goose.Provider) error {
	statuses, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("store: read migration status: %w", err)
	}
	var pending []int64
	for _, st := range statuses {
		if st.State == goose.StatePending {
			pending = append(pending, st.Source.Version)
		}
	}
	return notMigrated(pending)
}

// allMigrations is the error for a database with no migration table.
func allMigrations(m *goose.Provider) error {
	var versions []int64
	for _, src := range m.ListSources() {
		versions = append(versions, src.Version)
	}
	return notMigrated(versions)
}

// notMigrated names the pending versions, or returns nil for none.
func notMigrated(versions []int64) error {
	if len(versions) == 0 {
		return nil
	}
	const hint = `run "usher migrate"`
	if n := len(versions); n > 3 && versions[n-1]-versions[0] == int64(n-1) {
		// A run of versions, such as every one of a database never
		// migrated, by its ends.
		return fmt.Errorf("store: database schema is not up to date: %d migrations pending (%d to %d; %s)",
			n, versions[0], versions[n-1], hint)
	}
	names := make([]string, len(versions))
	for i, v := range versions {
		names[i] = strconv.FormatInt(v, 10)
	}
	noun := "migration"
	if len(versions) > 1 {
		noun = "migrations"
	}
	return fmt.Errorf("store: database schema is not up to date: %s %s pending (%s)",
		noun, strings.Join(names, ", "), hint)
}

// logApplied reports each migration Migrate applied.
func logApplied(log *slog.Logger, results []*goose.MigrationResult) {
	for _, r := range results {
		log.Info("store: applied migration",
			"version", r.Source.Version,
			"source", path.Base(r.Source.Path),
			"duration", r.Duration)
	}
}

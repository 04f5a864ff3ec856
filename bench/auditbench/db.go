package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// database is a schema of its own on the PostgreSQL server: one run's,
// or one that runs share (-schema).
type database struct {
	schema  string    // usher_auditbench_<random>, or -schema's
	kept    bool      // the schema is -schema's: kept after the run
	appName string    // the application_name of Usher's connections
	url     string    // the server's URL on the schema, with appName: Usher's database.url
	alone   string    // the same without appName: the SELECT alone's connection
	conn    *pgx.Conn // the benchmark's own connection, on the schema
}

// openDatabase creates the run's schema on the server of base: a new one,
// or, when schema is not empty, that one if it does not exist yet.
func openDatabase(ctx context.Context, base, schema string) (*database, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("the database URL must be a postgres:// URL")
	}
	var b [8]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	d := &database{schema: "usher_auditbench_" + suffix, appName: "usher-auditbench-" + suffix}
	create := "CREATE SCHEMA "
	if schema != "" {
		d.schema, d.kept, create = schema, true, "CREATE SCHEMA IF NOT EXISTS "
	}
	q := u.Query()
	q.Set("search_path", d.schema)
	u.RawQuery = q.Encode()
	d.alone = u.String()
	q.Set("application_name", d.appName)
	u.RawQuery = q.Encode()
	d.url = u.String()

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.conn, err = pgx.Connect(cctx, base); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := d.conn.Exec(cctx, create+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		d.conn.Close(ctx)
		return nil, fmt.Errorf("create the benchmark's schema: %w", err)
	}
	if _, err := d.conn.Exec(cctx, "SET search_path TO "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		d.close(ctx) //nolint:errcheck // it failed already
		return nil, err
	}
	return d, nil
}

// close drops the run's schema, unless it is kept.
func (d *database) close(ctx context.Context) error {
	defer d.conn.Close(ctx)
	if d.kept {
		return nil
	}
	_, err := d.conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
	return err
}

// serverVersion is the server's version, as SHOW server_version says.
func (d *database) serverVersion(ctx context.Context) (string, error) {
	var v string
	err := d.conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}

// usherStatements are the last statements of Usher's backends, as
// pg_stat_activity shows them.
func (d *database) usherStatements(ctx context.Context) ([]string, error) {
	rows, err := d.conn.Query(ctx, "SELECT query FROM pg_stat_activity WHERE application_name = $1", d.appName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// The filled log's record of a kept schema: how many records, and the
// address Usher served on, whose issuer the principal ids hold.
const (
	filledTable  = "auditbench_filled"
	createFilled = `CREATE TABLE IF NOT EXISTS ` + filledTable + ` (records bigint NOT NULL, addr text NOT NULL)`
)

// filled is the address a kept schema's log was filled for with records
// records, or "" when it holds no such log (a new schema, or one filled
// with another number of records).
func (d *database) filled(ctx context.Context, records int) (string, error) {
	if !d.kept {
		return "", nil
	}
	if _, err := d.conn.Exec(ctx, createFilled); err != nil {
		return "", err
	}
	var addr string
	err := d.conn.QueryRow(ctx, `SELECT addr FROM `+filledTable+` WHERE records = $1`, records).Scan(&addr)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	return addr, err
}

// markFilled records, in a kept schema, that its log holds records
// records filled for Usher at addr.
func (d *database) markFilled(ctx context.Context, records int, addr string) error {
	if !d.kept {
		return nil
	}
	if _, err := d.conn.Exec(ctx, `DELETE FROM `+filledTable); err != nil {
		return err
	}
	_, err := d.conn.Exec(ctx, `INSERT INTO `+filledTable+` (records, addr) VALUES ($1, $2)`, records, addr)
	return err
}

// emptyLog deletes every record of a kept schema's log before it is
// filled again.
func (d *database) emptyLog(ctx context.Context) error {
	if !d.kept {
		return nil
	}
	_, err := d.conn.Exec(ctx, `TRUNCATE audit_log`)
	return err
}

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

// benchDatabase is a schema of its own on the PostgreSQL server of
// TEST_DATABASE_URL, for one run, and the connection that watches Usher's
// backends in it.
type benchDatabase struct {
	base    string    // the server's URL as given
	schema  string    // usher_bench_<random>
	appName string    // the application_name of Usher's connections
	url     string    // Usher's database.url: base on the schema, with appName
	conn    *pgx.Conn // the benchmark's own connection, for pg_stat_activity
}

// openBenchDatabase creates the run's schema. Usher reaches the server at
// via when it is not empty (a relay's host:port), at base's host otherwise.
func openBenchDatabase(ctx context.Context, base, via string) (*benchDatabase, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("the database URL must be a postgres:// URL")
	}
	var b [8]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	d := &benchDatabase{base: base, schema: "usher_bench_" + suffix, appName: "usher-bench-" + suffix}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.conn, err = pgx.Connect(cctx, base); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := d.conn.Exec(cctx, "CREATE SCHEMA "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		d.conn.Close(ctx)
		return nil, fmt.Errorf("create the benchmark's schema: %w", err)
	}
	q := u.Query()
	q.Set("search_path", d.schema)
	q.Set("application_name", d.appName)
	u.RawQuery = q.Encode()
	if via != "" {
		u.Host = via
	}
	d.url = u.String()
	return d, nil
}

// close drops the run's schema.
func (d *benchDatabase) close(ctx context.Context) error {
	defer d.conn.Close(ctx)
	_, err := d.conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
	return err
}

// backendCPU returns the CPU time of each PostgreSQL backend serving
// Usher's connections, by process id, from pg_stat_activity and
// /proc/PID/stat: it needs the server on this machine, in sight of this
// process. It fails when a backend's CPU cannot be read.
func (d *benchDatabase) backendCPU(ctx context.Context) (map[int]time.Duration, error) {
	rows, err := d.conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", d.appName)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no backend has application_name %s", d.appName)
	}
	cpu := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		c, err := procCPU(int(pid))
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL backend %d: %w", pid, err)
		}
		cpu[int(pid)] = c
	}
	return cpu, nil
}

// roundTrip returns the median time of n `SELECT 1` round trips to the
// server of dsn reached at via (its host:port; empty: dsn's own).
func roundTrip(ctx context.Context, dsn, via string, n int) (time.Duration, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return 0, err
	}
	if via != "" {
		u.Host = via
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	return percentile(ds, 0.5), nil
}

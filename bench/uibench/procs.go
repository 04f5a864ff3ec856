package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/bench/child"
)

// startUsher starts `usher serve` with the configuration cfg on addr,
// its output appended to logPath, and waits until it says where it runs.
func startUsher(bin, cfg, addr, logPath string) (*child.Process, string, error) {
	return child.Start("usher", logPath, bin, child.UsherReady, "serve", "--config", cfg, "--addr", addr)
}

// freeAddr is a loopback address with a port free now: Usher is started
// on the same address twice (before and after the seeding), since the
// development sign-in's issuer, and so the person's id, includes it.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// benchSchema is a schema of its own on the PostgreSQL server of
// TEST_DATABASE_URL, for one run.
type benchSchema struct {
	name string
	url  string // the server's URL on the schema
	conn *pgx.Conn
}

func openBenchSchema(ctx context.Context, base string) (*benchSchema, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("the database URL must be a postgres:// URL")
	}
	var b [8]byte
	rand.Read(b[:])
	d := &benchSchema{name: "usher_uibench_" + hex.EncodeToString(b[:])}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.conn, err = pgx.Connect(cctx, base); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := d.conn.Exec(cctx, "CREATE SCHEMA "+pgx.Identifier{d.name}.Sanitize()); err != nil {
		d.conn.Close(ctx)
		return nil, fmt.Errorf("create the benchmark's schema: %w", err)
	}
	q := u.Query()
	q.Set("search_path", d.name)
	u.RawQuery = q.Encode()
	d.url = u.String()
	return d, nil
}

func (d *benchSchema) close(ctx context.Context) error {
	defer d.conn.Close(ctx)
	_, err := d.conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.name}.Sanitize()+" CASCADE")
	return err
}

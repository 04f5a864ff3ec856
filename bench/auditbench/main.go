// Command auditbench is the benchmark of a security reviewer's audit
// search: GET /api/audit with a filter on a log of 1,000,000 records on
// PostgreSQL (TEST_DATABASE_URL), through `usher serve` as a process of its
// own over loopback HTTP, signed in as a reviewer, against the same SELECT
// the store runs for it, executed alone from this process with pgx against
// the same database in the same run. The figure is the ratio of the two
// (goal: the API at most 2× the SELECT alone).
//
// It creates a schema of its own, migrates it with `usher migrate`, and
// fills the audit log with a valid hash chain (so that `usher audit
// verify` passes) by COPY: 8 kinds, 2,000 people of the reviewer's tenant
// and others of another tenant, 40 tools, 12 servers, 4 outcomes, one
// record a second. Then it starts `usher serve` with
// USHER_REVIEW_GROUPS=security and a token of `usher token user --sub
// rita --group security`.
//
// The SELECT is the store's own: after a request, the statement's text is
// read from pg_stat_activity (the last statement of Usher's backend that
// ran it), and its parameters bound as the API binds them; the rows it
// returns must be the records the API answered. Each query then runs in
// rounds, the API's request and the SELECT alone one after the other
// (which goes first alternating), and the report gives the p50 and p99 of
// each, their ratio, and the plan of the SELECT (EXPLAIN ANALYZE).
//
// Without TEST_DATABASE_URL (or -database) it prints why it skips and
// exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// options are the benchmark's flags.
type options struct {
	usher    string
	database string
	records  int
	rounds   int
	warmup   int
	keep     bool
	schema   string // a schema kept between runs, its log filled once
	verify   bool   // run usher audit verify on the filled log
	// profile is a file for a CPU profile of Usher over 10 s of
	// profileQuery's requests, after its rounds.
	profile, profileQuery string
}

func main() {
	var o options
	flag.StringVar(&o.usher, "usher", "bin/usher", "the usher binary")
	flag.StringVar(&o.database, "database", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL server URL (a schema of its own is created and dropped); empty: the benchmark skips")
	flag.IntVar(&o.records, "records", 1_000_000, "records in the audit log")
	flag.IntVar(&o.rounds, "rounds", 2000, "measured rounds of each query (one request to the API and one SELECT alone); p99 is the 20th slowest of 2,000")
	flag.IntVar(&o.warmup, "warmup", 30, "rounds of each query before anything is measured")
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile of Usher to this file: 10 s of -profile-query's requests after its rounds (through server.debug_addr)")
	flag.StringVar(&o.profileQuery, "profile-query", "principal", "the query -profile profiles: principal, tool or since-until")
	flag.BoolVar(&o.verify, "verify", false, "check the filled log with usher audit verify before the measurements")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configuration, Usher's log)")
	flag.StringVar(&o.schema, "schema", "", "a schema to keep between runs: filled by the first run (with -records records), measured again by the next ones on the same port, Usher's data directory kept beside it in the temporary directory; empty: a new schema, dropped at the end")
	flag.Parse()
	if o.database == "" {
		fmt.Println("auditbench: TEST_DATABASE_URL is not set: the audit API benchmark (PostgreSQL only) skips")
		return
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "auditbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	if o.records < 10_000 || o.rounds < 1 || o.warmup < 0 {
		return fmt.Errorf("-records must be at least 10000, -rounds positive, -warmup not negative")
	}
	switch o.profileQuery {
	case "principal", "tool", "since-until":
	default:
		return fmt.Errorf("-profile-query must be principal, tool or since-until, not %q", o.profileQuery)
	}
	dir, err := os.MkdirTemp("", "usher-auditbench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "work directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	r := report{records: o.records, rounds: o.rounds}
	r.loadStart = loadAverage()

	db, err := openDatabase(ctx, o.database, o.schema)
	if err != nil {
		return err
	}
	defer func() {
		if e := db.close(context.Background()); err == nil {
			err = e
		}
	}()
	if r.server, err = db.serverVersion(ctx); err != nil {
		return err
	}
	addr, err := db.filled(ctx, o.records)
	if err != nil {
		return err
	}
	// A kept schema's keys are sealed with the key in Usher's data
	// directory: it is kept with it.
	data := filepath.Join(dir, "data")
	if o.schema != "" {
		data = filepath.Join(os.TempDir(), "usher-auditbench-"+o.schema)
	}
	u, err := prepareUsher(ctx, o.usher, dir, data, addr, db)
	if err != nil {
		return err
	}

	if addr == "" {
		start := time.Now()
		if err := db.emptyLog(ctx); err != nil {
			return err
		}
		if err := fill(ctx, db, u.scope, o.records); err != nil {
			return err
		}
		r.fill = time.Since(start)
		if err := db.markFilled(ctx, o.records, u.addr); err != nil {
			return err
		}
	} else {
		r.refilled = db.schema
	}
	if o.verify {
		if r.verified, err = u.command(ctx, "audit", "verify"); err != nil {
			return err
		}
	}

	if err := u.start(); err != nil {
		return err
	}
	defer func() {
		if e := u.stop(); err == nil {
			err = e
		}
	}()
	if err := u.checkScope(ctx); err != nil {
		return err
	}

	for _, q := range queries(u.scope, o.records) {
		res, err := measure(ctx, o, u, db, q)
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		r.queries = append(r.queries, res)
	}
	if o.profile != "" {
		r.profile, r.profileQuery = o.profile, o.profileQuery
	}
	r.loadEnd = loadAverage()
	r.print(out)
	return nil
}

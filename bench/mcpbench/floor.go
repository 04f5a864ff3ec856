package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// commitFloor times a bare durable commit from Go against the run's
// PostgreSQL, reached as Usher reaches it (through the relay with
// -db-rtt): a one-row INSERT in autocommit — one round trip, one
// commit flushed to the WAL — on a fresh table in a schema of its own.
// With the proxy's added p50 it makes the floor under Usher's added p50:
// no gateway that keeps a durable record of each call before calling the
// upstream can take less than one more hop and one commit.
type commitFloor struct {
	db   *benchDatabase
	conn *pgx.Conn
	n    int64
	lat  []time.Duration
}

// openCommitFloor creates the floor's schema and table on the server of
// dsn and connects to it at via (a relay's host:port; empty: directly).
func openCommitFloor(ctx context.Context, dsn, via string) (f *commitFloor, err error) {
	f = &commitFloor{}
	if f.db, err = openBenchDatabase(ctx, dsn, via); err != nil {
		return nil, err
	}
	if f.conn, err = pgx.Connect(ctx, f.db.url); err != nil {
		f.db.close(ctx) //nolint:errcheck // reporting the connect's error
		return nil, fmt.Errorf("the commit floor's connection: %w", err)
	}
	if _, err = f.conn.Exec(ctx, "CREATE TABLE commit_floor (n bigint PRIMARY KEY, at timestamptz NOT NULL)"); err != nil {
		f.close(ctx) //nolint:errcheck // reporting the create's error
		return nil, fmt.Errorf("the commit floor's table: %w", err)
	}
	return f, nil
}

// commit inserts and commits one row; measured, it keeps the time.
func (f *commitFloor) commit(ctx context.Context, measured bool) error {
	f.n++
	start := time.Now()
	if _, err := f.conn.Exec(ctx, "INSERT INTO commit_floor (n, at) VALUES ($1, $2)", f.n, start); err != nil {
		return fmt.Errorf("the commit floor: %w", err)
	}
	if measured {
		f.lat = append(f.lat, time.Since(start))
	}
	return nil
}

// result is the commits' p50 and mean.
func (f *commitFloor) result() floorResult {
	var sum time.Duration
	for _, d := range f.lat {
		sum += d
	}
	r := floorResult{measured: len(f.lat) > 0, commits: len(f.lat), commitP50: percentile(f.lat, 0.5)}
	if r.measured {
		r.commitMean = sum / time.Duration(len(f.lat))
	}
	return r
}

// close drops the floor's schema.
func (f *commitFloor) close(ctx context.Context) error {
	f.conn.Close(ctx) //nolint:errcheck // the schema's drop says what matters
	return f.db.close(ctx)
}

// floorResult is what the run measured of the bare commit.
type floorResult struct {
	measured              bool
	commits               int
	commitP50, commitMean time.Duration
}

// floorRatios are Usher's figures set against the floor and the proxy:
// the added p50 over the proxy's added p50 plus a bare commit's p50; the
// record stage (its mean) over a bare commit's mean; calls/s and CPU per
// call at c=8 (Usher's, and Usher's with its PostgreSQL backends') over
// the proxy's.
type floorRatios struct {
	floor                  time.Duration
	addedToFloor           float64
	recordToCommit         float64
	callsToProxy           float64
	cpuToProxy, cpuPGProxy float64
}

// ratios sets r's figures against its floor; ok is false without the
// floor or the proxy.
func (r report) ratios() (floorRatios, bool) {
	if !r.floor.measured || !r.proxy {
		return floorRatios{}, false
	}
	f := floorRatios{floor: r.seqProxy.AddedP50 + r.floor.commitP50}
	f.addedToFloor = ratio(r.seq.AddedP50, f.floor)
	f.recordToCommit = ratio(r.seqStages.stages["record"], r.floor.commitMean)
	if p := r.c8Proxy.rate(); p > 0 {
		f.callsToProxy = r.c8Usher.rate() / p
	}
	f.cpuToProxy = ratio(r.c8Usher.cpu.usher, r.c8Proxy.cpu.proxy)
	f.cpuPGProxy = ratio(r.c8Usher.cpu.usher+r.c8Usher.cpu.pg, r.c8Proxy.cpu.proxy)
	return f, true
}

// printFloor writes Usher's figures against the floor, when the run had
// one.
func (r report) printFloor(w io.Writer) {
	f, ok := r.ratios()
	if !ok {
		return
	}
	fmt.Fprintf(w, "  the floor: a bare durable commit from Go (one-row INSERT, autocommit, %d sequential, one per round) p50 %s ms, mean %s ms; with the proxy's added p50, %s ms\n",
		r.floor.commits, msf(r.floor.commitP50), msf(r.floor.commitMean), msf(f.floor))
	fmt.Fprintf(w, "  Usher against the floor: added p50 %.2fx (proxy + commit);", f.addedToFloor)
	if f.recordToCommit > 0 {
		fmt.Fprintf(w, " record stage %.2fx a bare commit (means);", f.recordToCommit)
	}
	fmt.Fprintf(w, " at c=%d %.2fx the proxy's calls/s, CPU per call %.2fx the proxy's", r.concurrency, f.callsToProxy, f.cpuToProxy)
	if r.c8Usher.cpu.pgMeasured {
		fmt.Fprintf(w, " (%.2fx with its PostgreSQL backends')", f.cpuPGProxy)
	}
	fmt.Fprintln(w)
}

// printFloorKV writes the floor's key value lines, when the run had one.
func (r report) printFloorKV(kv func(string, any)) {
	f, ok := r.ratios()
	if !ok {
		return
	}
	kv("floor_commit_p50_ms", msf(r.floor.commitP50))
	kv("floor_commit_mean_ms", msf(r.floor.commitMean))
	kv("floor_ms", msf(f.floor))
	kv("added_p50_ratio_to_floor", fmt.Sprintf("%.2f", f.addedToFloor))
	if f.recordToCommit > 0 { // tools/call: the stages Usher times
		kv("record_ratio_to_commit", fmt.Sprintf("%.2f", f.recordToCommit))
	}
	if r.c8Usher.cpu.pgMeasured {
		kv("c_cpu_per_call_with_postgres_ratio_to_proxy", fmt.Sprintf("%.2f", f.cpuPGProxy))
	}
}

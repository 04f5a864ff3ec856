package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// link builds a record of kind on whatever head it is given.
func link(kind string) func(store.AuditHead) (store.AuditRecord, error) {
	return func(h store.AuditHead) (store.AuditRecord, error) {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s", h.Hash, h.Seq+1, kind))
		return store.AuditRecord{
			Seq: h.Seq + 1, PrevHash: h.Hash, Hash: hex.EncodeToString(sum[:]),
			At: time.Now().Truncate(time.Microsecond), Kind: kind,
		}, nil
	}
}

// openMigrated opens dsn as another process would.
func openMigrated(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// auditLog reads the whole log.
func auditLog(t *testing.T, s store.Store) []store.AuditRecord {
	t.Helper()
	records, err := s.AuditRecords(t.Context(), 0, 1000)
	if err != nil {
		t.Fatalf("AuditRecords: %v", err)
	}
	return records
}

// Two processes take turns appending, so that each one's knowledge of the
// head is out of date at every other append: every append lands, chained,
// and an execution started by an append that had to start over is started
// once.
func TestPostgresAuditAppendersTakeTurns(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	a, b := openMigrated(t, dsn), openMigrated(t, dsn)
	order := []store.Store{a, a, b, a, b, b, a, a, b, a}
	for i, s := range order {
		kind := fmt.Sprintf("k%d", i)
		if i%3 != 2 {
			if _, err := s.AppendAudit(t.Context(), link(kind)); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			continue
		}
		e := store.Execution{IdempotencyKey: fmt.Sprintf("run-1/call-%d", i), Principal: "alice", Tool: "notes_write", ArgumentsHash: "args"}
		got, started, err := s.BeginExecutionAudited(t.Context(), e, link(kind))
		if err != nil || !started || got.Status != store.ExecutionStarted {
			t.Fatalf("begin %d = %+v, started %v, %v; want started", i, got, started, err)
		}
		if _, err := s.FinishExecutionAudited(t.Context(), store.FinishExecutionParams{IdempotencyKey: e.IdempotencyKey, Status: store.ExecutionSucceeded, Now: time.Now()}, link(kind+"_done")); err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
	}
	checkChain(t, auditLog(t, a), len(order)+3) // three executions, each with a finish
}

// A process that knows the head does not read it again: if the newest
// records are deleted, its next record follows the last one it saw, and the
// gap stays for the verifier to find rather than being chained over.
func TestPostgresAuditKeepsAGapAtTheHead(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	a := openMigrated(t, dsn)
	for i := range 3 {
		if _, err := a.AppendAudit(t.Context(), link(fmt.Sprintf("k%d", i))); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), `DELETE FROM audit_log WHERE seq = 3`); err != nil {
		t.Fatalf("delete: %v", err)
	}
	r, err := a.AppendAudit(t.Context(), link("after"))
	if err != nil {
		t.Fatalf("append after the deletion: %v", err)
	}
	if r.Seq != 4 {
		t.Errorf("the append after the deletion has seq %d, want 4: the gap at 3 must stay", r.Seq)
	}
	var seqs []int64
	for _, r := range auditLog(t, a) {
		seqs = append(seqs, r.Seq)
	}
	if !slices.Equal(seqs, []int64{1, 2, 4}) {
		t.Errorf("the log holds %v, want [1 2 4]", seqs)
	}
}

// BenchmarkPostgresAuditAppend measures appends to the audit log on
// PostgreSQL (with fsync, as configured): one process appending alone (it
// knows the head: one round trip each) against two processes taking turns,
// as busy replicas do (the head has always moved), in the same run, one
// round of each at a time. It reports the p50 of each and their ratio.
func BenchmarkPostgresAuditAppend(b *testing.B) {
	dsn := storetest.PostgresURL(b)
	open := func() store.Store {
		s, err := store.Open(b.Context(), dsn, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		if err := s.Migrate(b.Context()); err != nil {
			b.Fatal(err)
		}
		return s
	}
	a, other := open(), open()
	appendOne := func(s store.Store) time.Duration {
		start := time.Now()
		if _, err := s.AppendAudit(b.Context(), link("bench")); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	const round = 10
	var alone, turns []time.Duration
	for b.Loop() {
		for range round {
			alone = append(alone, appendOne(a))
		}
		for range round / 2 {
			turns = append(turns, appendOne(other), appendOne(a))
		}
	}
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	al, tu := p50(alone), p50(turns)
	b.ReportMetric(float64(al.Microseconds()), "alone-p50-µs")
	b.ReportMetric(float64(tu.Microseconds()), "taking-turns-p50-µs")
	b.ReportMetric(float64(tu)/float64(al), "turns/alone")
	b.ReportMetric(0, "ns/op")
}

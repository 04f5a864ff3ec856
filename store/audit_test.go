package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
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

// A process that knows the head does not chain over a truncated tail: if
// the newest records are deleted, its next record follows the last one it
// saw, and the gap stays for the verifier to find rather than being
// chained over — written at the head it knows, or, after a collision,
// linked to the head by the database (which takes the newest head the
// process knew when the log's is older).
func TestPostgresAuditKeepsAGapAtTheHead(t *testing.T) {
	for name, c := range map[string]struct {
		build func(kind string) func(store.AuditHead) (store.AuditRecord, error)
		skip  int
	}{
		"at the known head":      {link, 0},
		"linked by the database": {linked, 1},
	} {
		t.Run(name, func(t *testing.T) {
			dsn := storetest.PostgresURL(t)
			a := openMigrated(t, dsn)
			for i := range 3 {
				if _, err := a.AppendAudit(t.Context(), c.build(fmt.Sprintf("k%d", i))); err != nil {
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
			store.SkipKnownAuditHead(a, c.skip)
			r, err := a.AppendAudit(t.Context(), c.build("after"))
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
		})
	}
}

// BenchmarkPostgresAuditAppend measures appends to the audit log on
// PostgreSQL (with fsync, as configured): one process appending alone (it
// knows the head: one round trip each) against two processes taking turns,
// as busy replicas do (the head has always moved), in the same run, one
// round of each at a time: with records that only their builder can hash,
// and with records that have Links, as audit.Log's do (the database links
// them to the head). It reports the p50 of each and their ratios.
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
	appendOne := func(s store.Store, build func(store.AuditHead) (store.AuditRecord, error)) time.Duration {
		start := time.Now()
		if _, err := s.AppendAudit(b.Context(), build); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	const round = 10
	var alone, turns, linkedTurns []time.Duration
	for b.Loop() {
		for range round {
			alone = append(alone, appendOne(a, link("bench")))
		}
		for range round / 2 {
			turns = append(turns, appendOne(other, link("bench")), appendOne(a, link("bench")))
		}
		for range round / 2 {
			linkedTurns = append(linkedTurns, appendOne(other, linked("bench")), appendOne(a, linked("bench")))
		}
	}
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	al, tu, lt := p50(alone), p50(turns), p50(linkedTurns)
	b.ReportMetric(float64(al.Microseconds()), "alone-p50-µs")
	b.ReportMetric(float64(tu.Microseconds()), "taking-turns-p50-µs")
	b.ReportMetric(float64(tu)/float64(al), "turns/alone")
	b.ReportMetric(float64(lt)/float64(al), "linked-turns/alone")
	b.ReportMetric(0, "ns/op")
}

// linked returns the builder of a record of kind with a Link, as
// audit.Log's builders make them: its hash is over the head's hash, the
// Link's Before, the Seq in decimal and the Link's After.
func linked(kind string) func(store.AuditHead) (store.AuditRecord, error) {
	l := &store.AuditLink{Before: []byte(`{"kind":"` + kind + `","seq":`), After: []byte(`}`)}
	return func(h store.AuditHead) (store.AuditRecord, error) {
		return store.AuditRecord{
			Seq: h.Seq + 1, PrevHash: h.Hash, Hash: linkedHash(h.Hash, l, h.Seq+1),
			At: time.Now().Truncate(time.Microsecond), Kind: kind, Link: l,
		}, nil
	}
}

// linkedHash is the hash a record of link, seq and prevHash has.
func linkedHash(prevHash string, l *store.AuditLink, seq int64) string {
	sum := sha256.Sum256(slices.Concat([]byte(prevHash), l.Before, []byte(strconv.FormatInt(seq, 10)), l.After))
	return hex.EncodeToString(sum[:])
}

// Two processes taking turns append records with Links (as audit.Log's
// are): each write that does not know the head, or finds it moved, is
// linked to the head by the database, in one round trip, and the log is one
// chain whose every hash is the one its Link gives.
func TestPostgresAuditLinkedAppendersTakeTurns(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	a, b := openMigrated(t, dsn), openMigrated(t, dsn)
	var kinds []string
	for i := range 12 {
		s := a
		if i%2 == 1 {
			s = b
		}
		kind := fmt.Sprintf("k%d", i)
		kinds = append(kinds, kind)
		var r store.AuditRecord
		var err error
		if i%3 != 2 {
			r, err = s.AppendAudit(t.Context(), linked(kind))
		} else {
			e := store.Execution{IdempotencyKey: fmt.Sprintf("run-1/call-%d", i), Principal: "alice", Tool: "notes_write", ArgumentsHash: "args"}
			var started bool
			_, started, err = s.BeginExecutionAudited(t.Context(), e, linked(kind))
			if err == nil && !started {
				t.Fatalf("execution %d not started", i)
			}
			r.Seq = int64(i + 1)
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if r.Seq != int64(i+1) {
			t.Errorf("append %d answered seq %d, want %d", i, r.Seq, i+1)
		}
	}
	records := auditLog(t, a)
	checkChain(t, records, len(kinds))
	for i, r := range records {
		l := &store.AuditLink{Before: []byte(`{"kind":"` + kinds[i] + `","seq":`), After: []byte(`}`)}
		if want := linkedHash(r.PrevHash, l, r.Seq); r.Hash != want || r.Kind != kinds[i] {
			t.Errorf("record %d: %s %s, want %s %s", r.Seq, r.Kind, r.Hash, kinds[i], want)
		}
		if r.Link != nil {
			t.Errorf("record %d read back with a Link", r.Seq)
		}
	}
}

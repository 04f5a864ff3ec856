package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// waitQueued waits until n audit appends of s are queued.
func waitQueued(t *testing.T, s store.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for store.QueuedAudit(s) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d audit appends queued, want %d", store.QueuedAudit(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// auditTx returns the id of the transaction that wrote each record, by seq.
func auditTx(t *testing.T, dsn string) map[int64]uint32 {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `SELECT seq, xmin::text::bigint FROM audit_log`)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	out := map[int64]uint32{}
	for rows.Next() {
		var seq, xmin int64
		if err := rows.Scan(&seq, &xmin); err != nil {
			t.Fatalf("scan: %v", err)
		}
		out[seq] = uint32(xmin)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	return out
}

// checkChain fails unless the log is seq 1..n, each record after the one
// before it.
func checkChain(t *testing.T, records []store.AuditRecord, n int) {
	t.Helper()
	if len(records) != n {
		t.Fatalf("the log has %d records, want %d", len(records), n)
	}
	prev := ""
	for i, r := range records {
		if r.Seq != int64(i+1) || r.PrevHash != prev {
			t.Fatalf("record %d is seq %d after %q, want seq %d after %q", i, r.Seq, r.PrevHash, i+1, prev)
		}
		prev = r.Hash
	}
}

// beginExecution starts an execution with its audit record.
func beginExecution(t *testing.T, s store.Store) store.Execution {
	t.Helper()
	e := store.Execution{IdempotencyKey: "run-1/call-1", Principal: "alice", Tool: "notes_write", ArgumentsHash: "args"}
	if _, started, err := s.BeginExecutionAudited(t.Context(), e, link("decision")); err != nil || !started {
		t.Fatalf("begin: started %v, %v", started, err)
	}
	return e
}

// finishExecution finishes e with its audit record in the background and
// returns where its error arrives.
func finishExecution(ctx context.Context, s store.Store, e store.Execution) <-chan error {
	finished := make(chan error, 1)
	go func() {
		_, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: e.IdempotencyKey, Status: store.ExecutionSucceeded, Now: time.Now()}, link("executed"))
		finished <- err
	}()
	return finished
}

// How a tool call ended (a lazy append) waits for the next append that a
// caller waits for, and is written in its transaction, before it.
func TestPostgresAuditLazyAppendRidesAlong(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := openMigrated(t, dsn)
	store.SetAuditLinger(s, time.Hour)
	e := beginExecution(t, s)
	finished := finishExecution(context.Background(), s, e)
	waitQueued(t, s, 1)
	select {
	case err := <-finished:
		t.Fatalf("the finish was written alone (%v), before its linger", err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := s.AppendAudit(t.Context(), link("decision")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("finish: %v", err)
	}
	records := auditLog(t, s)
	checkChain(t, records, 3)
	if records[1].Kind != "executed" || records[2].Kind != "decision" {
		t.Errorf("the log holds %s, %s after the first record; want executed, decision", records[1].Kind, records[2].Kind)
	}
	if tx := auditTx(t, dsn); tx[2] != tx[3] || tx[1] == tx[2] {
		t.Errorf("records written by transactions %v; want 2 and 3 in one, 1 in another", tx)
	}
	if got, err := s.GetExecution(t.Context(), e.IdempotencyKey); err != nil || got.Status != store.ExecutionSucceeded {
		t.Errorf("execution = %+v, %v; want succeeded", got, err)
	}
}

// How a tool call ended, marked WriteNow (no other call is in progress to
// carry it), is written at once, however long the linger.
func TestPostgresAuditFinishWriteNow(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := openMigrated(t, dsn)
	store.SetAuditLinger(s, time.Hour)
	e := beginExecution(t, s)
	finished := finishExecution(store.WriteNow(context.Background()), s, e)
	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("finish: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the finish marked WriteNow is still waiting for a carrier")
	}
	records := auditLog(t, s)
	checkChain(t, records, 2)
	if got, err := s.GetExecution(t.Context(), e.IdempotencyKey); err != nil || got.Status != store.ExecutionSucceeded {
		t.Errorf("execution = %+v, %v; want succeeded", got, err)
	}
	if store.WritesNow(t.Context()) || !store.WritesNow(store.WriteNow(t.Context())) {
		t.Error("WritesNow does not report WriteNow's mark")
	}
}

// A lazy append that nothing carries is written on its own once its
// linger has passed.
func TestPostgresAuditLazyAppendAlone(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := openMigrated(t, dsn)
	store.SetAuditLinger(s, 30*time.Millisecond)
	start := time.Now()
	if _, err := store.AppendAuditAfter(t.Context(), s, "SELECT 1", nil, link("executed"), true); err != nil {
		t.Fatalf("append: %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("the lazy append returned after %v, before its linger of 30ms", d)
	}
	checkChain(t, auditLog(t, s), 1)
}

// Appends queued while none is written go in one transaction; when it
// fails, each is written again alone, so that only the one that failed
// fails, whichever way the head is known.
func TestPostgresAuditBatchFailure(t *testing.T) {
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("head known %v", known), func(t *testing.T) {
			s := queueingStore(t, known)
			const lazies = 20
			bad := lazies / 2
			errs := make([]error, lazies)
			var wg sync.WaitGroup
			for i := range lazies {
				stmt := "SELECT 1"
				if i == bad {
					stmt = "SELECT 1/0"
				}
				wg.Go(func() {
					_, errs[i] = store.AppendAuditAfter(context.Background(), s, stmt, nil, link(fmt.Sprintf("lazy%d", i)), true)
				})
				waitQueued(t, s, i+1)
			}
			if _, err := s.AppendAudit(t.Context(), link("urgent")); err != nil {
				t.Fatalf("urgent append: %v", err)
			}
			wg.Wait()
			for i, err := range errs {
				if (i == bad) != (err != nil) {
					t.Errorf("lazy append %d: %v", i, err)
				}
			}
			checkChain(t, auditLog(t, s), len(errs)+btoi(known))
		})
	}
}

// An append whose build fails is left out of its transaction, and what its
// step wrote is not committed; the others are written.
func TestPostgresAuditBatchBuildFailure(t *testing.T) {
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("head known %v", known), func(t *testing.T) {
			s := queueingStore(t, known)
			insert := `INSERT INTO tool_executions (idempotency_key, principal, tool, arguments_hash, status, started_at)
VALUES ($1, 'alice', 'notes_write', 'args', 'started', now())`
			errBuild := errors.New("no record")
			failing := func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
			results := make(chan error, 2)
			for i, build := range []func(store.AuditHead) (store.AuditRecord, error){link("lazy"), failing} {
				go func() {
					_, err := store.AppendAuditAfter(context.Background(), s, insert, []any{fmt.Sprintf("key-%d", i)}, build, true)
					results <- err
				}()
				waitQueued(t, s, i+1)
			}
			if _, err := s.AppendAudit(t.Context(), link("urgent")); err != nil {
				t.Fatalf("urgent append: %v", err)
			}
			var failed int
			for range 2 {
				if err := <-results; errors.Is(err, errBuild) {
					failed++
				} else if err != nil {
					t.Errorf("append: %v", err)
				}
			}
			if failed != 1 {
				t.Errorf("%d appends failed with the build's error, want 1", failed)
			}
			checkChain(t, auditLog(t, s), 2+btoi(known))
			if _, err := s.GetExecution(t.Context(), "key-0"); err != nil {
				t.Errorf("the written append's step: %v", err)
			}
			if _, err := s.GetExecution(t.Context(), "key-1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the failed append's step was committed: %v", err)
			}
		})
	}
}

// An append whose caller gives up while it is queued is withdrawn.
func TestPostgresAuditQueuedAppendWithdrawn(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := openMigrated(t, dsn)
	store.SetAuditLinger(s, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := store.AppendAuditAfter(ctx, s, "SELECT 1", nil, link("withdrawn"), true)
		done <- err
	}()
	waitQueued(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("append = %v, want context.Canceled", err)
	}
	waitQueued(t, s, 0)
	if _, err := s.AppendAudit(t.Context(), link("kept")); err != nil {
		t.Fatalf("append: %v", err)
	}
	records := auditLog(t, s)
	checkChain(t, records, 1)
	if records[0].Kind != "kept" {
		t.Errorf("the log holds %q, want only kept", records[0].Kind)
	}
}

// Many appenders at once, of both kinds and in two processes: every record
// is written once, in one gapless chain.
func TestPostgresAuditConcurrentAppends(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	a, b := openMigrated(t, dsn), openMigrated(t, dsn)
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		s := []store.Store{a, b}[i%2]
		wg.Go(func() {
			kind := fmt.Sprintf("k%d", i)
			var err error
			if i%3 == 0 {
				_, err = store.AppendAuditAfter(t.Context(), s, "SELECT 1", nil, link(kind), true)
			} else {
				_, err = s.AppendAudit(t.Context(), link(kind))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("append: %v", err)
		}
	}
	records := auditLog(t, a)
	checkChain(t, records, n)
	seen := map[string]bool{}
	for _, r := range records {
		if seen[r.Kind] {
			t.Errorf("%s written twice", r.Kind)
		}
		seen[r.Kind] = true
	}
	tx := map[uint32]bool{}
	for _, x := range auditTx(t, dsn) {
		tx[x] = true
	}
	t.Logf("%d records in %d transactions", n, len(tx))
}

// queueingStore returns a PostgreSQL store whose lazy appends wait for
// another append, that knows the head (it has appended one record) or not.
func queueingStore(t *testing.T, knowsHead bool) store.Store {
	t.Helper()
	s := openMigrated(t, storetest.PostgresURL(t))
	if knowsHead {
		if _, err := s.AppendAudit(t.Context(), link("first")); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	store.SetAuditLinger(s, time.Hour)
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

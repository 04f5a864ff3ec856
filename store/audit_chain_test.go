package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// holdInserts makes the database hold each INSERT of an audit record of
// a few kinds after the write has taken the audit lock (its steps run
// before it): "slow" for 0.3 s, "failing" for 0.3 s and then an error,
// "stuck" for a minute. A write so held is under way long enough for the
// next to be chained on it and to wait for the lock behind it.
func holdInserts(t *testing.T, s store.Store) {
	t.Helper()
	for _, stmt := range []string{`CREATE FUNCTION hold_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	CASE NEW.kind
	WHEN 'slow' THEN PERFORM pg_sleep(0.3);
	WHEN 'failing' THEN PERFORM pg_sleep(0.3); RAISE EXCEPTION 'failing on purpose';
	WHEN 'stuck' THEN PERFORM pg_sleep(60);
	ELSE NULL;
	END CASE;
	RETURN NEW;
END $$`, `CREATE TRIGGER hold_audit BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION hold_audit()`} {
		if err := store.ExecRaw(t.Context(), s, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// startAhead starts an append of kind after the step stmt in the
// background, one that no one waits to be answered (as how a call ended),
// waits until its write is the chain's ahead, and returns where its error
// arrives.
func startAhead(t *testing.T, s store.Store, stmt, kind string) <-chan error {
	t.Helper()
	return runAhead(t, s, func() error {
		_, err := store.AppendEndAfter(context.Background(), s, stmt, link(kind))
		return err
	})
}

// runAhead runs appendFn in the background, waits until the write it
// starts is the chain's ahead, and returns where its error arrives.
func runAhead(t *testing.T, s store.Store, appendFn func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- appendFn() }()
	deadline := time.Now().Add(10 * time.Second)
	for !store.AuditAhead(s) {
		if time.Now().After(deadline) {
			t.Fatal("the first write never became the chain's ahead")
		}
		time.Sleep(time.Millisecond)
	}
	return done
}

// waitForBackend connects to dsn and waits until a backend waits for
// event (pg_stat_activity.wait_event), returning the connection.
func waitForBackend(t *testing.T, dsn, event string) *pgx.Conn {
	t.Helper()
	return waitForActivity(t, dsn, nil, `wait_event = $1`, event)
}

// waitForActivity connects to dsn and waits, at most 10 s, until a backend
// of pg_stat_activity matches where (with args), returning the
// connection; check, unless nil, runs before each look and may fail the
// test.
func waitForActivity(t *testing.T, dsn string, check func(), where string, args ...any) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if check != nil {
			check()
		}
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE `+where, args...).Scan(&n); err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if n > 0 {
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend of pg_stat_activity matched %s %v", where, args)
		}
		time.Sleep(time.Millisecond)
	}
}

// knownHeadStore returns a PostgreSQL store that knows the audit log's
// head (it has appended the first record), whose inserts are held as
// holdInserts says.
func knownHeadStore(t *testing.T, dsn string) store.Store {
	t.Helper()
	s := openMigrated(t, dsn)
	holdInserts(t, s)
	appendLink(t, s, "first")
	return s
}

// kinds returns the kinds of records, in order.
func kinds(records []store.AuditRecord) string {
	var k []string
	for _, r := range records {
		k = append(k, r.Kind)
	}
	return strings.Join(k, ",")
}

// appendLink appends the record named name to s, failing t if it cannot.
func appendLink(t *testing.T, s store.Store, name string) {
	t.Helper()
	if _, err := s.AppendAudit(t.Context(), link(name)); err != nil {
		t.Fatalf("append %s: %v", name, err)
	}
}

// checkLog fails unless the log of s is one gapless chain of records of
// the kinds want lists, in order (comma-separated).
func checkLog(t *testing.T, s store.Store, want string) {
	t.Helper()
	records := auditLog(t, s)
	checkChain(t, records, strings.Count(want, ",")+1)
	if got := kinds(records); got != want {
		t.Errorf("the log holds %s, want %s", got, want)
	}
}

// checkChained fails unless s chained writes writes times and wrote
// retries of them again.
func checkChained(t *testing.T, s store.Store, writes, retries int) {
	t.Helper()
	if w, r := store.ChainedAudit(s); w != writes || r != retries {
		t.Errorf("%d writes chained, %d of them written again; want %d and %d", w, r, writes, retries)
	}
}

// An append that comes while a write is under way is sent at once,
// chained on that write's records, in a transaction of its own, and
// commits after it.
func TestPostgresAuditChainedWrite(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := knownHeadStore(t, dsn)
	first := startAhead(t, s, "SELECT 1", "slow")
	waitForBackend(t, dsn, "PgSleep") // the lock held (see TestPostgresAuditChainedOnWriteNowAppend)
	appendLink(t, s, "chained")
	if err := <-first; err != nil {
		t.Fatalf("slow append: %v", err)
	}
	checkChained(t, s, 1, 0)
	checkLog(t, s, "first,slow,chained")
	if tx := auditTx(t, dsn); tx[2] == tx[3] {
		t.Errorf("records written by transactions %v; want 2 and 3 in two", tx)
	}
	// The next write goes on from the chained one's records.
	appendLink(t, s, "after")
	checkChain(t, auditLog(t, s), 4)
}

// A write chained on one that rolls back does not commit its records
// after the ones that never were (a gap in the chain): the check under
// the audit lock rolls it back too, and its appends are written again on
// the log's head. Without the check the chain would be 1, 3.
func TestPostgresAuditChainedOnRolledBackWrite(t *testing.T) {
	s := knownHeadStore(t, storetest.PostgresURL(t))
	first := startAhead(t, s, "SELECT 1", "failing")
	appendLink(t, s, "chained")
	if err := <-first; err == nil {
		t.Fatal("the failing append succeeded")
	}
	checkChained(t, s, 1, 1)
	checkLog(t, s, "first,chained")
}

// A write chained on one that another process's record overtook (the
// first write's INSERT collides, and it writes again after that record)
// does not link its records to the first write's void ones: the check
// rolls it back, and its appends are written after the others.
func TestPostgresAuditChainedAfterAnotherProcess(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	a := knownHeadStore(t, dsn)
	b := openMigrated(t, dsn)
	if _, err := b.AppendAudit(t.Context(), link("other")); err != nil {
		t.Fatalf("the other process's append: %v", err)
	}
	first := startAhead(t, a, "SELECT 1", "slow")
	if _, err := a.AppendAudit(t.Context(), link("chained")); err != nil {
		t.Fatalf("chained append: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("slow append: %v", err)
	}
	checkChained(t, a, 1, 1)
	checkLog(t, a, "first,other,slow,chained")
}

// A chained write whose own step fails is written again alone, as any
// write is, and only its append gets the error.
func TestPostgresAuditChainedWriteFails(t *testing.T) {
	s := knownHeadStore(t, storetest.PostgresURL(t))
	first := startAhead(t, s, "SELECT 1", "slow")
	_, err := store.AppendAuditAfter(t.Context(), s, "SELECT 1 / (random() * 0)::int", nil, link("failing"), false)
	if err == nil {
		t.Fatal("the failing chained append succeeded")
	}
	if err := <-first; err != nil {
		t.Fatalf("slow append: %v", err)
	}
	checkChained(t, s, 1, 1)
	checkLog(t, s, "first,slow")
}

// The write ahead commits but its commit is never acknowledged: its
// append gets the error (its caller must read back what it wrote), and
// the write chained on it, whose check finds the head it was chained on,
// commits.
func TestPostgresAuditChainedOnUnacknowledgedCommit(t *testing.T) {
	cutter, s := openBehindAckCutter(t)
	holdInserts(t, s)
	appendLink(t, s, "first")
	// The slow write's commit is the one cut, not the chained write's,
	// which its connection may report at the same moment.
	marker := []byte("slow")
	cutter.marker.Store(&marker)
	cutter.armed.Store(true)
	first := startAhead(t, s, "SELECT 1", "slow")
	waitForBackend(t, testenv.DatabaseURL(t), "PgSleep") // the lock held (see TestPostgresAuditChainedOnWriteNowAppend)
	appendLink(t, s, "chained")
	if err := <-first; err == nil {
		t.Error("the slow append succeeded although its commit was never acknowledged")
	}
	if cutter.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d acknowledgements, want 1: the fault was not injected", cutter.cut.Load())
	}
	checkChained(t, s, 1, 0)
	checkLog(t, s, "first,slow,chained")
	appendLink(t, s, "after")
	checkChain(t, auditLog(t, s), 4)
}

// The write ahead's connection is terminated by the server before it
// commits: its append gets the error, and the write chained on it rolls
// back at its check and is written again on the head.
func TestPostgresAuditChainedOnTerminatedWrite(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := knownHeadStore(t, dsn)
	first := startAhead(t, s, "SELECT 1", "stuck")
	chained := make(chan error, 1)
	go func() {
		_, err := s.AppendAudit(context.Background(), link("chained"))
		chained <- err
	}()
	// Once the chained write waits for the audit lock, the stuck one is
	// ended.
	conn := waitForBackend(t, dsn, "advisory")
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'PgSleep'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d backends, %v; want 1", n, err)
	}
	if err := <-first; err == nil {
		t.Error("the terminated append succeeded")
	}
	if err := <-chained; err != nil {
		t.Fatalf("chained append: %v", err)
	}
	checkChained(t, s, 1, 1)
	checkLog(t, s, "first,chained")
}

// A write chained on one whose steps are still running (they come before
// the audit lock) may take the lock first. Its check then finds the head
// it was chained on not yet there, and it rolls back and is written again
// after the write ahead: the log's order is the order the writes began.
func TestPostgresAuditChainedWriteOvertakes(t *testing.T) {
	s := knownHeadStore(t, storetest.PostgresURL(t))
	first := startAhead(t, s, "SELECT pg_sleep(0.3)", "steps")
	appendLink(t, s, "chained")
	if err := <-first; err != nil {
		t.Fatalf("append: %v", err)
	}
	checkChained(t, s, 1, 1)
	checkLog(t, s, "first,steps,chained")
}

// Only a write of how calls ended while no other call was in progress is
// chained on: not one of a call's start, nor one of how calls ended
// while others were in progress (lazy appends, here written alone once
// their linger is over). What comes meanwhile waits and goes in the next
// write.
func TestPostgresAuditNoChainOnOtherWrites(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("lazy %v", lazy), func(t *testing.T) {
			dsn := storetest.PostgresURL(t)
			s := knownHeadStore(t, dsn)
			store.SetAuditLinger(s, 10*time.Millisecond)
			first := make(chan error, 1)
			go func() {
				_, err := store.AppendAuditAfter(context.Background(), s, "SELECT 1", nil, link("slow"), lazy)
				first <- err
			}()
			waitForBackend(t, dsn, "PgSleep") // the first write at its INSERT
			if store.AuditAhead(s) {
				t.Error("the write under way is the chain's ahead")
			}
			appendLink(t, s, "second")
			if err := <-first; err != nil {
				t.Fatalf("slow append: %v", err)
			}
			checkChained(t, s, 0, 0)
			checkLog(t, s, "first,slow,second")
		})
	}
}

// A record appended alone with WriteNow (how a resource read, a prompt or
// a call without an idempotency key ended, with no other call in
// progress) is chained on as an execution's finish is.
func TestPostgresAuditChainedOnWriteNowAppend(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := knownHeadStore(t, dsn)
	first := runAhead(t, s, func() error {
		_, err := s.AppendAudit(store.WriteNow(context.Background()), link("slow"))
		return err
	})
	// Sent is not yet locked: on a busy machine the next write's batch,
	// on another connection, could take the audit lock first, find the
	// head short of the one it chained on, and be written again.
	waitForBackend(t, dsn, "PgSleep") // the first write at its INSERT, the lock held
	appendLink(t, s, "chained")
	if err := <-first; err != nil {
		t.Fatalf("slow append: %v", err)
	}
	checkChained(t, s, 1, 0)
	checkLog(t, s, "first,slow,chained")
}

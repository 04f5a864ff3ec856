package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func (s *postgresStore) AppendAudit(ctx context.Context, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	kind := appendAnswers
	if WritesNow(ctx) {
		kind = appendAlone // how a call ended (see WriteNow)
	}
	r, err := s.appendAudit(ctx, nil, build, kind)
	if err != nil {
		return AuditRecord{}, appendError(err, pgError)
	}
	return r, nil
}

// pgTxStep is work an audit append does in its transaction before it takes
// the audit lock: queue puts its statements in the batch before the lock,
// and read reads their results, in order. An error from read ends the
// transaction, rolled back, with that error; what the statements found
// (such as a key taken by another call) is the step's own to keep, and the
// record is appended all the same. A step may be run more than once, in
// different transactions: read must keep only what the last run found.
type pgTxStep struct {
	queue func(b *pgx.Batch)
	read  func(br pgx.BatchResults) error
}

// maxAuditBackoff bounds pgAuditChain.backoff.
const maxAuditBackoff = 64

// maxAuditAttempts is how many one-round-trip writes are tried before a
// write reads the head under the lock.
const maxAuditAttempts = 3

// writeAuditBatch appends the records of batch (which it calls build
// for, in order, each on the record before it), after their steps, in one
// transaction on one connection, as the write w, and finishes each append
// with its record or error. When the process knows the head (it wrote or
// read it last), that is one round trip: the steps' statements, the audit
// lock, a read of the head and the INSERTs chained to the head it knows,
// pipelined in one implicit transaction, once sent the chain's ahead (see
// pgAuditChain). If another process appended in between, the first INSERT
// collides with its record on the sequence and the transaction rolls
// back; the records are built again on the head read, and after a few
// collisions (or when the head is not known, or for a while after a
// collision: see pgAuditChain) it takes two round trips: BEGIN, the steps'
// statements, the lock and a read of the head; then the INSERTs and
// COMMIT.
//
// A known head is not replaced by the one read: if the newest records were
// deleted, the next record still follows the last one this process saw,
// and the gap stays for the verifier to report rather than being chained
// over.
//
// The lock is held from its statement to the commit, and no holder of it
// waits for anything but the database's own writes: the steps' statements,
// which may wait for row locks, run before it is taken.
//
// An append whose build fails gets the error wrapped in buildFailed and is
// left out. When a transaction of several appends is refused by the
// database (it rolled back), each is written again on its own, so that one
// append's failure is not another's: a record whose event id is already in
// the log rolls back the records chained after it, which are then written
// on the head without it, and is itself answered with the record there
// (see writeEachAlone). When it fails in a way that may have
// committed it (the connection lost, or ended by the server, before the
// commit was acknowledged), every append gets the error and none is
// written again: a second write would find the first one's rows and
// records, and report a start it made as someone else's (see rolledBack).
func (s *postgresStore) writeAuditBatch(ctx context.Context, w *pgAuditWrite, batch []*pgAuditAppend) {
	c := s.audit
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		finishAppends(batch, err)
		return
	}
	defer releaseAfterTx(ctx, conn)

	head, known := c.head, c.known && c.skip == 0
	var floor AuditHead // the newest head the process knows of, if any
	if c.known {
		floor = c.head
	}
	// The process's last write had Links: this one is likely to, and is
	// built to be linked by the database when it does not chain on the
	// head the process knows (a process that knows no head reads it).
	linkedBefore := c.known && c.linked
	c.skip = max(c.skip-1, 0)
	c.known = false // until a write succeeds
	for attempt := 0; known && attempt < maxAuditAttempts; attempt++ {
		if batch = buildAppends(batch, head); len(batch) == 0 {
			c.head, c.known = head, true
			return
		}
		seen, err := appendAtHead(ctx, conn, batch, func() { s.sent(ctx, w, batch) })
		if err == nil {
			c.head, c.known, c.linked = batch[len(batch)-1].head(), true, allLinked(batch)
			switch {
			case attempt > 0:
			case allLinked(batch):
				c.backoff /= 2
			default:
				c.backoff = 0
			}
			finishAppends(batch, nil)
			return
		}
		c.unsent(w)
		if !isAuditCollision(err) {
			s.writeEachAlone(ctx, w, batch, err)
			return
		}
		head, floor = seen, seen
		if allLinked(batch) {
			// The database links them to the head in one round trip, as
			// it does the next maxAuditBackoff writes'.
			c.backoff, c.skip = maxAuditBackoff, maxAuditBackoff
			break
		}
		c.backoff = min(max(2*c.backoff, 1), maxAuditBackoff)
		c.skip = c.backoff
	}
	switch linked, ok := batch, known && allLinked(batch); {
	case ok: // built at the head the process knew, which another overtook
		batch, err = appendLinked(ctx, conn, linked, floor)
	case linkedBefore:
		if linked, ok = buildLinked(batch, head); ok {
			batch, err = appendLinked(ctx, conn, linked, floor)
		} else {
			batch, err = appendAfterHead(ctx, conn, batch)
		}
	default:
		batch, err = appendAfterHead(ctx, conn, batch)
	}
	if err != nil {
		s.writeEachAlone(ctx, w, batch, err)
		return
	}
	if len(batch) > 0 {
		c.head, c.known, c.linked = batch[len(batch)-1].head(), true, allLinked(batch)
	}
	finishAppends(batch, nil)
}

// writeChained makes the write w, chained on the write w.after: its
// records are built on the head that write's records are to make, and
// sent while it is still under way, in one implicit transaction — the
// steps' statements, the audit lock, a check that the log's head is the
// one w was chained on (audit_head_is, which raises otherwise), and the
// INSERTs. The check is what makes this safe: if the write ahead rolled
// back, or another process's records came in between, w rolls back too
// instead of leaving a gap or a broken link. The write's appends are
// answered only once the write ahead has ended; when w rolled back, they
// are then written again as any write is (see writeAuditBatch), on what
// the write ahead left the process knowing of the head, and when w may
// have committed unacknowledged, they get its error.
func (s *postgresStore) writeChained(ctx context.Context, w *pgAuditWrite) {
	c := s.audit
	batch := buildAppends(w.batch, w.afterTail)
	if len(batch) == 0 {
		<-w.after.done
		return
	}
	err := s.appendChained(ctx, w, batch)
	<-w.after.done // the write ahead has ended: what it learned is ours
	if err == nil {
		c.head, c.known, c.linked = batch[len(batch)-1].head(), true, allLinked(batch)
		finishAppends(batch, nil)
		return
	}
	c.unsent(w)
	if rolledBack(err) {
		c.mu.Lock()
		c.chainedRetries++
		c.mu.Unlock()
		s.writeAuditBatch(ctx, w, batch)
		return
	}
	c.known = false
	finishAppends(batch, err)
}

// appendChained sends and reads the transaction of writeChained.
func (s *postgresStore) appendChained(ctx context.Context, w *pgAuditWrite, batch []*pgAuditAppend) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer releaseAfterTx(ctx, conn)
	b := &pgx.Batch{}
	queueSteps(b, batch)
	b.Queue(lockAudit.pg)
	b.Queue(auditHeadIs, w.afterTail.Seq, w.afterTail.Hash)
	queueInsertAudits(b, batch)
	br := conn.SendBatch(ctx, b)
	s.sent(ctx, w, batch)
	return readBatch(br, func(br pgx.BatchResults) error {
		if err := readSteps(br, batch); err != nil {
			return err
		}
		for range 3 { // the lock, the check, the INSERT
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	})
}

// auditHeadIs checks, under the audit lock, that the log's head is the
// record of the sequence and hash given, raising SQLSTATE UA001 otherwise
// (migration 00019).
const auditHeadIs = `SELECT audit_head_is($1, $2)`

// writeEachAlone finishes a batch whose transaction failed with err: a
// lone append with err, several each in a transaction of its own (each a
// part of the write w). A lone record refused because its event id is
// already in the log (a retry of an append that committed unacknowledged)
// is answered with the record there (see recordedEvent), unless it came
// with a step: the step's statements rolled back with it, and what they
// found is void, so that append gets the error.
func (s *postgresStore) writeEachAlone(ctx context.Context, w *pgAuditWrite, batch []*pgAuditAppend, err error) {
	if len(batch) == 1 && batch[0].step == nil && isDuplicateEvent(err) {
		a := batch[0]
		a.rec, a.err = s.recordedEvent(ctx, a.rec)
		close(a.done)
		return
	}
	if len(batch) == 1 || !rolledBack(err) {
		finishAppends(batch, err)
		return
	}
	for _, a := range batch {
		s.writeAuditBatch(ctx, w, []*pgAuditAppend{a})
	}
}

// buildAppends builds the records of batch, chained from head, and returns
// the appends whose build succeeded; the others are finished with their
// error.
func buildAppends(batch []*pgAuditAppend, head AuditHead) []*pgAuditAppend {
	kept := batch[:0:0]
	for _, a := range batch {
		r, link, err := builtLinkedRecord(a.build, head)
		if err != nil {
			finishAppends([]*pgAuditAppend{a}, err)
			continue
		}
		a.rec, a.link = r, link
		head = a.head()
		kept = append(kept, a)
	}
	return kept
}

// appendAtHead appends the built records of batch, chained to a head the
// process knows, in one round trip, calling sent once its statements are
// on their way, and returns the head it read under the lock. It fails,
// rolled back, with an error isAuditCollision knows if another record has
// the first one's sequence.
func appendAtHead(ctx context.Context, conn *pgxpool.Conn, batch []*pgAuditAppend, sent func()) (AuditHead, error) {
	// No BEGIN and COMMIT: the batch is one implicit transaction, which
	// commits at its end, or rolls back at the first error.
	b := &pgx.Batch{}
	queueSteps(b, batch)
	b.Queue(lockAudit.pg)
	b.Queue(auditHead.pg)
	queueInsertAudits(b, batch)
	var head AuditHead
	br := conn.SendBatch(ctx, b)
	sent()
	err := readBatch(br, func(br pgx.BatchResults) error {
		if err := readSteps(br, batch); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&head.Seq, &head.Hash); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err := br.Exec()
		return err
	})
	return head, err
}

// allLinked reports whether every record of batch, as last built, has a
// Link.
func allLinked(batch []*pgAuditAppend) bool {
	for _, a := range batch {
		if a.link == nil {
			return false
		}
	}
	return true
}

// buildLinked builds the records of batch to be linked to the log's head
// by the database (see appendLinked), on head as the process knows it, if
// every builder gives its record a Link (audit.Log's do): it returns the
// appends whose build succeeded, the others finished with their error.
// If one gives no Link it returns false, and has finished none.
func buildLinked(batch []*pgAuditAppend, head AuditHead) ([]*pgAuditAppend, bool) {
	type built struct {
		rec  AuditRecord
		link *AuditLink
		err  error
	}
	out := make([]built, len(batch))
	for i, a := range batch {
		b := &out[i]
		if b.rec, b.link, b.err = builtLinkedRecord(a.build, head); b.err == nil && b.link == nil {
			return nil, false
		}
		head = AuditHead{Seq: b.rec.Seq, Hash: b.rec.Hash}
	}
	kept := batch[:0:0]
	for i, a := range batch {
		if out[i].err != nil {
			finishAppends([]*pgAuditAppend{a}, out[i].err)
			continue
		}
		a.rec, a.link = out[i].rec, out[i].link
		kept = append(kept, a)
	}
	return kept, true
}

// appendLinked appends the records of batch, built with their Links, in
// one round trip, whatever the log's head: the steps' statements, the
// audit lock and an INSERT of each record that chains it on the head the
// database finds under the lock, or on floor (the newest head the process
// knows of) if the log's is older (insertLinkedAudit), in one implicit
// transaction. The database's seq, prev_hash and hash replace the ones
// the records were built with. A process that does not know the head, or
// whose knowledge another process's appends keep overtaking (replicas
// taking turns), so writes in one round trip, not two.
func appendLinked(ctx context.Context, conn *pgxpool.Conn, batch []*pgAuditAppend, floor AuditHead) ([]*pgAuditAppend, error) {
	if len(batch) == 0 {
		return batch, nil
	}
	b := &pgx.Batch{}
	queueSteps(b, batch)
	b.Queue(lockAudit.pg)
	for i, a := range batch {
		if i > 0 {
			floor = AuditHead{} // the head is the record before
		}
		b.Queue(insertLinkedAudit.pg, linkedAuditArgs(a.rec, a.link, floor)...)
	}
	err := readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if err := readSteps(br, batch); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		for _, a := range batch {
			if err := br.QueryRow().Scan(&a.rec.Seq, &a.rec.PrevHash, &a.rec.Hash); err != nil {
				return err
			}
		}
		return nil
	})
	return batch, err
}

// appendAfterHead appends the records of batch, built on the head it reads,
// in two round trips, and returns the appends whose build succeeded.
func appendAfterHead(ctx context.Context, conn *pgxpool.Conn, batch []*pgAuditAppend) ([]*pgAuditAppend, error) {
	b := &pgx.Batch{}
	b.Queue("begin")
	queueSteps(b, batch)
	b.Queue(lockAudit.pg)
	b.Queue(auditHead.pg)
	var head AuditHead
	err := readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := readSteps(br, batch); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		err := br.QueryRow().Scan(&head.Seq, &head.Hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // the log is empty
		}
		return err
	})
	if err != nil {
		return batch, err
	}

	if built := buildAppends(batch, head); len(built) < len(batch) {
		// The steps of the appends left out must not commit without
		// their records: the others start again.
		if _, err := conn.Exec(ctx, "rollback"); err != nil || len(built) == 0 {
			return built, err
		}
		return appendAfterHead(ctx, conn, built)
	}
	b = &pgx.Batch{}
	queueInsertAudits(b, batch)
	b.Queue("commit")
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return readCommit(br)
	})
	return batch, err
}

// queueSteps queues the statements of the steps of batch, in order.
func queueSteps(b *pgx.Batch, batch []*pgAuditAppend) {
	for _, a := range batch {
		if a.step != nil {
			a.step.queue(b)
		}
	}
}

// readSteps reads the results of the steps of batch, in order.
func readSteps(br pgx.BatchResults, batch []*pgAuditAppend) error {
	for _, a := range batch {
		if a.step != nil {
			if err := a.step.read(br); err != nil {
				return err
			}
		}
	}
	return nil
}

// queueInsertAudit queues the INSERT of r.
func queueInsertAudit(b *pgx.Batch, r AuditRecord) {
	b.Queue(insertAudit.pg, auditArgs(r)...)
}

// queueInsertAudits queues the INSERT of the records of batch (at least
// one), in order, as one statement: the database parses, plans and runs
// one statement for a transaction's records, not one per record.
func queueInsertAudits(b *pgx.Batch, batch []*pgAuditAppend) {
	if len(batch) == 1 {
		queueInsertAudit(b, batch[0].rec)
		return
	}
	args := make([]any, 0, len(batch)*auditColumnCount)
	for _, a := range batch {
		args = append(args, auditArgs(a.rec)...)
	}
	b.Queue(insertAuditRows(len(batch)), args...)
}

// auditColumnCount is the number of columns insertAudit sets.
const auditColumnCount = 20

// insertAuditsOf holds the INSERT of n records for n up to maxAuditBatch,
// so that each batch size is one statement text (one prepared statement
// per connection), built once, on the first write of a batch.
var insertAuditsOf = sync.OnceValue(func() []string {
	qs := make([]string, maxAuditBatch+1)
	for n := 1; n <= maxAuditBatch; n++ {
		var q strings.Builder
		q.WriteString("INSERT INTO audit_log (" + auditColumns + ")\nVALUES ")
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteByte('(')
			for c := range auditColumnCount {
				if c > 0 {
					q.WriteString(", ")
				}
				q.WriteString("$" + strconv.Itoa(i*auditColumnCount+c+1))
			}
			q.WriteByte(')')
		}
		qs[n] = q.String()
	}
	return qs
})

// insertAuditRows is the INSERT of n records (1 ≤ n ≤ maxAuditBatch).
func insertAuditRows(n int) string { return insertAuditsOf()[n] }

// rolledBack reports whether a transaction that failed with err is known
// not to have committed: the database refused one of its statements (or
// its COMMIT), and said so on a connection that stayed up. Anything else —
// a lost connection, a timeout, a FATAL error such as the server ending the
// session, which may come after the commit — leaves its fate unknown.
func rolledBack(err error) bool {
	if errors.Is(err, errRolledBack) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity
	}
	return severity == "ERROR"
}

// readCommit reads the result of a batch's COMMIT.
func readCommit(br pgx.BatchResults) error {
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = errRolledBack
	}
	return err
}

// isAuditCollision reports whether err is the INSERT of an audit record
// whose sequence another record has.
func isAuditCollision(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation && pgErr.ConstraintName == "audit_log_pkey"
}

// errRolledBack reports a COMMIT that PostgreSQL answered with ROLLBACK.
var errRolledBack = errors.New("store: the transaction was rolled back")

// readBatch reads br with read and closes it; the first error wins.
func readBatch(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// releaseAfterTx returns conn to the pool, rolling back a transaction a
// failure left open. Should the rollback fail, Release closes the
// connection, which ends the transaction too.
func releaseAfterTx(ctx context.Context, conn *pgxpool.Conn) {
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		_, _ = conn.Exec(ctx, "rollback")
	}
	conn.Release()
}

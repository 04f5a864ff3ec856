package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// pgAuditLock serialises appenders until their transaction ends. It is
	// keyed by the schema, like the migration lock, and taken before the
	// head is read: under read committed, the read then sees every append
	// that held the lock before.
	pgAuditLock = `SELECT pg_advisory_xact_lock(hashtextextended('usher.audit.' || current_schema(), 0))`

	pgAuditHead = `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`

	pgInsertAudit = `INSERT INTO audit_log (` + auditColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`

	pgAuditRecords = `SELECT ` + auditColumns + ` FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2`
)

func (s *postgresStore) AppendAudit(ctx context.Context, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	r, err := s.appendAuditTx(ctx, nil, build)
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
// record is appended all the same.
type pgTxStep struct {
	queue func(b *pgx.Batch)
	read  func(br pgx.BatchResults) error
}

// pgAuditChain is what a process knows of the audit log's head, and the
// turn of its appends: one at a time, so that each can chain to the head
// the one before it wrote.
type pgAuditChain struct {
	turn  chan struct{} // holds a value while an append is in flight
	head  AuditHead
	known bool
	// After a collision, the next skip appends read the head first; skip
	// is set from backoff, which doubles with each collision (up to
	// maxAuditBackoff) and is cleared by an append that does not collide.
	// While other processes append as often as this one, most appends so
	// take two round trips, not a failed one and then two.
	skip, backoff int
}

// maxAuditBackoff bounds pgAuditChain.backoff.
const maxAuditBackoff = 64

func newPGAuditChain() *pgAuditChain { return &pgAuditChain{turn: make(chan struct{}, 1)} }

// appendAuditTx appends the record build returns, after step if there is
// one, in one transaction on one connection. When the process knows the
// head (it wrote or read it last), that is one round trip: step's
// statements, the audit lock, a read of the head and the INSERT of the
// record chained to the head it knows, pipelined in one implicit
// transaction. If another process appended in between, the INSERT collides
// with its record on the sequence and the transaction rolls back; the append
// is tried again on the head read, and after a few collisions (or when the
// head is not known, or for a while after a collision: see pgAuditChain) it
// takes two round trips: BEGIN, step's statements, the lock and a read of
// the head; then the INSERT and COMMIT. build may so be called more than
// once, with different heads.
//
// A known head is not replaced by the one read: if the newest records were
// deleted, the next record still follows the last one this process saw,
// and the gap stays for the verifier to report rather than being chained
// over.
//
// The lock is held from its statement to the commit, and no holder of it
// waits for anything but the database's own writes: step's statements,
// which may wait for row locks, run before it is taken.
//
// It returns build's error wrapped in buildFailed, and other errors
// untranslated.
func (s *postgresStore) appendAuditTx(ctx context.Context, step *pgTxStep, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	c := s.audit
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return AuditRecord{}, ctx.Err()
	}
	defer func() { <-c.turn }()

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return AuditRecord{}, err
	}
	defer releaseAfterTx(ctx, conn)

	head, known := c.head, c.known && c.skip == 0
	c.skip = max(c.skip-1, 0)
	c.known = false // until an append succeeds
	for attempt := 0; known && attempt < maxAuditAttempts; attempt++ {
		r, err := builtRecord(build, head)
		if err != nil {
			return AuditRecord{}, err
		}
		seen, err := appendAtHead(ctx, conn, step, r)
		if err == nil {
			c.head, c.known = AuditHead{Seq: r.Seq, Hash: r.Hash}, true
			if attempt == 0 {
				c.backoff = 0
			}
			return r, nil
		}
		if !isAuditCollision(err) {
			return AuditRecord{}, err
		}
		c.backoff = min(max(2*c.backoff, 1), maxAuditBackoff)
		c.skip = c.backoff
		head = seen
	}
	r, err := appendAfterHead(ctx, conn, step, build)
	if err != nil {
		return AuditRecord{}, err
	}
	c.head, c.known = AuditHead{Seq: r.Seq, Hash: r.Hash}, true
	return r, nil
}

// maxAuditAttempts is how many one-round-trip appends are tried before an
// append reads the head under the lock.
const maxAuditAttempts = 3

// appendAtHead appends r, built on a head the process knows, in one round
// trip, and returns the head it read under the lock. It fails, rolled
// back, with an error isAuditCollision knows if another record has r's
// sequence.
func appendAtHead(ctx context.Context, conn *pgxpool.Conn, step *pgTxStep, r AuditRecord) (AuditHead, error) {
	// No BEGIN and COMMIT: the batch is one implicit transaction, which
	// commits at its end, or rolls back at the first error.
	b := &pgx.Batch{}
	if step != nil {
		step.queue(b)
	}
	b.Queue(pgAuditLock)
	b.Queue(pgAuditHead)
	queueInsertAudit(b, r)
	var head AuditHead
	err := readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if step != nil {
			if err := step.read(br); err != nil {
				return err
			}
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

// appendAfterHead appends the record build makes of the head it reads, in
// two round trips.
func appendAfterHead(ctx context.Context, conn *pgxpool.Conn, step *pgTxStep, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	b := &pgx.Batch{}
	b.Queue("begin")
	if step != nil {
		step.queue(b)
	}
	b.Queue(pgAuditLock)
	b.Queue(pgAuditHead)
	var head AuditHead
	err := readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if step != nil {
			if err := step.read(br); err != nil {
				return err
			}
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
		return AuditRecord{}, err
	}

	r, err := builtRecord(build, head)
	if err != nil {
		return AuditRecord{}, err
	}
	b = &pgx.Batch{}
	queueInsertAudit(b, r)
	b.Queue("commit")
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return readCommit(br)
	})
	if err != nil {
		return AuditRecord{}, err
	}
	return r, nil
}

// queueInsertAudit queues the INSERT of r.
func queueInsertAudit(b *pgx.Batch, r AuditRecord) {
	b.Queue(pgInsertAudit,
		r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
		r.DefinitionHash, r.ArgumentsHash, r.Decision, encodeNames(r.PolicyIDs), r.PolicyHash,
		r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), []byte(r.Details), r.PrevHash, r.Hash)
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

func (s *postgresStore) AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, pgAuditRecords, afterSeq, limit)
	if err != nil {
		return nil, pgError(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRecord, error) {
		var r AuditRecord
		var policyIDs, details []byte
		var latency int64
		if err := row.Scan(&r.Seq, &r.At, &r.Kind, &r.Principal, &r.ClientID, &r.TokenJTI, &r.Tool,
			&r.DefinitionHash, &r.ArgumentsHash, &r.Decision, &policyIDs, &r.PolicyHash,
			&r.ApprovalID, &r.RunID, &r.Outcome, &latency, &details, &r.PrevHash, &r.Hash); err != nil {
			return AuditRecord{}, err
		}
		var err error
		if r.PolicyIDs, err = decodeNames("audit_log.policy_ids", policyIDs); err != nil {
			return AuditRecord{}, err
		}
		r.At = r.At.UTC()
		r.Latency = time.Duration(latency) * time.Microsecond
		r.Details = details
		return r, nil
	})
	if err != nil {
		return nil, pgError(err)
	}
	return out, nil
}

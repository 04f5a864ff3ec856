package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
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
// the audit lock: queue puts its statements in the first round trip's
// batch, and read reads their results, in order. An error from read ends
// the transaction, rolled back, with that error.
type pgTxStep struct {
	queue func(b *pgx.Batch)
	read  func(br pgx.BatchResults) error
}

// appendAuditTx appends the record build returns, after step if there is
// one, in one transaction and two round trips on one connection: the first
// sends BEGIN, step's statements, the audit lock and the read of the head
// as one pipelined batch; the second the INSERT and COMMIT. The lock is
// held only from the end of the first round trip to the commit, and no
// holder of it waits for anything but the database's own writes: step's
// statements, which may wait for row locks, run before it is taken.
//
// It returns build's error wrapped in buildFailed, and other errors
// untranslated.
func (s *postgresStore) appendAuditTx(ctx context.Context, step *pgTxStep, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return AuditRecord{}, err
	}
	defer releaseAfterTx(ctx, conn)

	b := &pgx.Batch{}
	b.Queue("begin")
	if step != nil {
		step.queue(b)
	}
	b.Queue(pgAuditLock)
	b.Queue(pgAuditHead)
	var head AuditHead
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
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
	b.Queue(pgInsertAudit,
		r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
		r.DefinitionHash, r.ArgumentsHash, r.Decision, encodeNames(r.PolicyIDs), r.PolicyHash,
		r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), []byte(r.Details), r.PrevHash, r.Hash)
	b.Queue("commit")
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			err = errRolledBack
		}
		return err
	})
	if err != nil {
		return AuditRecord{}, err
	}
	return r, nil
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

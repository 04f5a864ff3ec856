package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
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
	var out AuditRecord
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgAuditLock); err != nil {
			return err
		}
		var head AuditHead
		err := tx.QueryRow(ctx, pgAuditHead).Scan(&head.Seq, &head.Hash)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		r, err := builtRecord(build, head)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, pgInsertAudit,
			r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
			r.DefinitionHash, r.ArgumentsHash, r.Decision, encodeNames(r.PolicyIDs), r.PolicyHash,
			r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), []byte(r.Details), r.PrevHash, r.Hash)
		out = r
		return err
	})
	if err != nil {
		return AuditRecord{}, appendError(err, pgError)
	}
	return out, nil
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

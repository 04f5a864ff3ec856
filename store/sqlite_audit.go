package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

const (
	sqliteAuditHead = `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`

	sqliteInsertAudit = `INSERT INTO audit_log (` + auditColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

	sqliteAuditRecords = `SELECT ` + auditColumns + ` FROM audit_log WHERE seq > ? ORDER BY seq LIMIT ?`
)

// The single write connection, in a BEGIN IMMEDIATE transaction, holds the
// database's write lock from the read of the head to the commit: appenders
// of this process queue for the connection, those of other processes for
// the lock.
func (s *sqliteStore) AppendAudit(ctx context.Context, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	var out AuditRecord
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = appendAuditInTx(ctx, tx, build)
		return err
	})
	if err != nil {
		return AuditRecord{}, appendError(err, sqliteError)
	}
	return out, nil
}

// appendAuditInTx appends the record build returns within tx, which holds
// the write lock.
func appendAuditInTx(ctx context.Context, tx *sql.Tx, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	var head AuditHead
	err := tx.QueryRowContext(ctx, sqliteAuditHead).Scan(&head.Seq, &head.Hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return AuditRecord{}, err
	}
	r, err := builtRecord(build, head)
	if err != nil {
		return AuditRecord{}, err
	}
	_, err = tx.ExecContext(ctx, sqliteInsertAudit,
		r.Seq, sqliteTime(r.At), r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
		r.DefinitionHash, r.ArgumentsHash, r.Decision, string(encodeNames(r.PolicyIDs)), r.PolicyHash,
		r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), string(r.Details), r.PrevHash, r.Hash)
	if err != nil {
		return AuditRecord{}, err
	}
	return r, nil
}

func (s *sqliteStore) AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, sqliteAuditRecords, afterSeq, limit)
	if err != nil {
		return nil, sqliteError(err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var r AuditRecord
		var at, policyIDs, details string
		var latency int64
		if err := rows.Scan(&r.Seq, &at, &r.Kind, &r.Principal, &r.ClientID, &r.TokenJTI, &r.Tool,
			&r.DefinitionHash, &r.ArgumentsHash, &r.Decision, &policyIDs, &r.PolicyHash,
			&r.ApprovalID, &r.RunID, &r.Outcome, &latency, &details, &r.PrevHash, &r.Hash); err != nil {
			return nil, sqliteError(err)
		}
		if r.At, err = parseSQLiteTime(at); err != nil {
			return nil, err
		}
		if r.PolicyIDs, err = decodeNames("audit_log.policy_ids", []byte(policyIDs)); err != nil {
			return nil, err
		}
		r.Latency = time.Duration(latency) * time.Microsecond
		r.Details = []byte(details)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, sqliteError(err)
	}
	return out, nil
}

package store

import (
	"context"
	"database/sql"
	"errors"
)

const (
	sqliteAuditHead = `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`

	sqliteInsertAudit = `INSERT INTO audit_log (` + auditColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

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

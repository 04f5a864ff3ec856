package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// sqliteBindingMatch selects the approvals bound to exactly the call whose
// binding is ?1 to ?8 (see bindingArgs). run_id is NULL outside a run, and
// IS compares NULL as equal to NULL.
const sqliteBindingMatch = `principal = ?1 AND tool = ?2 AND server = ?3 AND definition_hash = ?4
	AND arguments_hash = ?5 AND policy_hash = ?6 AND run_id IS ?7 AND client_id = ?8`

const (
	// sqliteExpireStalePending retires an identical pending approval whose
	// time has passed (?9 is now), so that a new request can take its
	// place in the unique pending index.
	sqliteExpireStalePending = `
UPDATE approvals SET status = 'expired', updated_at = ?9
WHERE status = 'pending' AND expires_at <= ?9 AND ` + sqliteBindingMatch

	// sqliteInsertApproval inserts a pending approval unless an identical
	// one is pending; the conflict target is approvals_pending_binding_key.
	sqliteInsertApproval = `
INSERT INTO approvals (principal, tool, server, definition_hash, arguments_hash, policy_hash, run_id, client_id,
	id, arguments, policy_ids, reason, approvers, tool_call_id, idempotency_key,
	status, expires_at, created_at, updated_at, tenant)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 'pending', ?16, ?17, ?17, ?18)
ON CONFLICT (principal, tool, server, definition_hash, arguments_hash, policy_hash, coalesce(run_id, ''), client_id)
	WHERE status = 'pending' DO NOTHING
RETURNING ` + approvalColumns

	sqliteFindPending = `SELECT ` + approvalColumns + ` FROM approvals WHERE status = 'pending' AND ` + sqliteBindingMatch

	sqliteGetApproval = `SELECT ` + approvalColumns + ` FROM approvals WHERE id = ?`

	sqliteApprovalExists = `SELECT EXISTS (SELECT 1 FROM approvals WHERE id = ?)`

	// sqliteListApprovals takes the states as a JSON array (?2).
	sqliteListApprovals = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE principal = ?1 AND status IN (SELECT value FROM json_each(?2))
ORDER BY created_at, id`

	// sqliteListApprovalsForApprovers takes the groups (?1) and the states
	// (?2) as JSON arrays, and the tenant (?3).
	sqliteListApprovalsForApprovers = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE status IN (SELECT value FROM json_each(?2)) AND tenant = ?3
	AND EXISTS (SELECT 1 FROM json_each(approvals.approvers) AS g
		WHERE g.value IN (SELECT value FROM json_each(?1)))
ORDER BY created_at, id`

	// sqliteDecideApproval is the compare-and-swap of a decision.
	sqliteDecideApproval = `
UPDATE approvals SET status = ?2, decided_by = ?3, decision_reason = ?4, decided_at = ?5, updated_at = ?5
WHERE id = ?1 AND status = 'pending' AND expires_at > ?5
RETURNING ` + approvalColumns

	sqliteFindApproved = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE status = 'approved' AND expires_at > ?9 AND ` + sqliteBindingMatch + `
ORDER BY decided_at, id
LIMIT 1`

	// sqliteConsumeApproval is the single use of an approval: one update
	// that checks the state, the deadline and every field of the binding.
	sqliteConsumeApproval = `
UPDATE approvals SET status = 'consumed', consumed_at = ?9, updated_at = ?9
WHERE id = ?10 AND status = 'approved' AND expires_at > ?9 AND ` + sqliteBindingMatch + `
RETURNING ` + approvalColumns

	sqliteRevokeApprovals = `
UPDATE approvals SET status = 'revoked', updated_at = ?3
WHERE tool = ?1 AND definition_hash <> ?2 AND status IN ('pending', 'approved')`

	sqliteExpireApprovals = `
UPDATE approvals SET status = 'expired', updated_at = ?1
WHERE status IN ('pending', 'approved') AND expires_at <= ?1`
)

// bindingArgs are the query arguments of a binding, in the order of
// sqliteBindingMatch and pgBindingMatch.
func bindingArgs(b ApprovalBinding, more ...any) []any {
	return append([]any{b.Principal, b.Tool, b.Server, b.DefinitionHash, b.ArgumentsHash, b.PolicyHash,
		nullString(b.RunID), b.ClientID}, more...)
}

func (s *sqliteStore) CreateApproval(ctx context.Context, a Approval) (Approval, bool, error) {
	return s.createApproval(ctx, a, nil)
}

func (s *sqliteStore) CreateApprovalAudited(ctx context.Context, a Approval, build func(AuditHead) (AuditRecord, error)) (Approval, bool, error) {
	return s.createApproval(ctx, a, build)
}

// createApproval creates a or finds the identical pending approval and,
// when it creates a and build is not nil, appends build's record, in one
// transaction.
func (s *sqliteStore) createApproval(ctx context.Context, a Approval, build func(AuditHead) (AuditRecord, error)) (Approval, bool, error) {
	if a.CreatedAt.IsZero() {
		a.CreatedAt = s.now()
	}
	if err := checkNewApproval(a); err != nil {
		return Approval{}, false, err
	}
	now := sqliteTime(a.CreatedAt)
	var out Approval
	var created bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, sqliteExpireStalePending, bindingArgs(a.Binding, now)...); err != nil {
			return err
		}
		var err error
		out, err = scanSQLiteApproval(tx.QueryRowContext(ctx, sqliteInsertApproval, bindingArgs(a.Binding,
			a.ID, string(jsonOr(a.Arguments, "{}")), string(encodeNames(a.PolicyIDs)), a.Reason,
			string(encodeNames(a.Approvers)), nullString(a.ToolCallID), nullString(a.IdempotencyKey),
			sqliteTime(a.ExpiresAt), now, a.Tenant)...))
		if err == nil {
			created = true
			if build != nil {
				_, err = appendAuditInTx(ctx, tx, build)
			}
			return err
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// The writer holds the database, so the pending approval that
		// blocked the insert is still there.
		out, err = scanSQLiteApproval(tx.QueryRowContext(ctx, sqliteFindPending, bindingArgs(a.Binding)...))
		return err
	})
	if err != nil {
		return Approval{}, false, appendError(err, sqliteError)
	}
	if created {
		s.notifyApproval(out)
	}
	return out, created, nil
}

func (s *sqliteStore) GetApproval(ctx context.Context, id string) (Approval, error) {
	a, err := scanSQLiteApproval(s.read.QueryRowContext(ctx, sqliteGetApproval, id))
	if err != nil {
		return Approval{}, sqliteError(err)
	}
	return a, nil
}

func (s *sqliteStore) ListApprovals(ctx context.Context, principal string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	return s.listApprovals(ctx, sqliteListApprovals, principal, string(encodeNames(statusFilter(status))))
}

func (s *sqliteStore) ListApprovalsForApprovers(ctx context.Context, tenant string, groups []string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return nil, nil
	}
	return s.listApprovals(ctx, sqliteListApprovalsForApprovers,
		string(encodeNames(groups)), string(encodeNames(statusFilter(status))), tenant)
}

func (s *sqliteStore) listApprovals(ctx context.Context, query string, args ...any) ([]Approval, error) {
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, sqliteError(err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a, err := scanSQLiteApproval(rows)
		if err != nil {
			return nil, sqliteError(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, sqliteError(err)
	}
	return out, nil
}

func (s *sqliteStore) DecideApproval(ctx context.Context, id string, to ApprovalStatus, decidedBy, reason string, now time.Time) (Approval, error) {
	return s.DecideApprovalAudited(ctx, id, to, decidedBy, reason, now, nil)
}

// DecideApprovalAudited is DecideApproval when build is nil.
func (s *sqliteStore) DecideApprovalAudited(ctx context.Context, id string, to ApprovalStatus, decidedBy, reason string, now time.Time, build func(AuditHead) (AuditRecord, error)) (Approval, error) {
	if err := checkDecision(to, decidedBy, reason, now); err != nil {
		return Approval{}, err
	}
	a, _, _, err := s.updateApproval(ctx, id, sqliteDecideApproval, nil, build, id, string(to), decidedBy, reason, sqliteTime(now))
	return a, err
}

func (s *sqliteStore) FindApproved(ctx context.Context, b ApprovalBinding, now time.Time) (Approval, error) {
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, err
	}
	a, err := scanSQLiteApproval(s.read.QueryRowContext(ctx, sqliteFindApproved, bindingArgs(b, sqliteTime(now))...))
	if err != nil {
		return Approval{}, sqliteError(err)
	}
	return a, nil
}

func (s *sqliteStore) ConsumeApproval(ctx context.Context, id string, b ApprovalBinding, now time.Time) (Approval, error) {
	a, _, _, err := s.ConsumeApprovalAudited(ctx, id, b, now, nil, nil)
	return a, err
}

// ConsumeApprovalAudited is ConsumeApproval when e and build are nil.
func (s *sqliteStore) ConsumeApprovalAudited(ctx context.Context, id string, b ApprovalBinding, now time.Time, e *Execution, build func(AuditHead) (AuditRecord, error)) (Approval, Execution, bool, error) {
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, Execution{}, false, err
	}
	if e != nil {
		if e.StartedAt.IsZero() {
			e.StartedAt = now
		}
		if err := checkNewExecution(*e); err != nil {
			return Approval{}, Execution{}, false, err
		}
	}
	return s.updateApproval(ctx, id, sqliteConsumeApproval, e, build, bindingArgs(b, sqliteTime(now), id)...)
}

// updateApproval runs a compare-and-swap of the approval id that returns
// the row, and tells a missing approval (ErrNotFound) from one not in the
// expected state (ErrConflict). After it, in the same transaction, it
// begins e when e is not nil (see ConsumeApprovalAudited) and appends
// build's record when build is not nil.
func (s *sqliteStore) updateApproval(ctx context.Context, id, query string, e *Execution, build func(AuditHead) (AuditRecord, error), args ...any) (Approval, Execution, bool, error) {
	var out Approval
	var exec Execution
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteApproval(tx.QueryRowContext(ctx, query, args...))
		if errors.Is(err, sql.ErrNoRows) {
			var exists bool
			if err := tx.QueryRowContext(ctx, sqliteApprovalExists, id).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return ErrNotFound
			}
			return ErrConflict
		}
		if err != nil {
			return err
		}
		if e != nil {
			exec, err = scanSQLiteExecution(tx.QueryRowContext(ctx, sqliteBeginExecution,
				e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash, nullString(e.ApprovalID), nullString(e.RunID),
				sqliteTime(e.StartedAt)))
			if errors.Is(err, sql.ErrNoRows) {
				if exec, err = scanSQLiteExecution(tx.QueryRowContext(ctx, sqliteGetExecution, e.IdempotencyKey)); err != nil {
					return err
				}
				return errKeyTaken
			}
			if err != nil {
				return err
			}
		}
		if build != nil {
			_, err = appendAuditInTx(ctx, tx, build)
		}
		return err
	})
	if errors.Is(err, errKeyTaken) {
		return Approval{}, exec, false, nil
	}
	if err != nil {
		return Approval{}, Execution{}, false, appendError(err, sqliteError)
	}
	s.notifyApproval(out)
	return out, exec, e != nil, nil
}

// notifyApproval tells live-update subscribers that an approval changed.
func (s *sqliteStore) notifyApproval(a Approval) {
	s.updates.publish(Notification{Kind: NotifyApproval, ApprovalID: a.ID, Owner: a.Binding.Principal, RunID: a.Binding.RunID})
}

func (s *sqliteStore) RevokeApprovals(ctx context.Context, tool, keepDefinitionHash string, now time.Time) (int, error) {
	return s.RevokeApprovalsAudited(ctx, tool, keepDefinitionHash, now, nil)
}

// RevokeApprovalsAudited is RevokeApprovals when build is nil.
func (s *sqliteStore) RevokeApprovalsAudited(ctx context.Context, tool, keepDefinitionHash string, now time.Time, build func(int) func(AuditHead) (AuditRecord, error)) (int, error) {
	if err := checkRevoke(tool, keepDefinitionHash, now); err != nil {
		return 0, err
	}
	var n int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, sqliteRevokeApprovals, tool, keepDefinitionHash, sqliteTime(now))
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		if err != nil {
			return err
		}
		n = int(affected)
		if n == 0 || build == nil {
			return nil
		}
		_, err = appendAuditInTx(ctx, tx, build(n))
		return err
	})
	if err != nil {
		return 0, appendError(err, sqliteError)
	}
	if n > 0 {
		s.updates.publish(Notification{Kind: NotifyApproval})
	}
	return n, nil
}

func (s *sqliteStore) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	n, err := s.execCount(ctx, sqliteExpireApprovals, sqliteTime(now))
	if n > 0 {
		s.updates.publish(Notification{Kind: NotifyApproval})
	}
	return n, err
}

// execCount runs a write and returns how many rows it changed.
func (s *sqliteStore) execCount(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, sqliteError(err)
	}
	return int(n), nil
}

// scanSQLiteApproval reads one row of approvalColumns.
func scanSQLiteApproval(row interface{ Scan(...any) error }) (Approval, error) {
	var a Approval
	var arguments, policyIDs, approvers, status string
	var decidedAt, consumedAt sql.NullString
	var expiresAt, createdAt, updatedAt string
	b := &a.Binding
	err := row.Scan(&a.ID, &b.Principal, &b.Tool, &b.Server, &b.DefinitionHash, &b.ArgumentsHash, &b.PolicyHash,
		&b.RunID, &b.ClientID,
		&arguments, &policyIDs, &a.Reason, &approvers,
		&a.ToolCallID, &a.IdempotencyKey,
		&status, &a.DecidedBy, &a.DecisionReason, &decidedAt, &consumedAt, &expiresAt, &createdAt, &updatedAt,
		&a.Tenant)
	if err != nil {
		return Approval{}, err
	}
	a.Arguments = []byte(arguments)
	a.Status = ApprovalStatus(status)
	if a.PolicyIDs, err = decodeNames("approvals.policy_ids", []byte(policyIDs)); err != nil {
		return Approval{}, err
	}
	if a.Approvers, err = decodeNames("approvals.approvers", []byte(approvers)); err != nil {
		return Approval{}, err
	}
	var tp sqliteTimeParser
	a.DecidedAt = tp.parseNull(decidedAt)
	a.ConsumedAt = tp.parseNull(consumedAt)
	a.ExpiresAt = tp.parse(expiresAt)
	a.CreatedAt = tp.parse(createdAt)
	a.UpdatedAt = tp.parse(updatedAt)
	return a, tp.err
}

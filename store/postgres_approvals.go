package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBindingMatch selects the approvals bound to exactly the call whose
// binding is $1 to $8 (see bindingArgs). run_id is NULL outside a run.
const pgBindingMatch = `principal = $1 AND tool = $2 AND server = $3 AND definition_hash = $4
	AND arguments_hash = $5 AND policy_hash = $6 AND run_id IS NOT DISTINCT FROM $7 AND client_id = $8`

const (
	// pgExpireStalePending retires an identical pending approval whose time
	// has passed ($9 is now), so that a new request can take its place in
	// the unique pending index.
	pgExpireStalePending = `
UPDATE approvals SET status = 'expired', updated_at = $9
WHERE status = 'pending' AND expires_at <= $9 AND ` + pgBindingMatch

	// pgInsertApproval inserts a pending approval unless an identical one
	// is pending; the conflict target is approvals_pending_binding_key. A
	// concurrent identical insert makes it wait for that transaction, then
	// do nothing.
	pgInsertApproval = `
INSERT INTO approvals (principal, tool, server, definition_hash, arguments_hash, policy_hash, run_id, client_id,
	id, arguments, policy_ids, reason, approvers, tool_call_id, idempotency_key,
	status, expires_at, created_at, updated_at, tenant)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'pending', $16, $17, $17, $18)
ON CONFLICT (principal, tool, server, definition_hash, arguments_hash, policy_hash, coalesce(run_id, ''), client_id)
	WHERE status = 'pending' DO NOTHING
RETURNING ` + approvalColumns

	pgFindPending = `SELECT ` + approvalColumns + ` FROM approvals WHERE status = 'pending' AND ` + pgBindingMatch

	pgGetApproval = `SELECT ` + approvalColumns + ` FROM approvals WHERE id = $1`

	pgApprovalExists = `SELECT EXISTS (SELECT 1 FROM approvals WHERE id = $1)`

	pgListApprovals = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE principal = $1 AND status = ANY($2)
ORDER BY created_at, id`

	pgListApprovalsForApprovers = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE status = ANY($2) AND tenant = $3
	AND EXISTS (SELECT 1 FROM json_array_elements_text(approvers) AS g(name) WHERE g.name = ANY($1))
ORDER BY created_at, id`

	// pgDecideApproval is the compare-and-swap of a decision.
	pgDecideApproval = `
UPDATE approvals SET status = $2, decided_by = $3, decision_reason = $4, decided_at = $5, updated_at = $5
WHERE id = $1 AND status = 'pending' AND expires_at > $5
RETURNING ` + approvalColumns

	pgFindApproved = `
SELECT ` + approvalColumns + ` FROM approvals
WHERE status = 'approved' AND expires_at > $9 AND ` + pgBindingMatch + `
ORDER BY decided_at, id
LIMIT 1`

	// pgConsumeApproval is the single use of an approval: one update that
	// checks the state, the deadline and every field of the binding. Of
	// concurrent consumers, the first takes the row lock; the others
	// re-check the state after it commits and find it consumed.
	pgConsumeApproval = `
UPDATE approvals SET status = 'consumed', consumed_at = $9, updated_at = $9
WHERE id = $10 AND status = 'approved' AND expires_at > $9 AND ` + pgBindingMatch + `
RETURNING ` + approvalColumns

	pgRevokeApprovals = `
UPDATE approvals SET status = 'revoked', updated_at = $3
WHERE tool = $1 AND definition_hash <> $2 AND status IN ('pending', 'approved')`

	pgExpireApprovals = `
UPDATE approvals SET status = 'expired', updated_at = $1
WHERE status IN ('pending', 'approved') AND expires_at <= $1`
)

// pgCreateApprovalAttempts bounds CreateApproval's retries: an identical
// pending approval may be decided between the insert that it blocked and
// the read that looks for it.
const pgCreateApprovalAttempts = 3

func (s *postgresStore) CreateApproval(ctx context.Context, a Approval) (Approval, bool, error) {
	return s.createApproval(ctx, a, nil)
}

func (s *postgresStore) CreateApprovalAudited(ctx context.Context, a Approval, build func(AuditHead) (AuditRecord, error)) (Approval, bool, error) {
	return s.createApproval(ctx, a, build)
}

// createApproval creates a or finds the identical pending approval and,
// when it creates a and build is not nil, appends build's record, in one
// transaction: the insert, which may wait for a concurrent identical one,
// before the audit lock.
func (s *postgresStore) createApproval(ctx context.Context, a Approval, build func(AuditHead) (AuditRecord, error)) (Approval, bool, error) {
	if a.CreatedAt.IsZero() {
		a.CreatedAt = s.now()
	}
	if err := checkNewApproval(a); err != nil {
		return Approval{}, false, err
	}
	now := storedTime(a.CreatedAt)
	for range pgCreateApprovalAttempts {
		var out Approval
		var created bool
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgExpireStalePending, bindingArgs(a.Binding, now)...); err != nil {
				return err
			}
			var err error
			out, err = scanPostgresApproval(tx.QueryRow(ctx, pgInsertApproval, bindingArgs(a.Binding,
				a.ID, jsonOr(a.Arguments, "{}"), encodeNames(a.PolicyIDs), a.Reason,
				encodeNames(a.Approvers), nullString(a.ToolCallID), nullString(a.IdempotencyKey),
				storedTime(a.ExpiresAt), now, a.Tenant)...))
			if err == nil {
				created = true
				if build != nil {
					_, err = pgAppendAuditInTx(ctx, tx, build)
				}
				return err
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			// Read committed: this statement sees the approval whose
			// insert blocked ours.
			out, err = scanPostgresApproval(tx.QueryRow(ctx, pgFindPending, bindingArgs(a.Binding)...))
			return err
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // decided in between: try again
		}
		if err != nil {
			return Approval{}, false, appendError(err, pgError)
		}
		if created {
			s.notifyApproval(ctx, out)
		}
		return out, created, nil
	}
	return Approval{}, false, ErrConflict
}

func (s *postgresStore) GetApproval(ctx context.Context, id string) (Approval, error) {
	a, err := scanPostgresApproval(s.pool.QueryRow(ctx, pgGetApproval, id))
	if err != nil {
		return Approval{}, pgError(err)
	}
	s.notifyApproval(ctx, a)
	return a, nil
}

// notifyApproval tells live-update subscribers that an approval changed;
// a failure is logged, not returned (see notifyRun).
func (s *postgresStore) notifyApproval(ctx context.Context, a Approval) {
	err := pgNotifyOn(ctx, s.poolExec, Notification{Kind: NotifyApproval, ApprovalID: a.ID, Owner: a.Binding.Principal, RunID: a.Binding.RunID})
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "store: notifying an approval change failed", "approval", a.ID, "err", err)
	}
}

func (s *postgresStore) ListApprovals(ctx context.Context, principal string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	return s.listApprovals(ctx, pgListApprovals, principal, statusFilter(status))
}

func (s *postgresStore) ListApprovalsForApprovers(ctx context.Context, tenant string, groups []string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return nil, nil
	}
	return s.listApprovals(ctx, pgListApprovalsForApprovers, groups, statusFilter(status), tenant)
}

func (s *postgresStore) listApprovals(ctx context.Context, query string, args ...any) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, pgError(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Approval, error) {
		return scanPostgresApproval(row)
	})
	if err != nil {
		return nil, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) DecideApproval(ctx context.Context, id string, to ApprovalStatus, decidedBy, reason string, now time.Time) (Approval, error) {
	return s.DecideApprovalAudited(ctx, id, to, decidedBy, reason, now, nil)
}

// DecideApprovalAudited is DecideApproval when build is nil.
func (s *postgresStore) DecideApprovalAudited(ctx context.Context, id string, to ApprovalStatus, decidedBy, reason string, now time.Time, build func(AuditHead) (AuditRecord, error)) (Approval, error) {
	if err := checkDecision(to, decidedBy, reason, now); err != nil {
		return Approval{}, err
	}
	a, _, _, err := s.updateApproval(ctx, id, pgDecideApproval, nil, build, id, to, decidedBy, reason, storedTime(now))
	return a, err
}

func (s *postgresStore) FindApproved(ctx context.Context, b ApprovalBinding, now time.Time) (Approval, error) {
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, err
	}
	a, err := scanPostgresApproval(s.pool.QueryRow(ctx, pgFindApproved, bindingArgs(b, storedTime(now))...))
	if err != nil {
		return Approval{}, pgError(err)
	}
	return a, nil
}

func (s *postgresStore) ConsumeApproval(ctx context.Context, id string, b ApprovalBinding, now time.Time) (Approval, error) {
	a, _, _, err := s.ConsumeApprovalAudited(ctx, id, b, now, nil, nil)
	return a, err
}

// ConsumeApprovalAudited is ConsumeApproval when e and build are nil.
func (s *postgresStore) ConsumeApprovalAudited(ctx context.Context, id string, b ApprovalBinding, now time.Time, e *Execution, build func(AuditHead) (AuditRecord, error)) (Approval, Execution, bool, error) {
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
	return s.updateApproval(ctx, id, pgConsumeApproval, e, build, bindingArgs(b, storedTime(now), id)...)
}

// updateApproval runs a compare-and-swap of the approval id that returns
// the row, and tells a missing approval (ErrNotFound) from one not in the
// expected state (ErrConflict). After it, in the same transaction, it
// begins e when e is not nil (see ConsumeApprovalAudited) and appends
// build's record when build is not nil. Without either it is one
// statement (and a second one to tell why it matched nothing).
func (s *postgresStore) updateApproval(ctx context.Context, id, query string, e *Execution, build func(AuditHead) (AuditRecord, error), args ...any) (Approval, Execution, bool, error) {
	var out Approval
	var exec Execution
	update := func(q interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}) error {
		var err error
		out, err = scanPostgresApproval(q.QueryRow(ctx, query, args...))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var exists bool
		if err := q.QueryRow(ctx, pgApprovalExists, id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		return ErrConflict
	}
	var err error
	if e == nil && build == nil {
		err = update(s.pool)
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := update(tx); err != nil {
				return err
			}
			if e != nil {
				var err error
				exec, err = scanPostgresExecution(tx.QueryRow(ctx, pgBeginExecution, e.IdempotencyKey, e.Principal, e.Tool,
					e.ArgumentsHash, nullString(e.ApprovalID), nullString(e.RunID), storedTime(e.StartedAt)))
				if errors.Is(err, pgx.ErrNoRows) {
					// The key was taken, and the insert that took it has
					// committed.
					if exec, err = scanPostgresExecution(tx.QueryRow(ctx, pgGetExecution, e.IdempotencyKey)); err != nil {
						return err
					}
					return errKeyTaken
				}
				if err != nil {
					return err
				}
			}
			if build == nil {
				return nil
			}
			_, err := pgAppendAuditInTx(ctx, tx, build)
			return err
		})
	}
	if errors.Is(err, errKeyTaken) {
		return Approval{}, exec, false, nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
		return Approval{}, Execution{}, false, err
	}
	if err != nil {
		return Approval{}, Execution{}, false, appendError(err, pgError)
	}
	s.notifyApproval(ctx, out)
	return out, exec, e != nil, nil
}

func (s *postgresStore) RevokeApprovals(ctx context.Context, tool, keepDefinitionHash string, now time.Time) (int, error) {
	return s.RevokeApprovalsAudited(ctx, tool, keepDefinitionHash, now, nil)
}

// RevokeApprovalsAudited is RevokeApprovals when build is nil. The record
// says how many were revoked, which only the update knows: it is appended
// in the update's transaction, after it (see pgAppendAuditInTx).
func (s *postgresStore) RevokeApprovalsAudited(ctx context.Context, tool, keepDefinitionHash string, now time.Time, build func(int) func(AuditHead) (AuditRecord, error)) (int, error) {
	if err := checkRevoke(tool, keepDefinitionHash, now); err != nil {
		return 0, err
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, pgRevokeApprovals, tool, keepDefinitionHash, storedTime(now))
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		if n == 0 || build == nil {
			return nil
		}
		_, err = pgAppendAuditInTx(ctx, tx, build(n))
		return err
	})
	if err != nil {
		return 0, appendError(err, pgError)
	}
	if n > 0 {
		// Many approvals of many people: everyone looks again.
		if err := pgNotifyOn(ctx, s.poolExec, Notification{Kind: NotifyApproval}); err != nil {
			s.log.WarnContext(ctx, "store: notifying approval changes failed", "err", err)
		}
	}
	return n, nil
}

func (s *postgresStore) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, pgExpireApprovals, storedTime(now))
	if err != nil {
		return 0, pgError(err)
	}
	if tag.RowsAffected() > 0 {
		// Many approvals of many people: everyone looks again.
		if err := pgNotifyOn(ctx, s.poolExec, Notification{Kind: NotifyApproval}); err != nil {
			s.log.WarnContext(ctx, "store: notifying approval changes failed", "err", err)
		}
	}
	return int(tag.RowsAffected()), nil
}

// scanPostgresApproval reads one row of approvalColumns.
func scanPostgresApproval(row pgx.Row) (Approval, error) {
	var a Approval
	var arguments, policyIDs, approvers []byte
	var decidedAt, consumedAt *time.Time
	b := &a.Binding
	err := row.Scan(&a.ID, &b.Principal, &b.Tool, &b.Server, &b.DefinitionHash, &b.ArgumentsHash, &b.PolicyHash,
		&b.RunID, &b.ClientID,
		&arguments, &policyIDs, &a.Reason, &approvers,
		&a.ToolCallID, &a.IdempotencyKey,
		&a.Status, &a.DecidedBy, &a.DecisionReason, &decidedAt, &consumedAt, &a.ExpiresAt, &a.CreatedAt, &a.UpdatedAt,
		&a.Tenant)
	if err != nil {
		return Approval{}, err
	}
	a.Arguments = arguments
	if a.PolicyIDs, err = decodeNames("approvals.policy_ids", policyIDs); err != nil {
		return Approval{}, err
	}
	if a.Approvers, err = decodeNames("approvals.approvers", approvers); err != nil {
		return Approval{}, err
	}
	a.DecidedAt = pgTimeOrZero(decidedAt)
	a.ConsumedAt = pgTimeOrZero(consumedAt)
	a.ExpiresAt, a.CreatedAt, a.UpdatedAt = a.ExpiresAt.UTC(), a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, nil
}

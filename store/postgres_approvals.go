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
	status, expires_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'pending', $16, $17, $17)
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
WHERE status = ANY($2)
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
				storedTime(a.ExpiresAt), now)...))
			if err == nil {
				created = true
				return nil
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
			return Approval{}, false, pgError(err)
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

func (s *postgresStore) ListApprovalsForApprovers(ctx context.Context, groups []string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return nil, nil
	}
	return s.listApprovals(ctx, pgListApprovalsForApprovers, groups, statusFilter(status))
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
	if err := checkDecision(to, decidedBy, reason, now); err != nil {
		return Approval{}, err
	}
	return s.updateApproval(ctx, id, pgDecideApproval, id, to, decidedBy, reason, storedTime(now))
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
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, err
	}
	return s.updateApproval(ctx, id, pgConsumeApproval, bindingArgs(b, storedTime(now), id)...)
}

// updateApproval runs a compare-and-swap of the approval id that returns
// the row, and tells a missing approval (ErrNotFound) from one not in the
// expected state (ErrConflict).
func (s *postgresStore) updateApproval(ctx context.Context, id, query string, args ...any) (Approval, error) {
	a, err := scanPostgresApproval(s.pool.QueryRow(ctx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.pool.QueryRow(ctx, pgApprovalExists, id).Scan(&exists); err != nil {
			return Approval{}, pgError(err)
		}
		if !exists {
			return Approval{}, ErrNotFound
		}
		return Approval{}, ErrConflict
	}
	if err != nil {
		return Approval{}, pgError(err)
	}
	return a, nil
}

func (s *postgresStore) RevokeApprovals(ctx context.Context, tool, keepDefinitionHash string, now time.Time) (int, error) {
	if err := checkRevoke(tool, keepDefinitionHash, now); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, pgRevokeApprovals, tool, keepDefinitionHash, storedTime(now))
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
		&a.Status, &a.DecidedBy, &a.DecisionReason, &decidedAt, &consumedAt, &a.ExpiresAt, &a.CreatedAt, &a.UpdatedAt)
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

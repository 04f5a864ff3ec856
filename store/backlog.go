package store

import (
	"context"
	"time"
)

// Backlog is the work waiting at one time, as the database holds it for
// every replica.
type Backlog struct {
	// Queued counts the InProgress runs queued for a turn that no replica
	// holds (those waiting out a retry's backoff included).
	Queued int
	// OldestQueued is when the longest-queued of them was queued; zero
	// when none is.
	OldestQueued time.Time
	// Running counts the InProgress runs whose lease a replica holds and
	// has not let expire.
	Running int
	// PendingApprovals counts the approvals pending and not expired.
	PendingApprovals int
	// OldestPendingApproval is when the oldest of them was requested;
	// zero when none is.
	OldestPendingApproval time.Time
}

// backlog reads a Backlog at $1 in one statement, each part over a
// partial index: the queued runs' (runs_queued_idx), the leases'
// (runs_lease_expiry_idx) and the pending approvals'
// (approvals_pending_expiry_idx).
var backlog = sql1(`
SELECT
	(SELECT count(*) FROM runs
	 WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT min(queued_at) FROM runs
	 WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT count(*) FROM runs
	 WHERE lease_expires_at >= $1 AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_at > $1),
	(SELECT min(created_at) FROM approvals WHERE status = 'pending' AND expires_at > $1)`)

func (c *core) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	err := c.reader().row(ctx, backlog, storedTime(c.now())).Scan(
		&b.Queued, at(&b.OldestQueued), &b.Running, &b.PendingApprovals, at(&b.OldestPendingApproval))
	if err != nil {
		return Backlog{}, c.fail(err)
	}
	return b, nil
}

package assistant

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Retention: conversations without activity for
// Options.DeleteInactiveAfter are deleted, and deleted ones erased
// Options.PurgeDeletedAfter after their deletion. A process looks at most
// every retainEvery, and takes up to retainBatches batches of retainBatch
// runs of each in a pass, so that a backlog (a setting just turned on) is
// worked off over a few passes rather than in one long one.
const (
	retainEvery   = 5 * time.Minute
	retainBatch   = 25
	retainBatches = 40
)

// retentionStore deletes inactive runs and erases deleted ones (a
// store.Store does).
type retentionStore interface {
	InactiveRuns(ctx context.Context, before time.Time, limit int) ([]string, error)
	DeleteInactiveRun(ctx context.Context, runID string, before time.Time, w store.Withdrawal, audit store.RunAudit) (store.Run, bool, error)
	PurgeDeletedRuns(ctx context.Context, deletedBefore time.Time, limit int, audit store.RunAudit) ([]store.Run, error)
}

// retain deletes the inactive conversations and erases the deleted ones,
// as the options say, when the process's last pass is retainEvery old.
// Replicas that do so at once work on different runs.
func (rt *Runtime) retain(ctx context.Context) {
	if rt.o.DeleteInactiveAfter <= 0 && rt.o.PurgeDeletedAfter <= 0 {
		return
	}
	now := rt.o.Now()
	if last := rt.lastRetain.Load(); last != 0 && now.Sub(time.Unix(0, last)) < retainEvery {
		return
	}
	rt.lastRetain.Store(now.UnixNano())
	if rt.o.DeleteInactiveAfter > 0 {
		rt.deleteInactive(ctx, now.Add(-rt.o.DeleteInactiveAfter))
	}
	if rt.o.PurgeDeletedAfter > 0 {
		rt.purgeDeleted(ctx, now.Add(-rt.o.PurgeDeletedAfter))
	}
}

// deleteInactive deletes the runs, Idle or closed, with no activity since
// before, as their owner's deletion would (their open approvals
// withdrawn), each with its audit record (run_expired).
func (rt *Runtime) deleteInactive(ctx context.Context, before time.Time) {
	reason := fmt.Sprintf("This session was deleted after %s without activity.", inDays(rt.o.DeleteInactiveAfter))
	for range retainBatches {
		ids, err := rt.st.InactiveRuns(ctx, before, retainBatch)
		if err != nil {
			rt.log.Error("assistant: looking for inactive conversations failed", "err", err)
			return
		}
		n := 0
		for _, id := range ids {
			r, deleted, err := rt.st.DeleteInactiveRun(ctx, id, before, rt.expiryWithdrawal(reason), rt.expiry)
			if err != nil {
				rt.log.Error("assistant: deleting an inactive conversation failed", "run", id, "err", err)
				return
			}
			if deleted {
				n++
				rt.log.Debug("assistant: deleted an inactive conversation", "run", r.ID)
			}
		}
		rt.expired.Add(int64(n))
		if n > 0 {
			rt.log.Info("assistant: deleted inactive conversations", "count", n, "inactive_since", before)
		}
		if len(ids) < retainBatch {
			return
		}
	}
}

// expiryWithdrawal withdraws an inactive run's open approvals for reason,
// as its owner's deletion does: each recorded as decided by the person
// whose run it is (who asked for it).
func (rt *Runtime) expiryWithdrawal(reason string) store.Withdrawal {
	w := store.Withdrawal{Reason: reason}
	if rt.o.Audit != nil {
		w.Audit = func(a store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
			return rt.withdrawal(a.Binding.Principal, reason).Audit(a)
		}
	}
	return w
}

// purgeDeleted erases the runs deleted before before, with all they hold
// but their audit records, each with its audit record (run_erased).
func (rt *Runtime) purgeDeleted(ctx context.Context, before time.Time) {
	for range retainBatches {
		runs, err := rt.st.PurgeDeletedRuns(ctx, before, retainBatch, rt.erasure)
		if err != nil {
			rt.log.Error("assistant: erasing deleted conversations failed", "err", err)
			return
		}
		rt.purged.Add(int64(len(runs)))
		if len(runs) > 0 {
			rt.log.Info("assistant: erased deleted conversations", "count", len(runs), "deleted_before", before)
		}
		if len(runs) < retainBatch {
			return
		}
	}
}

// expiry builds the audit record of the deletion of r, inactive
// (run_expired, its owner as the principal): its last activity, and
// after how long it was deleted. Nil without an audit log.
func (rt *Runtime) expiry(r store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
	return rt.retentionRecord(audit.KindRunExpired, r, map[string]any{
		"last_activity_at": r.LastActivityAt.UTC(), "delete_inactive_after": rt.o.DeleteInactiveAfter.String()})
}

// erasure builds the audit record of r's erasure (run_erased, its owner
// as the principal): when it was deleted, and after how long it was
// erased. Nil without an audit log.
func (rt *Runtime) erasure(r store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
	return rt.retentionRecord(audit.KindRunErased, r, map[string]any{
		"deleted_at": r.DeletedAt.UTC(), "purge_deleted_after": rt.o.PurgeDeletedAfter.String()})
}

// retentionRecord builds the audit record kind of r with details.
func (rt *Runtime) retentionRecord(kind audit.Kind, r store.Run, details map[string]any) (func(store.AuditHead) (store.AuditRecord, error), error) {
	if rt.o.Audit == nil {
		return nil, nil
	}
	b, err := json.Marshal(details)
	if err != nil {
		return nil, err
	}
	return rt.o.Audit.Builder(audit.Entry{Kind: kind, At: rt.o.Now(), Principal: r.Owner, RunID: r.ID, Details: b})
}

// inDays says d in days when it is whole days ("90 days"), else as
// Duration does.
func inDays(d time.Duration) string {
	switch {
	case d == 24*time.Hour:
		return "a day"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

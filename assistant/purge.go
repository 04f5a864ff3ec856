package assistant

import (
	"context"
	"encoding/json"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Erasing deleted conversations (Options.PurgeDeletedAfter): a process
// purges at most every purgeEvery, up to purgeBatches batches of
// purgeBatch runs in a pass, so that a backlog (the setting just turned
// on) is worked off over a few passes rather than in one long one.
const (
	purgeEvery   = 5 * time.Minute
	purgeBatch   = 25
	purgeBatches = 40
)

// purgeStore erases deleted runs (a store.Store does).
type purgeStore interface {
	PurgeDeletedRuns(ctx context.Context, deletedBefore time.Time, limit int, audit store.PurgeAudit) ([]store.Run, error)
}

// purgeDeleted erases the runs deleted longer than
// Options.PurgeDeletedAfter ago, with all they hold but their audit
// records, when that is set and the process's last pass is purgeEvery
// old. Replicas that purge at once erase different runs.
func (rt *Runtime) purgeDeleted(ctx context.Context) {
	if rt.o.PurgeDeletedAfter <= 0 {
		return
	}
	now := rt.o.Now()
	if last := rt.lastPurge.Load(); last != 0 && now.Sub(time.Unix(0, last)) < purgeEvery {
		return
	}
	rt.lastPurge.Store(now.UnixNano())
	for range purgeBatches {
		runs, err := rt.st.PurgeDeletedRuns(ctx, now.Add(-rt.o.PurgeDeletedAfter), purgeBatch, rt.erasure)
		if err != nil {
			rt.log.Error("assistant: erasing deleted conversations failed", "err", err)
			return
		}
		rt.purged.Add(int64(len(runs)))
		if len(runs) > 0 {
			rt.log.Info("assistant: erased deleted conversations", "count", len(runs), "deleted_before", now.Add(-rt.o.PurgeDeletedAfter))
		}
		if len(runs) < purgeBatch {
			return
		}
	}
}

// erasure builds the audit record of r's erasure (run_erased, its owner
// as the principal): when it was deleted, and after how long it was
// erased. Nil without an audit log.
func (rt *Runtime) erasure(r store.Run) (func(store.AuditHead) (store.AuditRecord, error), error) {
	if rt.o.Audit == nil {
		return nil, nil
	}
	details, err := json.Marshal(map[string]any{"deleted_at": r.DeletedAt.UTC(), "purge_deleted_after": rt.o.PurgeDeletedAfter.String()})
	if err != nil {
		return nil, err
	}
	return rt.o.Audit.Builder(audit.Entry{Kind: audit.KindRunErased, At: rt.o.Now(), Principal: r.Owner, RunID: r.ID, Details: details})
}

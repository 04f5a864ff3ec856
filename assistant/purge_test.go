package assistant

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestPurgeDeletedConversations: with PurgeDeletedAfter set, the sweep
// erases a conversation deleted longer ago than that, and neither one
// deleted since nor one not deleted; it looks again only after
// purgeEvery.
func TestPurgeDeletedConversations(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		var ahead atomic.Int64 // how far the runtime's clock is ahead of the store's
		log, err := audit.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, st, model.NewDemo(), &Options{
			PurgeDeletedAfter: time.Hour,
			Audit:             log,
			Now:               func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
		})
		var ids []string
		for range 2 {
			code, out := h.call(t, "POST", "/runs", `{"message": "hello"}`)
			if code != http.StatusCreated {
				t.Fatalf("POST /runs = %d %v", code, out)
			}
			id := out["runId"].(string)
			waitHandled(t, st, id, 1, 20*time.Second)
			ids = append(ids, id)
		}
		deleted, kept := ids[0], ids[1]
		if code, out := h.call(t, "DELETE", "/runs/"+deleted, ""); code != http.StatusNoContent {
			t.Fatalf("DELETE = %d %v", code, out)
		}

		// Deleted a moment ago: kept.
		h.rt.purgeDeleted(t.Context())
		if r, err := st.GetRun(t.Context(), deleted); err != nil || r.DeletedAt.IsZero() {
			t.Fatalf("the run deleted a moment ago after a purge: %+v, %v; want it kept", r, err)
		}
		// Two hours later (past the hour), but within purgeEvery of the
		// last pass: not looked at; once it has passed, erased.
		ahead.Store(int64(2 * time.Hour))
		h.rt.lastPurge.Store(time.Now().Add(2*time.Hour - purgeEvery/2).UnixNano())
		h.rt.purgeDeleted(t.Context())
		if _, err := st.GetRun(t.Context(), deleted); err != nil {
			t.Fatalf("the run after a pass within purgeEvery of the last: %v; want it kept", err)
		}
		h.rt.lastPurge.Store(time.Now().Add(2*time.Hour - 2*purgeEvery).UnixNano())
		h.rt.purgeDeleted(t.Context())
		if _, err := st.GetRun(t.Context(), deleted); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the run deleted two hours before the purge: %v, want erased", err)
		}
		if _, err := st.GetRun(t.Context(), kept); err != nil {
			t.Errorf("the run not deleted: %v, want kept", err)
		}
		if n := h.rt.purged.Load(); n != 1 {
			t.Errorf("purged = %d, want 1", n)
		}
		recs, err := st.AuditRecords(t.Context(), 0, 1000)
		if err != nil || len(recs) == 0 {
			t.Fatalf("audit records: %d, %v", len(recs), err)
		}
		last := recs[len(recs)-1]
		var d struct {
			DeletedAt time.Time `json:"deleted_at"`
			After     string    `json:"purge_deleted_after"`
		}
		if last.Kind != string(audit.KindRunErased) || last.RunID != deleted || last.Principal != testOwner.ID() ||
			json.Unmarshal(last.Details, &d) != nil || d.DeletedAt.IsZero() || d.After != "1h0m0s" {
			t.Errorf("the last audit record = %+v; want the erasure of %s, by its owner, with when it was deleted", last, deleted)
		}
	})
}

// TestNoPurgeByDefault: without PurgeDeletedAfter a deleted conversation
// stays, however old.
func TestNoPurgeByDefault(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	h := newHarness(t, st, model.NewDemo(), &Options{Now: func() time.Time { return time.Now().Add(24 * 365 * time.Hour) }})
	code, out := h.call(t, "POST", "/runs", `{"message": "hello"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /runs = %d %v", code, out)
	}
	id := out["runId"].(string)
	waitHandled(t, st, id, 1, 20*time.Second)
	if code, out := h.call(t, "DELETE", "/runs/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %v", code, out)
	}
	h.rt.sweep(t.Context())
	if r, err := st.GetRun(t.Context(), id); err != nil || r.DeletedAt.IsZero() {
		t.Errorf("a deleted run after a sweep with no purge set: %+v, %v; want it kept", r, err)
	}
}

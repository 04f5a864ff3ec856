package assistant

import (
	"bytes"
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

// retentionHarness starts a runtime of o on st with an audit log and a
// clock that runs ahead of the store's by what the returned value holds
// (0 at first): the runtime sees a deletion or an activity of now as that
// old.
func retentionHarness(t *testing.T, st store.Store, o Options) (*harness, *atomic.Int64) {
	t.Helper()
	ahead := new(atomic.Int64)
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Audit = log
	o.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	return newHarness(t, st, model.NewDemo(), &o), ahead
}

// TestPurgeDeletedConversations: with PurgeDeletedAfter set, the sweep
// erases a conversation deleted longer ago than that, and neither one
// deleted since nor one not deleted; it looks again only after
// retainEvery.
func TestPurgeDeletedConversations(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h, ahead := retentionHarness(t, st, Options{PurgeDeletedAfter: time.Hour})
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
		h.rt.retain(t.Context())
		if r, err := st.GetRun(t.Context(), deleted); err != nil || r.DeletedAt.IsZero() {
			t.Fatalf("the run deleted a moment ago after a purge: %+v, %v; want it kept", r, err)
		}
		// Two hours later (past the hour), but within retainEvery of the
		// last pass: not looked at; once it has passed, erased.
		ahead.Store(int64(2 * time.Hour))
		h.rt.lastRetain.Store(time.Now().Add(2*time.Hour - retainEvery/2).UnixNano())
		h.rt.retain(t.Context())
		if _, err := st.GetRun(t.Context(), deleted); err != nil {
			t.Fatalf("the run after a pass within retainEvery of the last: %v; want it kept", err)
		}
		h.rt.lastRetain.Store(time.Now().Add(2*time.Hour - 2*retainEvery).UnixNano())
		h.rt.retain(t.Context())
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

// TestDeleteInactiveConversations: with DeleteInactiveAfter set, the sweep
// deletes a conversation without activity for longer, audited, and not
// one with a turn to take; with PurgeDeletedAfter too, a pass that long
// after erases what it deleted.
func TestDeleteInactiveConversations(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h, ahead := retentionHarness(t, st, Options{DeleteInactiveAfter: 90 * 24 * time.Hour, PurgeDeletedAfter: 200 * 24 * time.Hour})
		code, out := h.call(t, "POST", "/runs", `{"message": "hello"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		quiet := out["runId"].(string)
		waitHandled(t, st, quiet, 1, 20*time.Second)
		if code, out := h.call(t, "POST", "/runs/"+quiet+"/complete", ""); code != http.StatusOK {
			t.Fatalf("complete = %d %v", code, out)
		}
		busy := openRun(t, st, "run_busy", "still waiting for its turn").ID // InProgress, queued

		// 89 days on: kept.
		ahead.Store(int64(89 * 24 * time.Hour))
		h.rt.retain(t.Context())
		if r, err := st.GetRun(t.Context(), quiet); err != nil || !r.DeletedAt.IsZero() {
			t.Fatalf("after 89 days: %+v, %v; want it kept", r, err)
		}
		// 91 days on (the next pass): deleted, audited; the busy run kept.
		ahead.Store(int64(91 * 24 * time.Hour))
		h.rt.retain(t.Context())
		if r, err := st.GetRun(t.Context(), quiet); err != nil || r.DeletedAt.IsZero() {
			t.Fatalf("after 91 days: %+v, %v; want it deleted", r, err)
		}
		if r, err := st.GetRun(t.Context(), busy); err != nil || !r.DeletedAt.IsZero() {
			t.Errorf("the run with a turn to take after 91 days: %+v, %v; want it kept", r, err)
		}
		if code, _ := h.call(t, "GET", "/runs/"+quiet, ""); code != http.StatusNotFound {
			t.Errorf("GET of the deleted run = %d, want 404", code)
		}
		recs, err := st.AuditRecords(t.Context(), 0, 1000)
		if err != nil || len(recs) == 0 {
			t.Fatalf("audit records: %d, %v", len(recs), err)
		}
		if last := recs[len(recs)-1]; last.Kind != string(audit.KindRunExpired) || last.RunID != quiet || last.Principal != testOwner.ID() {
			t.Errorf("the last audit record = %+v; want the deletion of %s, by its owner", last, quiet)
		}
		// 200 days after its deletion (the store's clock is not ahead:
		// it was deleted now): erased.
		ahead.Store(int64(201 * 24 * time.Hour))
		h.rt.retain(t.Context())
		if _, err := st.GetRun(t.Context(), quiet); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("200 days after its deletion: %v, want erased", err)
		}
		if got := [2]int64{h.rt.expired.Load(), h.rt.purged.Load()}; got != [2]int64{1, 1} {
			t.Errorf("expired, purged = %v, want [1 1]", got)
		}
	})
}

func TestInDays(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{24 * time.Hour: "a day", 90 * 24 * time.Hour: "90 days", 36 * time.Hour: "36h0m0s"} {
		if got := inDays(d); got != want {
			t.Errorf("inDays(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestLegalHoldKeepsConversations: a conversation its owner deletes while
// a legal hold stands on them is gone from their view — its attachment's
// URL answers 404 — but the sweep's purge keeps it, with the attachment's
// content; once the hold is lifted, the next purge erases both.
func TestLegalHoldKeepsConversations(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		h, ahead := retentionHarness(t, st, Options{PurgeDeletedAfter: time.Hour})
		image := testImage(t, "png")
		_, a := upload(t, h.api, "exhibit.png", "image/png", image)
		attID := a["id"].(string)
		code, out := h.call(t, "POST", "/runs", `{"message": "see the exhibit", "attachments": ["`+attID+`"]}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		waitHandled(t, st, runID, 1, 20*time.Second)
		if _, err := st.PlaceLegalHold(ctx, store.LegalHold{Principal: testOwner.ID(), Reason: "matter 7", PlacedBy: "test"}, nil); err != nil {
			t.Fatal(err)
		}
		if code, out := h.call(t, "DELETE", "/runs/"+runID, ""); code != http.StatusNoContent {
			t.Fatalf("DELETE = %d %v", code, out)
		}
		if resp, err := http.Get(h.api + "/attachments/" + attID); err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("the deleted conversation's attachment under a hold: %v %v; want 404", resp, err)
		} else {
			resp.Body.Close()
		}

		ahead.Store(int64(2 * time.Hour))
		h.rt.lastRetain.Store(0)
		h.rt.retain(ctx)
		if r, err := st.GetRun(ctx, runID); err != nil || r.DeletedAt.IsZero() {
			t.Fatalf("the held person's deleted conversation after a purge: %+v, %v; want it kept, deleted", r, err)
		}
		if _, data, err := st.AttachmentData(ctx, attID); err != nil || !bytes.Equal(data, image) {
			t.Errorf("its attachment after the purge: %d bytes, %v; want it kept", len(data), err)
		}

		if _, err := st.LiftLegalHold(ctx, testOwner.ID(), nil); err != nil {
			t.Fatal(err)
		}
		h.rt.lastRetain.Store(0)
		h.rt.retain(ctx)
		if _, err := st.GetRun(ctx, runID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the conversation after the lift and a purge: %v, want erased", err)
		}
		if _, _, err := st.AttachmentData(ctx, attID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("its attachment after the lift and a purge: %v, want erased", err)
		}
		if n := h.rt.purged.Load(); n != 1 {
			t.Errorf("purged = %d, want 1", n)
		}
	})
}

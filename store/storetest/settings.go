package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testSettings: a person's settings are the defaults until saved, are
// replaced whole by PutSettings, belong to their principal alone, and an
// unknown theme or send key, or a NUL in the text, is refused and stores
// nothing.
func testSettings(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.GetSettings(ctx, queueOwner)
	if err != nil || got != store.DefaultSettings(queueOwner) {
		t.Fatalf("GetSettings before any = %+v, %v; want the defaults", got, err)
	}
	want := store.Settings{Principal: queueOwner, Instructions: "Answer in French.\nBe brief.", DefaultModel: "small", Theme: "dark", SendKey: "ctrl-enter"}
	put, err := s.PutSettings(ctx, want)
	if err != nil || put.UpdatedAt.IsZero() {
		t.Fatalf("PutSettings = %+v, %v", put, err)
	}
	want.UpdatedAt = put.UpdatedAt
	if got, err := s.GetSettings(ctx, queueOwner); err != nil || got != want {
		t.Fatalf("GetSettings = %+v, %v; want %+v", got, err, want)
	}
	if got, _ := s.GetSettings(ctx, "issuer|tenant|bob"); got != store.DefaultSettings("issuer|tenant|bob") {
		t.Fatalf("another person's settings = %+v, want the defaults", got)
	}
	for name, bad := range map[string]store.Settings{
		"unknown theme":    {Principal: queueOwner, Theme: "sepia", SendKey: "enter"},
		"unknown send key": {Principal: queueOwner, Theme: "light", SendKey: "shift-enter"},
		"NUL":              {Principal: queueOwner, Instructions: "a\x00b", Theme: "light", SendKey: "enter"},
		"no principal":     {Theme: "light", SendKey: "enter"},
	} {
		if _, err := s.PutSettings(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutSettings(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if got, _ := s.GetSettings(ctx, queueOwner); got != want {
		t.Fatalf("GetSettings after the refusals = %+v, want %+v", got, want)
	}
	// Saving again replaces every field.
	again := store.DefaultSettings(queueOwner)
	put, err = s.PutSettings(ctx, again)
	if again.UpdatedAt = put.UpdatedAt; err != nil || put != again {
		t.Fatalf("PutSettings(defaults) = %+v, %v", put, err)
	}
}

// testPins: a person pins their own runs (again keeps the first time),
// the latest pinned first; not another's, a missing or a deleted run; a
// deleted run's pin is not listed; unpinning twice is fine.
func testPins(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		mustOpenRun(t, s, id, nil)
	}
	mustCreateRun(t, s, store.Run{ID: "bobs", Owner: "issuer|tenant|bob", Status: store.RunInProgress})
	first, err := s.PinRun(ctx, queueOwner, "run-1")
	if err != nil || first.RunID != "run-1" || first.PinnedAt.IsZero() {
		t.Fatalf("PinRun = %+v, %v", first, err)
	}
	if _, err := s.PinRun(ctx, queueOwner, "run-3"); err != nil {
		t.Fatal(err)
	}
	if again, err := s.PinRun(ctx, queueOwner, "run-1"); err != nil || !again.PinnedAt.Equal(first.PinnedAt) {
		t.Fatalf("PinRun again = %+v, %v; want the first pin's time %v", again, err, first.PinnedAt)
	}
	for _, id := range []string{"bobs", "missing"} {
		if _, err := s.PinRun(ctx, queueOwner, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PinRun(%s) = %v, want ErrNotFound", id, err)
		}
	}
	if got := pinIDs(t, s, queueOwner); !slices.Equal(got, []string{"run-3", "run-1"}) {
		t.Fatalf("ListPins = %v, want [run-3 run-1]", got)
	}
	if got := pinIDs(t, s, "issuer|tenant|bob"); len(got) != 0 {
		t.Fatalf("bob's pins = %v, want none", got)
	}
	if err := s.DeleteRun(ctx, "run-3", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PinRun(ctx, queueOwner, "run-3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PinRun(deleted) = %v, want ErrNotFound", err)
	}
	if got := pinIDs(t, s, queueOwner); !slices.Equal(got, []string{"run-1"}) {
		t.Fatalf("ListPins after deleting run-3 = %v, want [run-1]", got)
	}
	for range 2 {
		if err := s.UnpinRun(ctx, queueOwner, "run-1"); err != nil {
			t.Fatalf("UnpinRun = %v", err)
		}
	}
	if got := pinIDs(t, s, queueOwner); len(got) != 0 {
		t.Fatalf("ListPins after unpinning = %v, want none", got)
	}
}

func pinIDs(t *testing.T, s store.Store, principal string) []string {
	t.Helper()
	pins, err := s.ListPins(t.Context(), principal)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(pins))
	for i, p := range pins {
		ids[i] = p.RunID
	}
	return ids
}

// testParkRun: a quiet run is parked Idle at once, which frees its place
// under the active limit, and wakes on its next message; a run with work
// (queued, leased, an unanswered message), a pending approval or closed is
// not parked (ErrConflict); a missing or deleted one is ErrNotFound.
func testParkRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "quiet", nil)
	first := userMessage("hi")
	mustOpenRun(t, s, "queued", &first)
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "sixth", Owner: queueOwner}, 2, nil); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("OpenRun at the limit = %v, want ErrLimit", err)
	}
	parked, err := s.ParkRun(ctx, "quiet")
	if err != nil || parked.Status != store.RunIdle {
		t.Fatalf("ParkRun(quiet) = %+v, %v; want Idle", parked, err)
	}
	if again, err := s.ParkRun(ctx, "quiet"); err != nil || again.Status != store.RunIdle {
		t.Fatalf("ParkRun(Idle) = %+v, %v; want it as it is", again, err)
	}
	if _, created, err := s.OpenRun(ctx, store.Run{ID: "sixth", Owner: queueOwner}, 2, nil); err != nil || !created {
		t.Fatalf("OpenRun after parking = %v, %v; want a new run", created, err)
	}
	if _, r, err := s.PostMessage(ctx, "quiet", userMessage("back")); err != nil || r.Status != store.RunInProgress || r.QueuedAt.IsZero() {
		t.Fatalf("PostMessage to the parked run = %+v, %v; want it InProgress and queued", r, err)
	}

	mustOpenRun(t, s, "leased", &first)
	mustOpenRun(t, s, "closed", nil)
	if _, err := s.CloseRun(ctx, "closed", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	mustCreateRun(t, s, store.Run{ID: "waiting", Owner: queueOwner, Status: store.RunInProgress})
	f := &approvalFixture{t: t, s: s, now: time.Now()}
	b := testBinding()
	b.RunID = "waiting"
	f.create(f.approval("approval-1", b))
	if _, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"queued", "leased", "closed", "waiting"} {
		if r, err := s.ParkRun(ctx, id); !errors.Is(err, store.ErrConflict) {
			t.Errorf("ParkRun(%s) = %+v, %v; want ErrConflict", id, r, err)
		}
	}
	mustCreateRun(t, s, store.Run{ID: "gone", Owner: queueOwner, Status: store.RunInProgress})
	if err := s.DeleteRun(ctx, "gone", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "missing"} {
		if _, err := s.ParkRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ParkRun(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

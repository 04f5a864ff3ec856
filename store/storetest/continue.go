package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// continueParent opens run id, between turns, with a user message and an
// answer (appended, so nothing is queued).
func continueParent(t *testing.T, s store.Store, id, metadata string) store.Run {
	t.Helper()
	ctx := t.Context()
	if _, _, err := s.OpenRun(ctx, store.Run{ID: id, Owner: queueOwner, Title: "trip", Metadata: metadata}, 100, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ typ, payload string }{
		{"message.user", `{"content":"plan a trip"}`},
		{"message.assistant", `{"content":"Where to?","messageSeq":1}`},
	} {
		if _, err := s.AppendEvent(ctx, id, e.typ, json.RawMessage(e.payload)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// continueArgs are ContinueRun's arguments for a child of parent.
func continueArgs(parent, child string) (store.Run, store.NewEvent, store.NewEvent, *store.ContextSnapshot) {
	return store.Run{ID: child, Owner: queueOwner, Title: "Continued: trip", IdempotencyKey: "compact-" + child, Metadata: `{"compactRecentMessages": 4}`, ParentVersion: 1},
		store.NewEvent{Type: "message.summary", Payload: json.RawMessage(`{"content":"The user plans a trip.","fromRun":"` + parent + `","fromVersion":1}`), Preview: "The user plans a trip."},
		store.NewEvent{Type: "agent.run.continued", Payload: json.RawMessage(`{"runId":"` + child + `"}`)},
		&store.ContextSnapshot{Summary: "The user plans a trip.", Tokens: 6, Kind: store.SnapshotManual, Model: "demo"}
}

// testContinueRun: a run continued in a child — the child opens with its
// summary and snapshot, naming its parent; the parent's log names the
// child and the parent is completed; all or nothing, once per key; what
// is not the owner's, not between turns, or over the limit is refused
// with nothing written.
func testContinueRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	parent := continueParent(t, s, "run-p", `{"compactRecentMessages": 4}`)
	child, first, note, summary := continueArgs("run-p", "run-c")
	got, created, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-p", Child: child, First: first, Note: note, Summary: summary, MaxActive: 5})
	if err != nil || !created {
		t.Fatalf("ContinueRun = created %v, %v", created, err)
	}
	if got.ID != "run-c" || got.Status != store.RunInProgress || got.ParentRunID != "run-p" || got.ParentVersion != 1 ||
		got.Metadata != child.Metadata || got.LastSeq != 1 || got.MessageCount != 1 || !got.QueuedAt.IsZero() || got.Title != child.Title {
		t.Errorf("child = %+v", got)
	}
	if stored, err := s.GetRun(ctx, "run-c"); err != nil || stored != got {
		t.Errorf("GetRun(child) = %+v, %v; want %+v", stored, err, got)
	}
	events, err := s.ListEvents(ctx, "run-c", 0, 10)
	if err != nil || len(events) != 1 || events[0].Type != "message.summary" || events[0].Seq != 1 {
		t.Fatalf("child events = %+v, %v", events, err)
	}
	snap, err := s.LatestSnapshot(ctx, "run-c")
	if err != nil || snap.Version != 1 || snap.FromSeq != 1 || snap.ToSeq != 1 || snap.Summary != summary.Summary || snap.Kind != store.SnapshotManual {
		t.Errorf("child snapshot = %+v, %v", snap, err)
	}
	p, err := s.GetRun(ctx, "run-p")
	if err != nil || p.Status != store.RunCompleted || p.LastSeq != parent.LastSeq+1 || p.MessageCount != parent.MessageCount {
		t.Errorf("parent = %+v, %v; want completed with the note", p, err)
	}
	pe, err := s.ListEvents(ctx, "run-p", parent.LastSeq, 10)
	if err != nil || len(pe) != 1 || pe[0].Type != "agent.run.continued" {
		t.Errorf("parent's new events = %+v, %v", pe, err)
	}
	if ids, err := s.ChildRuns(ctx, "run-p"); err != nil || !reflect.DeepEqual(ids, []string{"run-c"}) {
		t.Errorf("ChildRuns = %v, %v", ids, err)
	}
	if ids, err := s.ChildRuns(ctx, "run-c"); err != nil || len(ids) != 0 {
		t.Errorf("ChildRuns(child) = %v, %v; want none", ids, err)
	}

	// The same key again: the child, and nothing written.
	again, created, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-p", Child: child, First: first, Note: note, Summary: summary, MaxActive: 5})
	if err != nil || created || again.ID != "run-c" {
		t.Errorf("ContinueRun again = %+v, created %v, %v; want the child", again, created, err)
	}
	if p2, _ := s.GetRun(ctx, "run-p"); p2.LastSeq != p.LastSeq {
		t.Errorf("a retry appended to the parent: last seq %d, was %d", p2.LastSeq, p.LastSeq)
	}
	// A closed run may be continued again, in another child.
	child2, first2, note2, _ := continueArgs("run-p", "run-c2")
	if _, created, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-p", Child: child2, First: first2, Note: note2, MaxActive: 5}); err != nil || !created {
		t.Errorf("ContinueRun of a completed run = created %v, %v", created, err)
	}
	if ids, _ := s.ChildRuns(ctx, "run-p"); !reflect.DeepEqual(ids, []string{"run-c", "run-c2"}) {
		t.Errorf("ChildRuns = %v, want both", ids)
	}

	// Refusals write nothing.
	continueParent(t, s, "run-q", "")
	unchanged := func(t *testing.T, child string) {
		t.Helper()
		if _, err := s.GetRun(ctx, child); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetRun(%s) = %v, want no such run", child, err)
		}
		q, err := s.GetRun(ctx, "run-q")
		if err != nil || q.Status != store.RunInProgress || q.LastSeq != 2 {
			t.Errorf("run-q = %+v, %v; want it untouched", q, err)
		}
	}
	tests := []struct {
		name   string
		from   string
		change func(*store.Run, *store.NewEvent)
		want   error
	}{
		{"another owner's", "run-q", func(r *store.Run, _ *store.NewEvent) { r.Owner = "issuer|tenant|mallory" }, store.ErrNotFound},
		{"missing", "run-missing", nil, store.ErrNotFound},
		{"first is no message", "run-q", func(_ *store.Run, e *store.NewEvent) { e.Type = "agent.note" }, store.ErrInvalid},
		{"metadata not an object", "run-q", func(r *store.Run, _ *store.NewEvent) { r.Metadata = `[1]` }, store.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			child, first, note, summary := continueArgs(tt.from, "run-x")
			if tt.change != nil {
				tt.change(&child, &first)
			}
			if _, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: tt.from, Child: child, First: first, Note: note, Summary: summary, MaxActive: 5}); !errors.Is(err, tt.want) {
				t.Errorf("ContinueRun = %v, want %v", err, tt.want)
			}
			unchanged(t, "run-x")
		})
	}
	t.Run("over the limit", func(t *testing.T) {
		// Besides run-q: the two children, four more and run-r.
		for _, id := range []string{"run-l1", "run-l2", "run-l3", "run-l4"} {
			if _, _, err := s.OpenRun(ctx, store.Run{ID: id, Owner: queueOwner}, 100, nil); err != nil {
				t.Fatal(err)
			}
		}
		continueParent(t, s, "run-r", "")
		child, first, note, summary := continueArgs("run-q", "run-x")
		if _, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-q", Child: child, First: first, Note: note, Summary: summary, MaxActive: 5}); !errors.Is(err, store.ErrLimit) {
			t.Errorf("ContinueRun over the limit = %v, want ErrLimit", err)
		}
		unchanged(t, "run-x")
	})
	t.Run("a message waiting", func(t *testing.T) {
		if _, _, err := s.PostMessage(ctx, "run-r", userMessage("wait for me")); err != nil {
			t.Fatal(err)
		}
		before, _ := s.GetRun(ctx, "run-r")
		child, first, note, summary := continueArgs("run-r", "run-y")
		if _, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-r", Child: child, First: first, Note: note, Summary: summary, MaxActive: 100}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("ContinueRun with a message waiting = %v, want ErrConflict", err)
		}
		if after, _ := s.GetRun(ctx, "run-r"); after != before {
			t.Errorf("run-r = %+v, was %+v", after, before)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		if err := s.DeleteRun(ctx, "run-l1", nil, store.Withdrawal{}); err != nil {
			t.Fatal(err)
		}
		child, first, note, summary := continueArgs("run-l1", "run-z")
		if _, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: "run-l1", Child: child, First: first, Note: note, Summary: summary, MaxActive: 100}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ContinueRun of a deleted run = %v, want ErrNotFound", err)
		}
	})
}

// testRenameRun: a title is set on a live or closed run, and refused for
// a deleted or missing one and for text that is not storable.
func testRenameRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	continueParent(t, s, "run-1", "")
	before, _ := s.GetRun(ctx, "run-1")
	r, err := s.RenameRun(ctx, "run-1", "Lisbon in May")
	if err != nil || r.Title != "Lisbon in May" || r.LastSeq != before.LastSeq || r.Status != before.Status {
		t.Fatalf("RenameRun = %+v, %v", r, err)
	}
	if got, _ := s.GetRun(ctx, "run-1"); got.Title != "Lisbon in May" {
		t.Errorf("GetRun after RenameRun: title %q", got.Title)
	}
	if events, _ := s.ListEvents(ctx, "run-1", before.LastSeq, 10); len(events) != 0 {
		t.Errorf("RenameRun appended %+v", events)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.RenameRun(ctx, "run-1", "Lisbon, done"); err != nil || r.Title != "Lisbon, done" {
		t.Errorf("RenameRun of a completed run = %+v, %v", r, err)
	}
	if _, err := s.RenameRun(ctx, "run-1", "bad \x00 title"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RenameRun with a NUL = %v, want ErrInvalid", err)
	}
	if err := s.DeleteRun(ctx, "run-1", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "missing"} {
		if _, err := s.RenameRun(ctx, id, "x"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RenameRun(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

// testSetRunMetadata: a run's metadata is replaced, on a live or closed
// run, and refused for a deleted or missing one and for what is not a
// JSON object.
func testSetRunMetadata(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress, Metadata: `{"compactThreshold":0.5}`})
	before, _ := s.GetRun(ctx, "run-1")
	r, err := s.SetRunMetadata(ctx, "run-1", `{"compactThreshold":0.5,"model":"large"}`)
	if err != nil || !jsonEqual([]byte(r.Metadata), []byte(`{"compactThreshold":0.5,"model":"large"}`)) || r.LastSeq != before.LastSeq || r.Status != before.Status {
		t.Fatalf("SetRunMetadata = %+v, %v", r, err)
	}
	if got, _ := s.GetRun(ctx, "run-1"); !jsonEqual([]byte(got.Metadata), []byte(`{"compactThreshold":0.5,"model":"large"}`)) {
		t.Errorf("GetRun after SetRunMetadata: metadata %s", got.Metadata)
	}
	if events, _ := s.ListEvents(ctx, "run-1", before.LastSeq, 10); len(events) != 0 {
		t.Errorf("SetRunMetadata appended %+v", events)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.SetRunMetadata(ctx, "run-1", ""); err != nil || (r.Metadata != "" && !jsonEqual([]byte(r.Metadata), []byte(`{}`))) {
		t.Errorf("SetRunMetadata of a completed run to none = %+v, %v", r, err)
	}
	for _, bad := range []string{`[1]`, `{"a":`, `"x"`, `{"a":"` + strings.Repeat("x", store.MaxRunMetadata) + `"}`} {
		if _, err := s.SetRunMetadata(ctx, "run-1", bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SetRunMetadata(%.20s) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.DeleteRun(ctx, "run-1", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "missing"} {
		if _, err := s.SetRunMetadata(ctx, id, `{}`); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetRunMetadata(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

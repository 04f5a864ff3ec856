package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// Deleting a message: a branch whose line is the active one without the
// message (and its answer), the line left kept and switched back to, what
// refuses a deletion, and the idempotency key.

// testDeleteMessage: deleting the first exchange's user message makes a
// branch without it and its reply, the old line stays readable and
// active again after a switch, a deletion inside a branch keeps that
// branch's cut, and the next user message lands on the new line.
func testDeleteMessage(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id) // user 1 (reply 3), user 5 (reply 7); last seq 8

	b, ev, r, err := s.DeleteMessage(ctx, id, store.Deletion{At: 1, CreatedBy: queueOwner})
	if err != nil {
		t.Fatalf("DeleteMessage(1): %v", err)
	}
	checkStoreTime(t, "Branch.CreatedAt", b.CreatedAt)
	want := store.Branch{RunID: id, ID: 1, Parent: 0, ForkSeq: 1, MessageSeq: 9, Kind: store.BranchDelete,
		CreatedBy: queueOwner, CreatedAt: b.CreatedAt,
		Line: []store.LineSegment{{Branch: 0, From: 5, Until: 9}, {Branch: 1, Until: store.MaxSeq}}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("DeleteMessage(1) branch = %+v\nwant %+v", b, want)
	}
	var data map[string]int64
	if err := json.Unmarshal(ev.Payload, &data); err != nil || ev.Type != store.EventBranchDelete || ev.Seq != 9 || ev.Branch != 1 ||
		!reflect.DeepEqual(data, map[string]int64{"deletes": 1, "untilSeq": 5, "from": 0}) {
		t.Errorf("DeleteMessage(1) event = %+v (%s), want %s at 9 on branch 1 with deletes 1, untilSeq 5, from 0", ev, ev.Payload, store.EventBranchDelete)
	}
	if r.ActiveBranch != 1 || r.Branches != 1 || r.LastSeq != 9 || !r.QueuedAt.IsZero() || r.TurnSeq != 0 {
		t.Errorf("run after the deletion = %+v, want branch 1 active, nothing queued", r)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{5, 7}) {
		t.Errorf("active line after deleting message 1 = %v, want [5 7]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(0)}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Errorf("the kept line = %v, want [1 3 5 7]", got)
	}
	if got, err := s.ListBranches(ctx, id); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("ListBranches = %+v, %v; want the deletion's branch", got, err)
	}

	// A message posted now goes on the new line and is answered there.
	if _, _, err := s.PostMessage(ctx, id, userMessage("and Porto?")); err != nil { // 10
		t.Fatal(err)
	}
	answerTurn(t, s, id, 10, "Porto too.") // 11, 12, 13
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{5, 7, 10, 12}) {
		t.Errorf("active line after a new exchange = %v, want [5 7 10 12]", got)
	}

	// Deleting a reply takes only it; the earlier cut stays.
	b2, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 7, CreatedBy: queueOwner})
	if err != nil {
		t.Fatalf("DeleteMessage(7): %v", err)
	}
	if b2.ID != 2 || b2.Parent != 0 || b2.ForkSeq != 7 || b2.MessageSeq != 14 {
		t.Errorf("DeleteMessage(7) = %+v, want branch 2 forked from 0 at 7, starting at 14", b2)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{5, 10, 12}) {
		t.Errorf("active line after deleting the reply 7 = %v, want [5 10 12]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(1)}); !slices.Equal(got, []int64{5, 7, 10, 12}) {
		t.Errorf("branch 1 after the second deletion = %v, want [5 7 10 12]", got)
	}

	// Switching back shows the kept line, whole.
	if _, err := s.SwitchBranch(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Errorf("active line after switching back = %v, want [1 3 5 7]", got)
	}
	// What the original line gets now is not on the deletion's lines.
	if _, _, err := s.PostMessage(ctx, id, userMessage("back here")); err != nil { // 16
		t.Fatal(err)
	}
	answerTurn(t, s, id, 16, "ok")
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(2)}); !slices.Equal(got, []int64{5, 10, 12}) {
		t.Errorf("branch 2 after the original line went on = %v, want [5 10 12]", got)
	}
	// Deleting the last exchange leaves the line before it.
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 16, CreatedBy: queueOwner}); err != nil {
		t.Fatalf("DeleteMessage(16): %v", err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Errorf("active line after deleting the last exchange = %v, want [1 3 5 7]", got)
	}
	// An edit on a line with a cut keeps the cut.
	if _, err := s.SwitchBranch(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 10, Kind: store.BranchEdit, CreatedBy: queueOwner, Message: userMessage("and Faro?")}); err != nil {
		t.Fatalf("ForkRun on a cut line: %v", err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); len(got) != 3 || got[0] != 5 || got[1] != 7 {
		t.Errorf("an edit of message 10 on branch 1 reads %v, want [5 7 edit]", got)
	}
}

// testDeleteMessageRefusals: a message of another line, a tool result, a
// busy run, a closed or deleted run, and a key used by another kind of
// request are refused, and write nothing; a key used by a deletion
// answers it again.
func testDeleteMessageRefusals(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id)
	before := mustGetRun(t, s, id)
	for _, tt := range []struct {
		name string
		d    store.Deletion
		want error
	}{
		{"no message", store.Deletion{At: 0}, store.ErrInvalid},
		{"a turn record", store.Deletion{At: 2}, store.ErrConflict},
		{"beyond the log", store.Deletion{At: 99}, store.ErrConflict},
	} {
		if _, _, _, err := s.DeleteMessage(ctx, id, tt.d); !errors.Is(err, tt.want) {
			t.Errorf("%s: DeleteMessage = %v, want %v", tt.name, err, tt.want)
		}
	}
	if after := mustGetRun(t, s, id); after.LastSeq != before.LastSeq || after.Branches != 0 {
		t.Errorf("refused deletions wrote: %+v", after)
	}

	// A tool result goes with its call.
	if _, _, err := s.PostMessage(ctx, id, userMessage("list")); err != nil { // 9
		t.Fatal(err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 1}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("DeleteMessage while a message waits = %v, want ErrBusy", err)
	}
	claimed, err := s.ClaimRuns(ctx, "branch-worker", 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 1}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("DeleteMessage during a turn = %v, want ErrBusy", err)
	}
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{},
		store.NewEvent{Type: "agent.turn.start", Payload: []byte(`{"messageSeq":9}`), StartsTurn: 9},
		store.NewEvent{Type: "message.assistant", Payload: []byte(`{"content":"","toolCalls":[{"id":"c1","name":"notes_list","arguments":{}}],"messageSeq":9}`)},
		store.NewEvent{Type: "message.tool", Payload: []byte(`{"toolCallId":"c1","name":"notes_list","content":"[]","status":"succeeded","messageSeq":9}`)},
		store.NewEvent{Type: "message.assistant", Payload: []byte(`{"content":"none","messageSeq":9}`)},
		store.NewEvent{Type: store.EventTurnEnd, Payload: []byte(`{"messageSeq":9,"status":"completed"}`), EndsTurn: true},
	); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 12}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeleteMessage of a tool result = %v, want ErrInvalid", err)
	}
	// A reply that called tools goes with their results.
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 11, Key: "k1"}); err != nil {
		t.Fatalf("DeleteMessage of a reply that called a tool: %v", err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7, 9, 13}) {
		t.Errorf("line after deleting the call 11 = %v, want [1 3 5 7 9 13]", got)
	}
	// The key answers again, even off the line it made; used by other
	// requests it conflicts.
	again, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 11, Key: "k1"})
	if err != nil || again.ID != 1 {
		t.Errorf("DeleteMessage again with its key = %+v, %v; want branch 1", again, err)
	}
	if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 9, Kind: store.BranchEdit, Message: userMessage("x"), Key: "k1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ForkRun with a deletion's key = %v, want ErrConflict", err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 9}); err != nil {
		t.Fatal(err)
	}
	// A message of another line is not on the active one.
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 11}); !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrBusy) {
		t.Errorf("DeleteMessage of a message off the active line = %v, want ErrConflict", err)
	}

	if _, err := s.CloseRun(ctx, id, store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 1}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("DeleteMessage of a completed run = %v, want ErrClosed", err)
	}
	if _, _, _, err := s.DeleteMessage(ctx, "no-such-run", store.Deletion{At: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteMessage of no run = %v, want ErrNotFound", err)
	}
}

// mustGetRun reads the run id.
func mustGetRun(t *testing.T, s store.Store, id string) store.Run {
	t.Helper()
	r, err := s.GetRun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testDeleteSnapshots: a snapshot that covers a deleted message does not
// apply to the line without it, and one written on that line applies to
// the lines that share its cut.
func testDeleteSnapshots(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id) // user 1 (reply 3), user 5 (reply 7)
	snap := func(version, to int64, summary string) store.ContextSnapshot {
		return store.ContextSnapshot{RunID: id, Version: version, FromSeq: 1, ToSeq: to, Summary: summary, Kind: store.SnapshotAutomatic}
	}
	if _, err := s.AppendSnapshot(ctx, snap(1, 7, "Lisbon, after asking where")); err != nil {
		t.Fatal(err)
	}
	// Branch 1 leaves out the reply 3, which the snapshot covers.
	if _, _, _, err := s.DeleteMessage(ctx, id, store.Deletion{At: 3}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LatestSnapshot(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSnapshot of the line without a message its snapshot covers = %+v, %v; want none", got, err)
	}
	on1, err := s.AppendSnapshot(ctx, snap(1, 7, "Lisbon"))
	if err != nil || on1.Branch != 1 {
		t.Fatalf("AppendSnapshot on the cut line = %+v, %v", on1, err)
	}
	// An edit of a later message keeps the cut, and so the snapshot.
	if _, _, err := s.PostMessage(ctx, id, userMessage("a hotel?")); err != nil { // 10
		t.Fatal(err)
	}
	answerTurn(t, s, id, 10, "Yes.")
	if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 10, Kind: store.BranchEdit, Message: userMessage("a flat?")}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LatestSnapshot(ctx, id); err != nil || got != on1 {
		t.Errorf("LatestSnapshot of an edit on the cut line = %+v, %v; want %+v", got, err, on1)
	}
}

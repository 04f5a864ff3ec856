package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// Branches: a fork replaces a user message of the active line with a new
// branch, the line each branch reads, switching, what refuses them, and
// the snapshots each line sees.

// answerTurn works the run's queued turn as a runtime would: it claims
// the run, answers the user message seq with one assistant message and
// ends the turn and the lease. It returns the assistant message.
func answerTurn(t *testing.T, s store.Store, runID string, seq int64, reply string) store.Event {
	t.Helper()
	ctx := t.Context()
	claimed, err := s.ClaimRuns(ctx, "branch-worker", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(claimed, func(r store.Run) bool { return r.ID == runID })
	if i < 0 {
		t.Fatalf("ClaimRuns = %+v, want %s among them", claimed, runID)
	}
	events, _, err := s.EndLease(ctx, claimed[i].Lease(), store.Release{},
		store.NewEvent{Type: "agent.turn.start", Payload: fmt.Appendf(nil, `{"messageSeq":%d}`, seq), StartsTurn: seq},
		store.NewEvent{Type: "message.assistant", Payload: fmt.Appendf(nil, `{"content":%q,"messageSeq":%d}`, reply, seq), Preview: reply},
		store.NewEvent{Type: store.EventTurnEnd, Payload: fmt.Appendf(nil, `{"messageSeq":%d,"status":"completed"}`, seq), EndsTurn: true})
	if err != nil {
		t.Fatalf("answering message %d: %v", seq, err)
	}
	return events[1]
}

// messageSeqs lists the sequences of the messages ListMessages returns
// for q.
func messageSeqs(t *testing.T, s store.Store, runID string, q store.MessageQuery) []int64 {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 100
	}
	msgs, err := s.ListMessages(t.Context(), runID, q)
	if err != nil {
		t.Fatalf("ListMessages(%+v): %v", q, err)
	}
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

func onBranch(b int64) *int64 { return &b }

// twoTurns opens the run id with two answered turns: user messages at 1
// and 5, their replies at 3 and 7 (each turn's start and end around its
// reply).
func twoTurns(t *testing.T, s store.Store, id string) {
	t.Helper()
	first := userMessage("plan a trip")
	mustOpenRun(t, s, id, &first)
	answerTurn(t, s, id, 1, "Where to?")
	if _, _, err := s.PostMessage(t.Context(), id, userMessage("to Lisbon")); err != nil {
		t.Fatal(err)
	}
	answerTurn(t, s, id, 5, "Lisbon it is.")
}

// testBranches: each fork makes a branch whose line is its parent's line
// before the replaced message and then its own messages; ListMessages
// reads the active line, or the one named; switching changes which line
// is read and which branch new events carry; and the log keeps every
// event as it was appended.
func testBranches(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id)
	if got, err := s.ListBranches(ctx, id); err != nil || len(got) != 0 {
		t.Fatalf("ListBranches of a run that never branched = %+v, %v; want none", got, err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Fatalf("messages before any branch = %v", got)
	}

	fork := func(at int64, kind store.BranchKind, text string) (store.Branch, store.Event, store.Run) {
		t.Helper()
		b, ev, r, err := s.ForkRun(ctx, id, store.Fork{At: at, Kind: kind, CreatedBy: queueOwner, Message: userMessage(text)})
		if err != nil {
			t.Fatalf("ForkRun at %d: %v", at, err)
		}
		checkStoreTime(t, "Branch.CreatedAt", b.CreatedAt)
		if ev.Seq != b.MessageSeq || ev.Branch != b.ID || ev.Type != store.EventUserMessage ||
			r.ActiveBranch != b.ID || r.Branches != b.ID || r.QueuedAt.IsZero() || r.LastSeq != ev.Seq {
			t.Fatalf("ForkRun at %d = %+v, %+v, %+v; want the branch active, its message on it, the run queued", at, b, ev, r)
		}
		return b, ev, r
	}
	line := func(segs ...int64) []store.LineSegment {
		var out []store.LineSegment
		for i := 0; i+1 < len(segs); i += 2 {
			out = append(out, store.LineSegment{Branch: segs[i], Until: segs[i+1]})
		}
		return out
	}
	checkBranch := func(b store.Branch, want store.Branch) {
		t.Helper()
		want.RunID, want.CreatedBy, want.CreatedAt = id, queueOwner, b.CreatedAt
		if !reflect.DeepEqual(b, want) {
			t.Errorf("branch = %+v\nwant %+v", b, want)
		}
	}

	// An edit of the second message: branch 1 sees the first exchange.
	b1, _, _ := fork(5, store.BranchEdit, "to Porto")
	checkBranch(b1, store.Branch{ID: 1, Parent: 0, ForkSeq: 5, MessageSeq: 9, Kind: store.BranchEdit, Line: line(0, 5, 1, store.MaxSeq)})
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 9}) {
		t.Errorf("active line after the edit = %v, want [1 3 9]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(0)}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Errorf("the original line after the edit = %v, want [1 3 5 7]", got)
	}
	// Busy until the edited message is answered.
	if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 9, Kind: store.BranchEdit, Message: userMessage("x")}); !errors.Is(err, store.ErrBusy) || !errors.Is(err, store.ErrConflict) {
		t.Errorf("ForkRun while a message waits = %v, want ErrBusy (a conflict)", err)
	}
	if _, err := s.SwitchBranch(ctx, id, 0); !errors.Is(err, store.ErrBusy) {
		t.Errorf("SwitchBranch while a message waits = %v, want ErrBusy", err)
	}
	if reply := answerTurn(t, s, id, 9, "Porto it is."); reply.Seq != 11 || reply.Branch != 1 { // 10, 11, 12
		t.Errorf("the answer on branch 1 = %+v, want seq 11 on branch 1", reply)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 9, 11}) {
		t.Errorf("active line after its answer = %v", got)
	}

	// An edit of the edited message is an alternative of the same
	// message: the same parent and fork.
	b2, _, _ := fork(9, store.BranchEdit, "to Faro")
	checkBranch(b2, store.Branch{ID: 2, Parent: 0, ForkSeq: 5, MessageSeq: 13, Kind: store.BranchEdit, Line: line(0, 5, 2, store.MaxSeq)})
	answerTurn(t, s, id, 13, "Faro it is.") // 14, 15, 16
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 13, 15}) {
		t.Errorf("active line after the second edit = %v", got)
	}

	// What a fork refuses: a message that is no user message, one that
	// is not on the active line, one that does not exist.
	for _, c := range []struct {
		at   int64
		want error
	}{{3, store.ErrInvalid}, {15, store.ErrInvalid}, {14, store.ErrConflict}, {7, store.ErrConflict}, {9, store.ErrConflict}, {99, store.ErrConflict}} {
		if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: c.at, Kind: store.BranchEdit, Message: userMessage("x")}); !errors.Is(err, c.want) || errors.Is(err, store.ErrBusy) {
			t.Errorf("ForkRun at %d = %v, want %v", c.at, err, c.want)
		}
	}
	for _, f := range []store.Fork{
		{At: 0, Kind: store.BranchEdit, Message: userMessage("x")},
		{At: 1, Kind: "rewrite", Message: userMessage("x")},
		{At: 1, Kind: store.BranchEdit, Message: store.NewEvent{Type: "message.assistant"}},
		{At: 1, Kind: store.BranchEdit, Message: store.NewEvent{Type: "message.user", Payload: []byte(`{`)}},
		{At: 1, Kind: store.BranchEdit, Message: store.NewEvent{Type: "message.user", StartsTurn: 1}},
	} {
		if _, _, _, err := s.ForkRun(ctx, id, f); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ForkRun(%+v) = %v, want ErrInvalid", f, err)
		}
	}

	// A regenerate of the first message: a line of its own from the start.
	b3, _, _ := fork(1, store.BranchRegenerate, "plan a trip")
	checkBranch(b3, store.Branch{ID: 3, Parent: 0, ForkSeq: 1, MessageSeq: 17, Kind: store.BranchRegenerate, Line: line(0, 1, 3, store.MaxSeq)})
	answerTurn(t, s, id, 17, "Where to, again?") // 18, 19, 20
	if _, _, err := s.PostMessage(ctx, id, userMessage("to Braga")); err != nil {
		t.Fatal(err)
	}
	answerTurn(t, s, id, 21, "Braga it is.") // 22, 23, 24
	// A fork after the branch's own first message nests: its parent is
	// branch 3.
	b4, _, _ := fork(21, store.BranchEdit, "to Coimbra")
	checkBranch(b4, store.Branch{ID: 4, Parent: 3, ForkSeq: 21, MessageSeq: 25, Kind: store.BranchEdit, Line: line(0, 1, 3, 21, 4, store.MaxSeq)})
	answerTurn(t, s, id, 25, "Coimbra it is.") // 26, 27, 28
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{17, 19, 25, 27}) {
		t.Errorf("active line of the nested branch = %v, want [17 19 25 27]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Last: true, Limit: 2}); !slices.Equal(got, []int64{25, 27}) {
		t.Errorf("the last two messages of the nested branch = %v, want [25 27]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{After: 17, Before: 27}); !slices.Equal(got, []int64{19, 25}) {
		t.Errorf("a window of the nested branch = %v, want [19 25]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(3)}); !slices.Equal(got, []int64{17, 19, 21, 23}) {
		t.Errorf("branch 3's line = %v, want [17 19 21 23]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(1)}); !slices.Equal(got, []int64{1, 3, 9, 11}) {
		t.Errorf("branch 1's line = %v, want [1 3 9 11]", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(7)}); len(got) != 0 {
		t.Errorf("the line of a branch the run does not have = %v, want none", got)
	}

	// Switching back: the original line is read, and goes on; the switch
	// is recorded in the log (29), on the branch made active.
	r, err := s.SwitchBranch(ctx, id, 0)
	if err != nil || r.ActiveBranch != 0 || r.Branches != 4 || !r.QueuedAt.IsZero() {
		t.Fatalf("SwitchBranch(0) = %+v, %v", r, err)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7}) {
		t.Errorf("active line after switching back = %v, want [1 3 5 7]", got)
	}
	ev, _, err := s.PostMessage(ctx, id, userMessage("and a hotel?"))
	if err != nil || ev.Seq != 30 || ev.Branch != 0 {
		t.Fatalf("PostMessage on the original line = %+v, %v; want seq 30 on branch 0", ev, err)
	}
	answerTurn(t, s, id, 30, "Here is one.") // 31, 32, 33
	if got := messageSeqs(t, s, id, store.MessageQuery{}); !slices.Equal(got, []int64{1, 3, 5, 7, 30, 32}) {
		t.Errorf("the original line, continued = %v", got)
	}
	if got := messageSeqs(t, s, id, store.MessageQuery{Branch: onBranch(2)}); !slices.Equal(got, []int64{1, 3, 13, 15}) {
		t.Errorf("branch 2's line after the original went on = %v, want [1 3 13 15]", got)
	}
	if r, err := s.SwitchBranch(ctx, id, 2); err != nil || r.ActiveBranch != 2 || r.LastSeq != 34 {
		t.Fatalf("SwitchBranch(2) = %+v, %v; want branch 2 active, the switch at 34", r, err)
	}
	if r, err := s.SwitchBranch(ctx, id, 2); err != nil || r.ActiveBranch != 2 || r.LastSeq != 34 {
		t.Fatalf("SwitchBranch to the active branch = %+v, %v; want nothing changed", r, err)
	}
	for _, b := range []int64{-1, 5} {
		if _, err := s.SwitchBranch(ctx, id, b); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SwitchBranch(%d) = %v, want ErrInvalid", b, err)
		}
	}
	if _, err := s.ListMessages(ctx, id, store.MessageQuery{Limit: 1, Branch: onBranch(-1)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListMessages of branch -1 = %v, want ErrInvalid", err)
	}

	// The log holds every event, gapless, each on the branch it was
	// appended on.
	events, err := s.ListEvents(ctx, id, 0, 100)
	if err != nil || len(events) != 34 {
		t.Fatalf("ListEvents = %d events, %v; want 34", len(events), err)
	}
	for _, c := range []struct {
		seq  int64
		data string
	}{{29, `{"branch":0,"from":4}`}, {34, `{"branch":2,"from":0}`}} {
		e := events[c.seq-1]
		var got, want any
		json.Unmarshal(e.Payload, &got)
		json.Unmarshal([]byte(c.data), &want)
		if e.Type != store.EventBranchSwitch || !reflect.DeepEqual(got, want) {
			t.Errorf("event %d = %s %s, want %s %s", c.seq, e.Type, e.Payload, store.EventBranchSwitch, c.data)
		}
	}
	wantBranch := func(seq int64) int64 {
		switch {
		case seq == 34:
			return 2
		case seq >= 29:
			return 0
		case seq >= 25:
			return 4
		case seq >= 17:
			return 3
		case seq >= 13:
			return 2
		case seq >= 9:
			return 1
		}
		return 0
	}
	for i, e := range events {
		if e.Seq != int64(i+1) || e.Branch != wantBranch(e.Seq) {
			t.Errorf("event %d = seq %d on branch %d, want seq %d on branch %d", i, e.Seq, e.Branch, i+1, wantBranch(int64(i+1)))
		}
	}
	msgs, err := s.ListMessages(ctx, id, store.MessageQuery{Limit: 10, Branch: onBranch(4)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if e := events[m.Seq-1]; !bytes.Equal(e.Payload, m.Payload) || e.Branch != m.Branch || e.Type != m.Type {
			t.Errorf("message %d read on its line = %+v, the log holds %+v", m.Seq, m, e)
		}
	}

	branches, err := s.ListBranches(ctx, id)
	if err != nil || len(branches) != 4 {
		t.Fatalf("ListBranches = %+v, %v; want 4", branches, err)
	}
	for i, want := range []store.Branch{b1, b2, b3, b4} {
		if !reflect.DeepEqual(branches[i], want) {
			t.Errorf("ListBranches[%d] = %+v\nwant %+v", i, branches[i], want)
		}
	}
	if _, err := s.ListBranches(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListBranches of a missing run = %v, want ErrNotFound", err)
	}
}

// testBranchRefusals: a run branches and switches only between turns —
// not while a turn is open, awaits an approval or is queued — and not
// when it is closed, deleted or missing; an Idle run wakes for the fork.
func testBranchRefusals(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	first := userMessage("hello")
	mustOpenRun(t, s, id, &first)
	answerTurn(t, s, id, 1, "Hi.")
	fork := store.Fork{At: 1, Kind: store.BranchEdit, Message: userMessage("hello again")}
	refused := func(what string, want error) {
		t.Helper()
		if _, _, _, err := s.ForkRun(ctx, id, fork); !errors.Is(err, want) {
			t.Errorf("ForkRun %s = %v, want %v", what, err, want)
		}
		if _, err := s.SwitchBranch(ctx, id, 0); !errors.Is(err, want) {
			t.Errorf("SwitchBranch %s = %v, want %v", what, err, want)
		}
	}

	if _, _, err := s.PostMessage(ctx, id, userMessage("second")); err != nil {
		t.Fatal(err)
	}
	refused("with a message queued", store.ErrBusy)
	claimed, err := s.ClaimRuns(ctx, "w", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	refused("with a message claimed, unanswered", store.ErrBusy)
	lease := claimed[0].Lease()
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "agent.turn.start", StartsTurn: 5}); err != nil {
		t.Fatal(err)
	}
	refused("with a turn open", store.ErrBusy)
	if _, err := s.ReleaseRun(ctx, lease, store.RunAwaitingApproval); err != nil {
		t.Fatal(err)
	}
	refused("awaiting an approval", store.ErrBusy)
	if _, err := s.RequeueRun(ctx, id); err != nil {
		t.Fatal(err)
	}
	refused("requeued after the approval", store.ErrBusy)
	claimed, err = s.ClaimRuns(ctx, "w", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{}, store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true}); err != nil {
		t.Fatal(err)
	}

	// Between turns, parked Idle: the fork wakes the run.
	parked, err := s.ParkIdleRuns(ctx, time.Now().Add(time.Hour))
	if err != nil || len(parked) != 1 {
		t.Fatalf("ParkIdleRuns = %+v, %v", parked, err)
	}
	b, _, r, err := s.ForkRun(ctx, id, fork)
	if err != nil || r.Status != store.RunInProgress || r.QueuedAt.IsZero() || b.ID != 1 {
		t.Fatalf("ForkRun of an Idle run = %+v, %+v, %v; want it woken and queued", b, r, err)
	}
	answerTurn(t, s, id, b.MessageSeq, "Hello.")
	if _, err := s.ParkIdleRuns(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.SwitchBranch(ctx, id, 0); err != nil || r.Status != store.RunIdle || r.ActiveBranch != 0 {
		t.Fatalf("SwitchBranch of an Idle run = %+v, %v; want it switched, still Idle", r, err)
	}

	if _, err := s.CloseRun(ctx, id, store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	refused("of a closed run", store.ErrClosed)
	if err := s.DeleteRun(ctx, id, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	refused("of a deleted run", store.ErrNotFound)
	if _, _, _, err := s.ForkRun(ctx, "missing", fork); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ForkRun of a missing run = %v, want ErrNotFound", err)
	}
	if _, err := s.SwitchBranch(ctx, "missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SwitchBranch of a missing run = %v, want ErrNotFound", err)
	}
}

// testBranchSnapshots: a snapshot applies to the lines that share what it
// covers; each is checked against the active line and stamped with the
// active branch; a branch numbers its versions after those it sees.
func testBranchSnapshots(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id)
	snap := func(version, from, to int64, summary string) store.ContextSnapshot {
		return store.ContextSnapshot{RunID: id, Version: version, FromSeq: from, ToSeq: to, Summary: summary, Kind: store.SnapshotAutomatic}
	}
	put := func(in store.ContextSnapshot, branch int64) store.ContextSnapshot {
		t.Helper()
		out, err := s.AppendSnapshot(ctx, in)
		if err != nil || out.Branch != branch {
			t.Fatalf("AppendSnapshot(version %d, %d to %d) = %+v, %v; want it on branch %d", in.Version, in.FromSeq, in.ToSeq, out, err, branch)
		}
		return out
	}
	latest := func(want store.ContextSnapshot) {
		t.Helper()
		got, err := s.LatestSnapshot(ctx, id)
		if err != nil || got != want {
			t.Errorf("LatestSnapshot = %+v, %v\nwant %+v", got, err, want)
		}
	}
	v1 := put(snap(1, 1, 3, "asked where to"), 0)
	v2 := put(snap(2, 1, 7, "Lisbon"), 0)
	latest(v2)

	// Branch 1 replaces message 5: v2 covers what it does not share.
	b1, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 5, Kind: store.BranchEdit, Message: userMessage("to Porto")})
	if err != nil {
		t.Fatal(err)
	}
	latest(v1)
	if _, err := s.AppendSnapshot(ctx, snap(2, 1, 7, "Lisbon, on the wrong line")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AppendSnapshot ending at a message of another line = %v, want ErrInvalid", err)
	}
	if _, err := s.AppendSnapshot(ctx, snap(3, 1, b1.MessageSeq, "Porto")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendSnapshot of a version after one the line does not see = %v, want ErrConflict", err)
	}
	v2b := put(snap(2, 1, b1.MessageSeq, "Porto"), 1)
	latest(v2b)
	if _, err := s.AppendSnapshot(ctx, snap(2, 1, b1.MessageSeq, "Porto again")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendSnapshot of a version the branch holds = %v, want ErrConflict", err)
	}
	answerTurn(t, s, id, b1.MessageSeq, "Porto it is.")

	// Back on the original line, its own latest applies again.
	if _, err := s.SwitchBranch(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	latest(v2)
	// An edit of the first message shares nothing with any snapshot.
	b2, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 1, Kind: store.BranchEdit, Message: userMessage("plan a hike")})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LatestSnapshot(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSnapshot of a line that shares no snapshot = %+v, %v; want ErrNotFound", got, err)
	}
	if _, err := s.AppendSnapshot(ctx, snap(1, 1, b2.MessageSeq, "a hike")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AppendSnapshot from a message before the line's first = %v, want ErrInvalid", err)
	}
	v1c := put(snap(1, b2.MessageSeq, b2.MessageSeq, "a hike"), 2)
	latest(v1c)

	all, err := s.ListSnapshots(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.ContextSnapshot{v1, v1c, v2, v2b}; !reflect.DeepEqual(all, want) {
		t.Errorf("ListSnapshots = %+v\nwant %+v", all, want)
	}
}

// testBranchRace: a fork racing posts to the run and other forks: of the
// forks exactly one wins unless a post came first (then none does), and
// every post lands on the line that was active when it committed, so that
// each message is answered on its line.
func testBranchRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 4 {
		id := fmt.Sprintf("run-%d", round)
		first := userMessage("hello")
		mustOpenRun(t, s, id, &first)
		answerTurn(t, s, id, 1, "Hi.")
		const forks, posts = 4, 2
		start := make(chan struct{})
		forkErrs := make([]error, forks)
		forked := make([]store.Branch, forks)
		posted := make([]store.Event, posts)
		postErrs := make([]error, posts)
		var wg sync.WaitGroup
		for i := range forks {
			wg.Go(func() {
				<-start
				forked[i], _, _, forkErrs[i] = s.ForkRun(ctx, id, store.Fork{At: 1, Kind: store.BranchEdit, Message: userMessage(fmt.Sprintf("edit %d", i))})
			})
		}
		for i := range posts {
			wg.Go(func() {
				<-start
				posted[i], _, postErrs[i] = s.PostMessage(ctx, id, userMessage(fmt.Sprintf("post %d", i)))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range postErrs {
			if err != nil {
				t.Fatalf("round %d: post %d: %v", round, i, err)
			}
		}
		winner := -1
		for i, err := range forkErrs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("round %d: forks %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrBusy):
				t.Errorf("round %d: fork %d: %v, want nil or ErrBusy", round, i, err)
			}
		}
		r, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if winner < 0 {
			for _, p := range posted {
				if p.Branch != 0 {
					t.Errorf("round %d: no fork won, yet post %d is on branch %d", round, p.Seq, p.Branch)
				}
			}
			if r.ActiveBranch != 0 || r.Branches != 0 {
				t.Errorf("round %d: no fork won, yet the run is %+v", round, r)
			}
			continue
		}
		// A post before the fork would have made it busy: every post
		// came after it, onto its branch.
		b := forked[winner]
		for _, p := range posted {
			if p.Seq < b.MessageSeq || p.Branch != b.ID {
				t.Errorf("round %d: post %d on branch %d, with branch %d's message at %d", round, p.Seq, p.Branch, b.ID, b.MessageSeq)
			}
		}
		if got := messageSeqs(t, s, id, store.MessageQuery{}); len(got) != 1+posts {
			t.Errorf("round %d: the active line = %v, want the edit and the %d posts", round, got, posts)
		}
		if r.ActiveBranch != b.ID || r.Branches != 1 {
			t.Errorf("round %d: the run after the race = %+v", round, r)
		}
	}
}

// testForkOnce: a fork with an idempotency key is made once — a retry,
// even after the branch's turn has started, returns the same branch and
// message and writes nothing; a key a plain message used is refused.
func testForkOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id = "run-1"
	twoTurns(t, s, id)
	f := store.Fork{At: 5, Kind: store.BranchEdit, CreatedBy: queueOwner, Message: userMessage("to Porto"), Key: "edit-1"}
	b, ev, _, err := s.ForkRun(ctx, id, f)
	if err != nil {
		t.Fatal(err)
	}
	// The branch's turn starts: the run is busy, and a retry still finds
	// its fork.
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: ev.Seq}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.GetRun(ctx, id)
	for range 2 {
		b2, ev2, r2, err := s.ForkRun(ctx, id, f)
		if err != nil || b2.ID != b.ID || ev2.Seq != ev.Seq || r2.LastSeq != before.LastSeq || !reflect.DeepEqual(b2.Line, b.Line) {
			t.Fatalf("ForkRun again = %+v, %+v, last seq %d, %v; want branch %d, message %d, nothing written", b2, ev2, r2.LastSeq, err, b.ID, ev.Seq)
		}
	}
	if got, _ := s.ListBranches(ctx, id); len(got) != 1 {
		t.Errorf("%d branches after the retries, want 1", len(got))
	}
	if used, err := s.MessageKeyUsed(ctx, id, f.Key); err != nil || !used {
		t.Errorf("MessageKeyUsed(%q) after the fork = %v, %v; want true", f.Key, used, err)
	}
	// Without the key, the busy run refuses a fork.
	if _, _, _, err := s.ForkRun(ctx, id, store.Fork{At: 5, Kind: store.BranchEdit, CreatedBy: queueOwner, Message: userMessage("to Faro")}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("ForkRun of a busy run = %v, want ErrBusy", err)
	}
	// A key a plain message used.
	const other = "run-2"
	twoTurns(t, s, other)
	if _, _, _, err := s.PostMessageOnce(ctx, other, userMessage("hello"), "msg-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.ForkRun(ctx, other, store.Fork{At: 1, Kind: store.BranchEdit, CreatedBy: queueOwner, Message: userMessage("x"), Key: "msg-1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ForkRun with a message's key = %v, want ErrConflict", err)
	}
}

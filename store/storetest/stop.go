package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// stopEvents are the events that stop the turn of turnSeq: its start
// when it never started, and its end, status stopped.
func stopEvents(turnSeq int64, started bool) []store.NewEvent {
	var out []store.NewEvent
	if !started {
		out = append(out, store.NewEvent{Type: "agent.turn.start", Payload: json.RawMessage(fmt.Sprintf(`{"messageSeq":%d}`, turnSeq)), StartsTurn: turnSeq})
	}
	return append(out, store.NewEvent{Type: store.EventTurnEnd, Payload: json.RawMessage(fmt.Sprintf(`{"status":"stopped","messageSeq":%d}`, turnSeq)), EndsTurn: true})
}

// testStopTurn: a turn that runs is stopped — its end appended, the lease
// fenced off, the run InProgress and queued only for messages after it;
// a message waiting for its turn gets a start and an end at once; with
// nothing to stop, or a closed, deleted or missing run, nothing is
// written.
func testStopTurn(t *testing.T, s store.Store) {
	ctx := t.Context()
	// A turn that runs, a message queued behind it.
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	lease := claimed[0].Lease()
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("and then")); err != nil {
		t.Fatal(err)
	}
	before, _ := s.GetRun(ctx, "run-1")
	stopped, err := s.StopTurn(ctx, "run-1", stopEvents, store.Withdrawal{})
	if err != nil || stopped.Status != store.RunInProgress || stopped.TurnSeq != 0 || stopped.HandledSeq != 1 ||
		stopped.LeaseOwner != "" || stopped.FencingToken != before.FencingToken+1 || stopped.QueuedAt.IsZero() {
		t.Fatalf("StopTurn = %+v, %v; want the turn of 1 ended, the lease fenced, the run queued for the next message", stopped, err)
	}
	events, _ := s.ListEvents(ctx, "run-1", before.LastSeq, 10)
	if len(events) != 1 || events[0].Type != store.EventTurnEnd || !jsonEqual(events[0].Payload, []byte(`{"status":"stopped","messageSeq":1}`)) {
		t.Fatalf("StopTurn appended %+v", events)
	}
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"late"}`)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendLeased with the stopped turn's lease = %v, want ErrConflict", err)
	}

	// The message queued behind it, not started: a start and an end.
	stopped, err = s.StopTurn(ctx, "run-1", stopEvents, store.Withdrawal{})
	if err != nil || stopped.TurnSeq != 0 || stopped.HandledSeq != before.LastSeq || !stopped.QueuedAt.IsZero() {
		t.Fatalf("StopTurn of the waiting message = %+v, %v", stopped, err)
	}
	events, _ = s.ListEvents(ctx, "run-1", before.LastSeq+1, 10)
	if len(events) != 2 || events[0].Type != "agent.turn.start" || events[1].Type != store.EventTurnEnd {
		t.Fatalf("StopTurn of the waiting message appended %+v", events)
	}

	// Nothing written when there is nothing to stop, or the events do
	// not end the turn.
	if _, err := s.StopTurn(ctx, "run-1", stopEvents, store.Withdrawal{}); !errors.Is(err, store.ErrNothingToStop) || !errors.Is(err, store.ErrConflict) {
		t.Errorf("StopTurn with nothing to stop = %v, want ErrNothingToStop", err)
	}
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("third")); err != nil {
		t.Fatal(err)
	}
	last, _ := s.GetRun(ctx, "run-1")
	noEnd := func(int64, bool) []store.NewEvent { return []store.NewEvent{{Type: "agent.note"}} }
	if _, err := s.StopTurn(ctx, "run-1", noEnd, store.Withdrawal{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("StopTurn with events that do not end the turn = %v, want ErrInvalid", err)
	}
	if got, _ := s.GetRun(ctx, "run-1"); got != last {
		t.Errorf("a refused StopTurn changed the run: %+v, was %+v", got, last)
	}

	// A turn paused for an approval: InProgress again.
	mustOpenRun(t, s, "run-2", &first)
	claimed, _ = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v", claimed)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Status: store.RunAwaitingApproval}, store.NewEvent{Type: "agent.turn.pause"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.StopTurn(ctx, "run-2", stopEvents, store.Withdrawal{}); err != nil || r.Status != store.RunInProgress || r.TurnSeq != 0 || !r.QueuedAt.IsZero() {
		t.Errorf("StopTurn of a paused turn = %+v, %v; want InProgress, nothing queued", r, err)
	}

	// Closed, deleted, missing.
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopTurn(ctx, "run-1", stopEvents, store.Withdrawal{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("StopTurn of a completed run = %v, want ErrClosed", err)
	}
	if err := s.DeleteRun(ctx, "run-1", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "missing"} {
		if _, err := s.StopTurn(ctx, id, stopEvents, store.Withdrawal{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("StopTurn(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

// testStopWithdrawsApprovals: stopping a turn withdraws its run's open
// approvals — pending, and approved but unused — each with its audit
// record, in the stop's transaction; they can be neither decided nor
// used after, and other runs' approvals and finished ones are left as
// they are. A record that cannot be built stops nothing.
func testStopWithdrawsApprovals(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	mustCreateRun(t, s, store.Run{ID: "run-2", Owner: "alice", Status: store.RunInProgress})
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
		t.Fatal(err)
	}
	f := &approvalFixture{t: t, s: s, now: time.Now().UTC().Truncate(time.Microsecond)}
	b := testBinding()
	f.create(f.approval("pending-1", b))
	other := b
	other.ArgumentsHash = "args-2"
	f.approved("approved-1", other)
	denied := b
	denied.ArgumentsHash = "args-3"
	f.create(f.approval("denied-1", denied))
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "denied-1", To: store.ApprovalDenied, DecidedBy: "alice", Now: f.now}, nil); err != nil {
		t.Fatal(err)
	}
	elsewhere := b
	elsewhere.RunID = "run-2"
	f.create(f.approval("pending-2", elsewhere))

	// A record that cannot be built: nothing is stopped or withdrawn.
	broken := store.Withdrawal{Reason: "stopped", Audit: func(store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return nil, errors.New("no record")
	}}
	if _, err := s.StopTurn(ctx, "run-1", stopEvents, broken); err == nil {
		t.Fatal("StopTurn with a failing record succeeded")
	}
	if r, _ := s.GetRun(ctx, "run-1"); r.TurnSeq != 1 || f.status("pending-1") != store.ApprovalPending {
		t.Fatalf("after a failed stop: turn %d, approval %s; want both as they were", r.TurnSeq, f.status("pending-1"))
	}

	records := auditCount(t, s)
	var recorded []string
	w := store.Withdrawal{Reason: "You stopped this turn.", Audit: func(a store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
		recorded = append(recorded, a.ID)
		return chained(store.AuditRecord{At: f.now, Kind: "approval_decided", Decision: "withdrawn", ApprovalID: a.ID, RunID: a.Binding.RunID}), nil
	}}
	if _, err := s.StopTurn(ctx, "run-1", stopEvents, w); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]store.ApprovalStatus{
		"pending-1": store.ApprovalWithdrawn, "approved-1": store.ApprovalWithdrawn,
		"denied-1": store.ApprovalDenied, "pending-2": store.ApprovalPending,
	} {
		if got := f.status(id); got != want {
			t.Errorf("approval %s is %s, want %s", id, got, want)
		}
	}
	a, err := s.GetApproval(ctx, "pending-1")
	if err != nil || a.DecidedBy != queueOwner || a.DecisionReason != "You stopped this turn." || a.DecidedAt.IsZero() || a.EndedAt().IsZero() {
		t.Errorf("withdrawn approval = %+v, %v; want decided by the run's owner, with the reason", a, err)
	}
	slices.Sort(recorded)
	if n := auditCount(t, s); n != records+2 || !slices.Equal(recorded, []string{"approved-1", "pending-1"}) {
		t.Errorf("audit records %d → %d for %v, want one per withdrawn approval", records, n, recorded)
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "pending-1", To: store.ApprovalApproved, DecidedBy: "alice", Now: time.Now()}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("deciding a withdrawn approval = %v, want ErrConflict", err)
	}
	if _, err := consume(ctx, s, "approved-1", other, time.Now()); !errors.Is(err, store.ErrConflict) {
		t.Errorf("using a withdrawn approval = %v, want ErrConflict", err)
	}
	if list, err := s.ListApprovals(ctx, b.Principal, store.ApprovalWithdrawn); err != nil || len(list) != 2 {
		t.Errorf("ListApprovals(withdrawn) = %d, %v; want 2", len(list), err)
	}
}

// testKeepStoppedReply: the process a stop fenced off keeps its turn's
// partial reply once, after the turn's end; not twice, not with another
// lease, not once the run was claimed again or closed, and never an event
// that starts or ends a turn.
func testKeepStoppedReply(t *testing.T, s store.Store) {
	ctx := t.Context()
	reply := store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"half","stopped":true,"messageSeq":1}`)}
	stoppedRun := func(id string) store.Lease {
		t.Helper()
		first := userMessage("hi")
		mustOpenRun(t, s, id, &first)
		claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
		}
		lease := claimed[0].Lease()
		if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StopTurn(ctx, id, stopEvents, store.Withdrawal{}); err != nil {
			t.Fatal(err)
		}
		return lease
	}
	lease := stoppedRun("run-1")
	other := lease
	other.Token++
	if _, err := s.KeepStoppedReply(ctx, other, reply); !errors.Is(err, store.ErrConflict) {
		t.Errorf("KeepStoppedReply with another lease = %v, want ErrConflict", err)
	}
	bad := reply
	bad.EndsTurn = true
	if _, err := s.KeepStoppedReply(ctx, lease, bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("KeepStoppedReply of a turn's end = %v, want ErrInvalid", err)
	}
	e, err := s.KeepStoppedReply(ctx, lease, reply)
	if err != nil || e.Type != "message.assistant" {
		t.Fatalf("KeepStoppedReply = %+v, %v", e, err)
	}
	events, _ := s.ListEvents(ctx, "run-1", 0, 10)
	if n := len(events); n < 2 || events[n-1].Seq != e.Seq || events[n-2].Type != store.EventTurnEnd {
		t.Errorf("the kept reply is not right after the turn's end: %+v", events)
	}
	if r, _ := s.GetRun(ctx, "run-1"); r.LastSeq != e.Seq || r.TurnSeq != 0 || r.HandledSeq != 1 {
		t.Errorf("after the kept reply the run is %+v", r)
	}
	if _, err := s.KeepStoppedReply(ctx, lease, reply); !errors.Is(err, store.ErrConflict) {
		t.Errorf("KeepStoppedReply twice = %v, want ErrConflict", err)
	}

	// Claimed again, or closed, since the stop: nothing is kept.
	lease = stoppedRun("run-2")
	if _, _, err := s.PostMessage(ctx, "run-2", userMessage("next")); err != nil {
		t.Fatal(err)
	}
	if claimed, err := s.ClaimRuns(ctx, "replica-b", 1, time.Minute); err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, err := s.KeepStoppedReply(ctx, lease, reply); !errors.Is(err, store.ErrConflict) {
		t.Errorf("KeepStoppedReply after a claim = %v, want ErrConflict", err)
	}
	lease = stoppedRun("run-3")
	if _, err := s.CloseRun(ctx, "run-3", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepStoppedReply(ctx, lease, reply); !errors.Is(err, store.ErrConflict) {
		t.Errorf("KeepStoppedReply after a close = %v, want ErrConflict", err)
	}
}

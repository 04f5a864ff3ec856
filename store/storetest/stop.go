package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
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
	stopped, err := s.StopTurn(ctx, "run-1", stopEvents)
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
	stopped, err = s.StopTurn(ctx, "run-1", stopEvents)
	if err != nil || stopped.TurnSeq != 0 || stopped.HandledSeq != before.LastSeq || !stopped.QueuedAt.IsZero() {
		t.Fatalf("StopTurn of the waiting message = %+v, %v", stopped, err)
	}
	events, _ = s.ListEvents(ctx, "run-1", before.LastSeq+1, 10)
	if len(events) != 2 || events[0].Type != "agent.turn.start" || events[1].Type != store.EventTurnEnd {
		t.Fatalf("StopTurn of the waiting message appended %+v", events)
	}

	// Nothing written when there is nothing to stop, or the events do
	// not end the turn.
	if _, err := s.StopTurn(ctx, "run-1", stopEvents); !errors.Is(err, store.ErrNothingToStop) || !errors.Is(err, store.ErrConflict) {
		t.Errorf("StopTurn with nothing to stop = %v, want ErrNothingToStop", err)
	}
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("third")); err != nil {
		t.Fatal(err)
	}
	last, _ := s.GetRun(ctx, "run-1")
	noEnd := func(int64, bool) []store.NewEvent { return []store.NewEvent{{Type: "agent.note"}} }
	if _, err := s.StopTurn(ctx, "run-1", noEnd); !errors.Is(err, store.ErrInvalid) {
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
	if r, err := s.StopTurn(ctx, "run-2", stopEvents); err != nil || r.Status != store.RunInProgress || r.TurnSeq != 0 || !r.QueuedAt.IsZero() {
		t.Errorf("StopTurn of a paused turn = %+v, %v; want InProgress, nothing queued", r, err)
	}

	// Closed, deleted, missing.
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopTurn(ctx, "run-1", stopEvents); !errors.Is(err, store.ErrClosed) {
		t.Errorf("StopTurn of a completed run = %v, want ErrClosed", err)
	}
	if err := s.DeleteRun(ctx, "run-1", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "missing"} {
		if _, err := s.StopTurn(ctx, id, stopEvents); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("StopTurn(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

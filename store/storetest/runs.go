package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// The assistant runtime's queue: creation under the active-run limit,
// messages, claims, leases and fencing, closing, parking and message
// windows.

const queueOwner = "issuer|tenant|alice"

func userMessage(text string) store.NewEvent {
	p, _ := json.Marshal(map[string]string{"content": text})
	return store.NewEvent{Type: "message.user", Payload: p, Preview: text}
}

func mustOpenRun(t *testing.T, s store.Store, id string, first *store.NewEvent) store.Run {
	t.Helper()
	r, created, err := s.OpenRun(t.Context(), store.Run{ID: id, Owner: queueOwner}, 5, first)
	if err != nil || !created {
		t.Fatalf("OpenRun(%s) = created %v, %v", id, created, err)
	}
	return r
}

func testOpenRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hello there")
	r := mustOpenRun(t, s, "run-1", &first)
	if r.Status != store.RunInProgress || r.QueuedAt.IsZero() || r.LastSeq != 1 || r.MessageCount != 1 || r.Preview != "hello there" {
		t.Fatalf("OpenRun with a message = %+v, want InProgress, queued, one message", r)
	}
	empty := mustOpenRun(t, s, "run-2", nil)
	if !empty.QueuedAt.IsZero() || empty.LastSeq != 0 {
		t.Fatalf("OpenRun without a message = %+v, want not queued", empty)
	}

	// The idempotency key returns the first run, without a new one.
	keyed := store.Run{ID: "run-3", Owner: queueOwner, Title: "keyed", IdempotencyKey: "key-1"}
	if used, err := s.RunKeyUsed(ctx, queueOwner, "key-1"); err != nil || used {
		t.Fatalf("RunKeyUsed(key-1) before the run = %v, %v", used, err)
	}
	if _, created, err := s.OpenRun(ctx, keyed, 5, nil); err != nil || !created {
		t.Fatalf("OpenRun(key-1) = %v, %v", created, err)
	}
	for _, c := range []struct {
		owner, key string
		want       bool
	}{{queueOwner, "key-1", true}, {queueOwner, "key-2", false}, {"someone-else", "key-1", false}, {queueOwner, "", false}} {
		if used, err := s.RunKeyUsed(ctx, c.owner, c.key); err != nil || used != c.want {
			t.Errorf("RunKeyUsed(%q, %q) = %v, %v; want %v", c.owner, c.key, used, err, c.want)
		}
	}
	keyed.ID = "run-4"
	again, created, err := s.OpenRun(ctx, keyed, 5, nil)
	if err != nil || created || again.ID != "run-3" {
		t.Fatalf("OpenRun(key-1) again = %s, created %v, %v; want run-3, not created", again.ID, created, err)
	}

	// Three active runs; the limit of three refuses a fourth, but not for
	// another owner, and a terminal or Idle run does not count.
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-5", Owner: queueOwner}, 3, nil); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("OpenRun over the limit = %v, want ErrLimit", err)
	}
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-5", Owner: "issuer|tenant|bob"}, 3, nil); err != nil {
		t.Fatalf("OpenRun for another owner = %v", err)
	}
	if _, err := s.CloseRun(ctx, "run-2", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-6", Owner: queueOwner}, 3, nil); err != nil {
		t.Fatalf("OpenRun after one completed = %v", err)
	}
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-7", Owner: queueOwner}, 3, nil); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("OpenRun at the limit again = %v, want ErrLimit", err)
	}
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-1", Owner: queueOwner}, 10, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("OpenRun with a duplicate ID = %v, want ErrConflict", err)
	}
	bad := store.NewEvent{Type: "message.user", Payload: json.RawMessage(`{`)}
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-8", Owner: "issuer|tenant|carol"}, 5, &bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("OpenRun with a bad message = %v, want ErrInvalid", err)
	}
	if _, err := s.GetRun(ctx, "run-8"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRun after a refused OpenRun = %v, want ErrNotFound", err)
	}
}

func testOpenRunLimitRace(t *testing.T, s store.Store) {
	const callers, limit = 20, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, limited := 0, 0
	for i := range callers {
		wg.Go(func() {
			_, ok, err := s.OpenRun(t.Context(), store.Run{ID: fmt.Sprintf("race-%d", i), Owner: queueOwner}, limit, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && ok:
				created++
			case errors.Is(err, store.ErrLimit):
				limited++
			default:
				t.Errorf("OpenRun = %v, %v", ok, err)
			}
		})
	}
	wg.Wait()
	if created != limit || limited != callers-limit {
		t.Fatalf("%d concurrent OpenRun: %d created, %d limited; want %d and %d", callers, created, limited, limit, callers-limit)
	}
}

func testPostMessage(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "run-1", nil)
	ev, r, err := s.PostMessage(ctx, "run-1", userMessage("first   words\nhere"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 || r.QueuedAt.IsZero() || r.MessageCount != 1 || r.Preview != "first words here" || r.LastSeq != 1 {
		t.Fatalf("PostMessage = %+v, %+v", ev, r)
	}
	// Not a message: no count, no preview.
	if _, err := s.AppendEvent(ctx, "run-1", "agent.note", nil); err != nil {
		t.Fatal(err)
	}
	// An Idle run wakes.
	if _, err := s.TransitionRun(ctx, "run-1", store.RunInProgress, store.RunIdle); err != nil {
		t.Fatal(err)
	}
	_, r, err = s.PostMessage(ctx, "run-1", userMessage("wake up"))
	if err != nil || r.Status != store.RunInProgress || r.MessageCount != 2 || r.LastSeq != 3 {
		t.Fatalf("PostMessage to an Idle run = %+v, %v", r, err)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("late")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("PostMessage to a completed run = %v, want ErrClosed", err)
	}
	if _, _, err := s.PostMessage(ctx, "missing", userMessage("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PostMessage to a missing run = %v, want ErrNotFound", err)
	}
	mustOpenRun(t, s, "run-2", nil)
	if err := s.DeleteRun(ctx, "run-2", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PostMessage(ctx, "run-2", userMessage("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PostMessage to a deleted run = %v, want ErrNotFound", err)
	}
	if err := s.DeleteRun(ctx, "run-2", nil, store.Withdrawal{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteRun twice = %v, want ErrNotFound", err)
	}
	if runs, err := s.ListRuns(ctx, queueOwner); err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns after a delete = %d runs, %v; want 1", len(runs), err)
	}
}

func testClaimAndFence(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	mustOpenRun(t, s, "run-2", nil) // nothing queued

	claimed, err := s.ClaimRuns(ctx, "replica-a", 10, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "run-1" {
		t.Fatalf("ClaimRuns = %+v, %v; want run-1 only", claimed, err)
	}
	r := claimed[0]
	if r.LeaseOwner != "replica-a" || r.FencingToken != 1 || !r.QueuedAt.IsZero() || r.LeaseExpiresAt.IsZero() {
		t.Fatalf("claimed run = %+v", r)
	}
	if again, err := s.ClaimRuns(ctx, "replica-b", 10, time.Minute); err != nil || len(again) != 0 {
		t.Fatalf("ClaimRuns of a leased run = %+v, %v; want none", again, err)
	}
	lease := r.Lease()

	// A turn: start, messages, end.
	evs, err := s.AppendLeased(ctx, lease,
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 1},
		store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"hello"}`), Preview: "hello"})
	if err != nil || len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("AppendLeased = %+v, %v", evs, err)
	}
	got, _ := s.GetRun(ctx, "run-1")
	if got.TurnSeq != 1 || got.HandledSeq != 0 || got.MessageCount != 2 || got.Preview != "hello" {
		t.Fatalf("run during the turn = %+v", got)
	}
	// A message while the turn runs queues the run, but does not free it.
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("second")); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimRuns(ctx, "replica-b", 10, time.Minute); len(c) != 0 {
		t.Fatalf("ClaimRuns while leased = %+v, want none", c)
	}
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true}); err != nil {
		t.Fatal(err)
	}
	if lease, err = s.RenewLease(ctx, lease, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	released, err := s.ReleaseRun(ctx, lease, "")
	if err != nil || released.LeaseOwner != "" || released.QueuedAt.IsZero() || released.TurnSeq != 0 || released.HandledSeq != 1 {
		t.Fatalf("ReleaseRun = %+v, %v; want unleased, still queued, turn 1 handled", released, err)
	}
	// The queued message is claimable at once, with a higher token.
	claimed, err = s.ClaimRuns(ctx, "replica-b", 10, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].FencingToken != 2 {
		t.Fatalf("ClaimRuns after release = %+v, %v", claimed, err)
	}
	// The old lease is fenced off everywhere.
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "message.assistant"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendLeased with a lost lease = %v, want ErrConflict", err)
	}
	if _, err := s.RenewLease(ctx, lease, time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RenewLease of a lost lease = %v, want ErrConflict", err)
	}
	if _, err := s.ReleaseRun(ctx, lease, ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ReleaseRun of a lost lease = %v, want ErrConflict", err)
	}
	if _, err := s.RenewLease(ctx, store.Lease{RunID: "missing", Owner: "x", Token: 1}, time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RenewLease of a missing run = %v, want ErrNotFound", err)
	}
	if _, err := s.AppendLeased(ctx, store.Lease{RunID: "run-1"}, store.NewEvent{Type: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AppendLeased with an empty lease = %v, want ErrInvalid", err)
	}

	// Pausing for an approval, then requeueing.
	lease = claimed[0].Lease()
	paused, err := s.ReleaseRun(ctx, lease, store.RunAwaitingApproval)
	if err != nil || paused.Status != store.RunAwaitingApproval {
		t.Fatalf("ReleaseRun to AwaitingApproval = %+v, %v", paused, err)
	}
	if c, _ := s.ClaimRuns(ctx, "replica-a", 10, time.Minute); len(c) != 0 {
		t.Fatalf("ClaimRuns of a run awaiting approval = %+v, want none", c)
	}
	requeued, err := s.RequeueRun(ctx, "run-1")
	if err != nil || requeued.Status != store.RunInProgress || requeued.QueuedAt.IsZero() {
		t.Fatalf("RequeueRun = %+v, %v", requeued, err)
	}
	if _, err := s.ReleaseRun(ctx, lease, store.RunCompleted); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("ReleaseRun to Completed = %v, want ErrInvalid", err)
	}
}

func testLeaseTakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Second)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	// The lease lapses; another replica takes the run over.
	deadline := time.Now().Add(10 * time.Second)
	var taken []store.Run
	for len(taken) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if taken, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(taken) != 1 || taken[0].LeaseOwner != "replica-b" || taken[0].FencingToken != claimed[0].FencingToken+1 {
		t.Fatalf("takeover = %+v", taken)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "message.assistant"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendLeased by the replica that lost the run = %v, want ErrConflict", err)
	}
}

func testClaimRace(t *testing.T, s store.Store) {
	const runs, claimers = 10, 4
	for i := range runs {
		first := userMessage("hi")
		if _, _, err := s.OpenRun(t.Context(), store.Run{ID: fmt.Sprintf("run-%d", i), Owner: fmt.Sprintf("owner-%d", i)}, 5, &first); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			owner := fmt.Sprintf("replica-%d", c)
			for {
				got, err := s.ClaimRuns(t.Context(), owner, 2, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, dup := seen[r.ID]; dup {
						t.Errorf("run %s claimed by %s and %s", r.ID, prev, owner)
					}
					seen[r.ID] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != runs {
		t.Fatalf("claimed %d runs, want %d", len(seen), runs)
	}
}

// cancelledTurn is the end of a turn closed mid-way, and the start and
// end of one that never started.
func cancelledTurn(turnSeq int64, started bool) []store.NewEvent {
	var out []store.NewEvent
	if !started {
		out = append(out, store.NewEvent{Type: "agent.turn.start", Payload: json.RawMessage(fmt.Sprintf(`{"messageSeq":%d}`, turnSeq)), StartsTurn: turnSeq})
	}
	return append(out, store.NewEvent{Type: store.EventTurnEnd, Payload: json.RawMessage(fmt.Sprintf(`{"status":"cancelled","messageSeq":%d}`, turnSeq)), EndsTurn: true})
}

// testCloseRunEndsWaitingTurns: completing, cancelling or deleting a run
// ends its open turn and the turn of every user message waiting for one,
// so that each user message has exactly one turn end; events that do not
// end a turn are refused and nothing is written.
func testCloseRunEndsWaitingTurns(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		close func(id string) error
	}{
		{"complete", func(id string) error {
			_, err := s.CloseRun(ctx, id, store.RunCompleted, cancelledTurn, store.Withdrawal{})
			return err
		}},
		{"cancel", func(id string) error {
			_, err := s.CloseRun(ctx, id, store.RunCancelled, cancelledTurn, store.Withdrawal{})
			return err
		}},
		{"delete", func(id string) error { return s.DeleteRun(ctx, id, cancelledTurn, store.Withdrawal{}) }},
	} {
		id := "run-" + tc.name
		first := userMessage("slow")
		mustOpenRun(t, s, id, &first)
		claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("%s: ClaimRuns = %+v, %v", tc.name, claimed, err)
		}
		if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"and this", "and that"} {
			if _, _, err := s.PostMessage(ctx, id, userMessage(text)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tc.close(id); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		events, err := s.ListEvents(ctx, id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		ends := map[int64]int{}
		var users []int64
		for _, e := range events {
			switch e.Type {
			case "message.user":
				users = append(users, e.Seq)
			case store.EventTurnEnd:
				var end struct {
					MessageSeq int64 `json:"messageSeq"`
				}
				if err := json.Unmarshal(e.Payload, &end); err != nil {
					t.Fatal(err)
				}
				ends[end.MessageSeq]++
			}
		}
		if len(users) != 3 || len(ends) != 3 {
			t.Errorf("%s: user messages %v, turn ends %v; want one end for each", tc.name, users, ends)
		}
		for _, seq := range users {
			if ends[seq] != 1 {
				t.Errorf("%s: message %d has %d turn ends, want 1", tc.name, seq, ends[seq])
			}
		}
	}

	// Events that do not end the waiting message's turn: refused, and
	// the run stays as it was.
	first := userMessage("hi")
	mustOpenRun(t, s, "run-bad", &first)
	noEnd := func(int64, bool) []store.NewEvent { return []store.NewEvent{{Type: "agent.note"}} }
	if _, err := s.CloseRun(ctx, "run-bad", store.RunCompleted, noEnd, store.Withdrawal{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CloseRun with events that end no turn = %v, want ErrInvalid", err)
	}
	if r, err := s.GetRun(ctx, "run-bad"); err != nil || r.Status.Terminal() || r.LastSeq != 1 {
		t.Errorf("after a refused close the run is %+v, %v", r, err)
	}
}

func testCloseRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, _ := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	lease := claimed[0].Lease()
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
		t.Fatal(err)
	}
	closed, err := s.CloseRun(ctx, "run-1", store.RunCancelled, cancelledTurn, store.Withdrawal{})
	if err != nil || closed.Status != store.RunCancelled || closed.CompletedAt.IsZero() || closed.LeaseOwner != "" || closed.TurnSeq != 0 || closed.HandledSeq != 1 {
		t.Fatalf("CloseRun = %+v, %v", closed, err)
	}
	events, _ := s.ListEvents(ctx, "run-1", 0, 10)
	if last := events[len(events)-1]; last.Type != store.EventTurnEnd || !jsonEqual(last.Payload, []byte(`{"status":"cancelled","messageSeq":1}`)) {
		t.Fatalf("last event = %s %s, want the end of the turn of message 1", last.Type, last.Payload)
	}
	if _, err := s.AppendLeased(ctx, lease, store.NewEvent{Type: "message.assistant"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendLeased after CloseRun = %v, want ErrConflict", err)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("CloseRun twice = %v, want ErrClosed", err)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunIdle, nil, store.Withdrawal{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CloseRun to Idle = %v, want ErrInvalid", err)
	}
	if _, err := s.RequeueRun(ctx, "run-1"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RequeueRun of a closed run = %v, want ErrConflict", err)
	}
	if _, err := s.RequeueRun(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RequeueRun of a missing run = %v, want ErrNotFound", err)
	}
	// Deleting a closed run hides it.
	if err := s.DeleteRun(ctx, "run-1", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CloseRun of a deleted run = %v, want ErrNotFound", err)
	}

	// Deleting a run mid-turn ends the turn of its open message, the
	// second of the run.
	mustOpenRun(t, s, "run-2", nil)
	if _, err := s.AppendEvent(ctx, "run-2", "agent.note", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PostMessage(ctx, "run-2", userMessage("hi")); err != nil {
		t.Fatal(err)
	}
	claimed, _ = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v", claimed)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRun(ctx, "run-2", cancelledTurn, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	events, _ = s.ListEvents(ctx, "run-2", 0, 10)
	if last := events[len(events)-1]; last.Type != store.EventTurnEnd || !jsonEqual(last.Payload, []byte(`{"status":"cancelled","messageSeq":2}`)) {
		t.Fatalf("last event after DeleteRun = %s %s, want the end of the turn of message 2", last.Type, last.Payload)
	}
}

func testParkIdleRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "quiet", nil)
	first := userMessage("hi")
	mustOpenRun(t, s, "queued", &first)
	mustOpenRun(t, s, "leased", &first)
	claimed, _ := s.ClaimRuns(ctx, "replica-a", 2, time.Minute)
	for _, c := range claimed {
		if c.ID == "queued" {
			// Put it back in the queue: queued runs are not parked.
			if _, err := s.ReleaseRun(ctx, c.Lease(), ""); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.PostMessage(ctx, "queued", userMessage("more")); err != nil {
				t.Fatal(err)
			}
		}
	}
	parked, err := s.ParkIdleRuns(ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].ID != "quiet" || parked[0].Status != store.RunIdle {
		t.Fatalf("ParkIdleRuns = %+v, want only the quiet run", parked)
	}
	if parked, _ := s.ParkIdleRuns(ctx, time.Now().Add(-time.Hour)); len(parked) != 0 {
		t.Fatalf("ParkIdleRuns of recent runs = %+v, want none", parked)
	}
}

func testListMessages(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "run-1", nil)
	for i := 1; i <= 10; i++ {
		if _, _, err := s.PostMessage(ctx, "run-1", userMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendEvent(ctx, "run-1", "agent.other", nil); err != nil {
			t.Fatal(err)
		}
	}
	seqs := func(q store.MessageQuery) []int64 {
		t.Helper()
		evs, err := s.ListMessages(ctx, "run-1", q)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		q    store.MessageQuery
		want string
	}{
		{store.MessageQuery{Limit: 3}, "[1 3 5]"},
		{store.MessageQuery{Limit: 3, Last: true}, "[15 17 19]"},
		{store.MessageQuery{After: 5, Before: 13, Limit: 10}, "[7 9 11]"},
		{store.MessageQuery{Before: 13, Limit: 2, Last: true}, "[9 11]"},
		{store.MessageQuery{After: 19, Limit: 2}, "[]"},
	} {
		if got := fmt.Sprint(seqs(tc.q)); got != tc.want {
			t.Errorf("ListMessages(%+v) = %s, want %s", tc.q, got, tc.want)
		}
	}
	if _, err := s.ListMessages(ctx, "missing", store.MessageQuery{Limit: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListMessages of a missing run = %v, want ErrNotFound", err)
	}
	if _, err := s.ListMessages(ctx, "run-1", store.MessageQuery{Limit: 0}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListMessages with limit 0 = %v, want ErrInvalid", err)
	}
}

func testWakeUps(t *testing.T, s store.Store) {
	ctx := t.Context()
	wakes, err := s.WakeUps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustOpenRun(t, s, "run-1", nil)
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("hi")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after PostMessage")
	}
}

func testRunsToResume(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newApprovalFixture(t, s) // run-1 and run-2, InProgress, not leased
	// run-1 pauses for an approval.
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("write it")); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	if _, err := s.ReleaseRun(ctx, claimed[0].Lease(), store.RunAwaitingApproval); err != nil {
		t.Fatal(err)
	}
	a := f.create(f.approval("apr-1", testBinding()))
	if runs, err := s.RunsToResume(ctx, 10); err != nil || len(runs) != 0 {
		t.Fatalf("RunsToResume with a pending approval = %+v, %v; want none", runs, err)
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: a.ID, To: store.ApprovalDenied, DecidedBy: "alice", Reason: "no", Now: f.now}, nil); err != nil {
		t.Fatal(err)
	}
	runs, err := s.RunsToResume(ctx, 10)
	if err != nil || len(runs) != 1 || runs[0].ID != "run-1" {
		t.Fatalf("RunsToResume after the decision = %+v, %v; want run-1", runs, err)
	}
	// run-2's worker opened a turn and let go without yielding it.
	if _, _, err := s.PostMessage(ctx, "run-2", userMessage("hi")); err != nil {
		t.Fatal(err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "run-2" {
		t.Fatalf("ClaimRuns = %v, %v", claimed, err)
	}
	if _, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}); err != nil {
		t.Fatal(err)
	}
	if runs, _ := s.RunsToResume(ctx, 10); len(runs) != 1 {
		t.Fatalf("RunsToResume while run-2 is leased = %+v, want run-1 only", runs)
	}
	// Released with its turn open, it is queued, not stranded.
	if r, err := s.ReleaseRun(ctx, claimed[0].Lease(), ""); err != nil || r.QueuedAt.IsZero() {
		t.Fatalf("ReleaseRun with the turn open = %+v, %v; want it queued", r, err)
	}
	if runs, _ := s.RunsToResume(ctx, 10); len(runs) != 1 {
		t.Fatalf("RunsToResume with run-2 queued = %+v, want run-1 only", runs)
	}
	// A user message no turn answers, the run neither leased nor queued:
	// appended as a plain event, as a message stranded by an older
	// release was.
	stranded := mustOpenRun(t, s, "run-3", nil)
	if _, err := s.AppendEvent(ctx, stranded.ID, store.EventUserMessage, json.RawMessage(`{"content":"anyone?"}`)); err != nil {
		t.Fatal(err)
	}
	if runs, _ := s.RunsToResume(ctx, 10); fmt.Sprint(runIDs(runs)) != "[run-1 run-3]" {
		t.Fatalf("RunsToResume with an unanswered message = %v, want run-1 and run-3", runIDs(runs))
	}
	if parked, err := s.ParkIdleRuns(ctx, time.Now().Add(time.Hour)); err != nil || len(parked) != 0 {
		t.Fatalf("ParkIdleRuns = %v, %v; want the run with an unanswered message left active", runIDs(parked), err)
	}
	if _, err := s.RequeueRun(ctx, stranded.ID); err != nil {
		t.Fatal(err)
	}
	if runs, _ := s.RunsToResume(ctx, 10); fmt.Sprint(runIDs(runs)) != "[run-1]" {
		t.Fatalf("RunsToResume once run-3 is queued = %v, want run-1", runIDs(runs))
	}
	if _, err := s.RunsToResume(ctx, 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("RunsToResume(0) = %v, want ErrInvalid", err)
	}
}

// nextUpdate waits for the first notification that match accepts.
func nextUpdate(t *testing.T, ch <-chan store.Notification, match func(store.Notification) bool) store.Notification {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatal("the updates channel closed")
			}
			if match(n) {
				return n
			}
		case <-timeout:
			t.Fatal("no matching notification within 10s")
		}
	}
}

func testUpdates(t *testing.T, s store.Store) {
	ctx := t.Context()
	updates, err := s.Updates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustOpenRun(t, s, "run-1", nil)
	nextUpdate(t, updates, func(n store.Notification) bool {
		return n.Kind == store.NotifyRun && n.RunID == "run-1" && n.Owner == queueOwner
	})
	ev, _, err := s.PostMessage(ctx, "run-1", userMessage("hi"))
	if err != nil {
		t.Fatal(err)
	}
	nextUpdate(t, updates, func(n store.Notification) bool {
		return n.Kind == store.NotifyEvent && n.RunID == "run-1" && n.Owner == queueOwner && n.Seq == ev.Seq
	})
	claimed, _ := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	evs, err := s.AppendLeased(ctx, claimed[0].Lease(), store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}, store.NewEvent{Type: "message.assistant"})
	if err != nil {
		t.Fatal(err)
	}
	nextUpdate(t, updates, func(n store.Notification) bool { return n.Kind == store.NotifyEvent && n.Seq == evs[1].Seq })
	if _, err := s.ReleaseRun(ctx, claimed[0].Lease(), store.RunAwaitingApproval); err != nil {
		t.Fatal(err)
	}
	nextUpdate(t, updates, func(n store.Notification) bool { return n.Kind == store.NotifyRun && n.RunID == "run-1" })

	// Deltas carry their text.
	if err := s.Publish(ctx, store.Notification{Kind: store.NotifyDelta, RunID: "run-1", MessageSeq: 1, Text: "héllo \"x\""}); err != nil {
		t.Fatal(err)
	}
	d := nextUpdate(t, updates, func(n store.Notification) bool { return n.Kind == store.NotifyDelta })
	if d.Text != "héllo \"x\"" || d.RunID != "run-1" || d.MessageSeq != 1 {
		t.Fatalf("delta = %+v", d)
	}
	for _, bad := range []store.Notification{
		{Kind: store.NotifyEvent, RunID: "run-1"},
		{Kind: store.NotifyDelta},
		{Kind: store.NotifyDelta, RunID: "run-1", Text: strings.Repeat("x", store.MaxDeltaText+1)},
	} {
		if err := s.Publish(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Publish(%+v) = %v, want ErrInvalid", bad.Kind, err)
		}
	}
}

// claimAgain releases l's run with a new message queued and claims it again
// for replica-b: l is then a stale lease, its fencing token one behind.
func claimAgain(t *testing.T, s store.Store, l store.Lease) store.Lease {
	t.Helper()
	ctx := t.Context()
	if _, err := s.ReleaseRun(ctx, l, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PostMessage(ctx, l.RunID, userMessage("again")); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-b", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].FencingToken != l.Token+1 {
		t.Fatalf("ClaimRuns = %+v, %v; want the run with the next token", claimed, err)
	}
	return claimed[0].Lease()
}

// testFencedWrites: a lease that is no longer the run's writes nothing,
// whichever of the lease holder's writes it tries.
func testFencedWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	stale := claimed[0].Lease()
	current := claimAgain(t, s, stale)
	before, _ := s.GetRun(ctx, "run-1")
	beforeEvents, _ := s.ListEvents(ctx, "run-1", 0, 100)

	turn := []store.NewEvent{
		{Type: "agent.turn.start", StartsTurn: 1},
		{Type: "message.assistant", Payload: json.RawMessage(`{"content":"stale"}`), Preview: "stale"},
		{Type: store.EventTurnEnd, EndsTurn: true},
	}
	wrongOwner := current
	wrongOwner.Owner = "replica-a"
	for _, l := range []store.Lease{stale, wrongOwner} {
		if _, err := s.AppendLeased(ctx, l, turn...); !errors.Is(err, store.ErrConflict) {
			t.Errorf("AppendLeased with lease %+v = %v, want ErrConflict", l, err)
		}
		if _, _, err := s.EndLease(ctx, l, store.Release{Requeue: true}, turn...); !errors.Is(err, store.ErrConflict) {
			t.Errorf("EndLease with lease %+v = %v, want ErrConflict", l, err)
		}
		if _, _, err := s.EndLease(ctx, l, store.Release{Status: store.RunAwaitingApproval}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("EndLease without events with lease %+v = %v, want ErrConflict", l, err)
		}
	}
	after, _ := s.GetRun(ctx, "run-1")
	afterEvents, _ := s.ListEvents(ctx, "run-1", 0, 100)
	if after != before || len(afterEvents) != len(beforeEvents) {
		t.Fatalf("refused writes changed the run: %+v\nto %+v\n(%d events, then %d)", before, after, len(beforeEvents), len(afterEvents))
	}
	// The current lease still writes.
	evs, err := s.AppendLeased(ctx, current, turn[:2]...)
	if err != nil || len(evs) != 2 || evs[0].Seq != before.LastSeq+1 {
		t.Fatalf("AppendLeased with the current lease = %+v, %v", evs, err)
	}
	for _, l := range []store.Lease{{RunID: "missing", Owner: "replica-b", Token: 1}} {
		if _, err := s.AppendLeased(ctx, l, turn...); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AppendLeased to a missing run = %v, want ErrNotFound", err)
		}
		if _, _, err := s.EndLease(ctx, l, store.Release{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("EndLease of a missing run = %v, want ErrNotFound", err)
		}
	}
}

// testFencedAppendRace: appends under a lease race with CloseRun, which
// revokes the lease: each append is written whole or not at all, nothing
// is written after the close's turn end, and the log has no gap.
func testFencedAppendRace(t *testing.T, s store.Store) {
	ctx := t.Context()
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
	const writers, appends = 4, 15
	var mu sync.Mutex
	var written []store.Event
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			for i := range appends {
				evs, err := s.AppendLeased(ctx, lease,
					store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))},
					store.NewEvent{Type: "message.tool", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))})
				if errors.Is(err, store.ErrConflict) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written = append(written, evs...)
				mu.Unlock()
			}
		})
	}
	close(start)
	time.Sleep(5 * time.Millisecond)
	if _, err := s.CloseRun(ctx, "run-1", store.RunCancelled, cancelledTurn, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	events, err := s.ListEvents(ctx, "run-1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has sequence %d: the log has a gap", i, e.Seq)
		}
		if e.Type == store.EventTurnEnd {
			end = e.Seq
		}
	}
	if end == 0 || end != events[len(events)-1].Seq {
		t.Fatalf("the close's turn end is at %d of %d events, want last", end, len(events))
	}
	if len(written) != len(events)-3 { // the user message, the turn's start, its end
		t.Errorf("%d events written by successful appends, %d in the log besides the turn's own", len(written), len(events)-3)
	}
	for _, e := range written {
		if got := events[e.Seq-1]; got.Type != e.Type || !jsonEqual(got.Payload, e.Payload) {
			t.Errorf("event %d is %s %s, the append returned %s %s", e.Seq, got.Type, got.Payload, e.Type, e.Payload)
		}
	}
	r, _ := s.GetRun(ctx, "run-1")
	if r.LastSeq != end || r.MessageCount != 1+len(written) {
		t.Errorf("run after the race: last seq %d, %d messages; want %d, %d", r.LastSeq, r.MessageCount, end, 1+len(written))
	}
}

// testEndLease: the turn's last events and the lease's end, at once.
func testEndLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	updates, err := s.Updates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wakes, err := s.WakeUps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	// A second message before the claim: the turn answers the first.
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("and another")); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	lease := claimed[0].Lease()
	if _, err := s.AppendLeased(ctx, lease,
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 1},
		store.NewEvent{Type: "agent.system_prompt"}); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []store.Release{
		{Status: store.RunCompleted},
		{Status: store.RunIdle},
		{Status: store.RunAwaitingApproval, Requeue: true},
	} {
		if _, _, err := s.EndLease(ctx, lease, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("EndLease(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, _, err := s.EndLease(ctx, lease, store.Release{}, store.NewEvent{Type: "x", StartsTurn: 1, EndsTurn: true}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndLease with an event that starts and ends a turn = %v, want ErrInvalid", err)
	}
	for len(wakes) > 0 {
		<-wakes
	}

	// The answer, the turn's end and the release, requeued for the
	// message that waits.
	evs, r, err := s.EndLease(ctx, lease, store.Release{Requeue: true},
		store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{"content":"hello"}`), Preview: "hello"},
		store.NewEvent{Type: store.EventTurnEnd, Payload: json.RawMessage(`{"status":"completed"}`), EndsTurn: true})
	if err != nil || len(evs) != 2 || evs[0].Seq != 5 || evs[1].Seq != 6 || evs[1].Type != store.EventTurnEnd {
		t.Fatalf("EndLease = %+v, %v", evs, err)
	}
	if r.LeaseOwner != "" || !r.LeaseExpiresAt.IsZero() || r.QueuedAt.IsZero() || r.Status != store.RunInProgress ||
		r.TurnSeq != 0 || r.HandledSeq != 1 || r.LastSeq != 6 || r.MessageCount != 3 || r.Preview != "hello" {
		t.Fatalf("run after EndLease = %+v; want released, queued, turn 1 handled, 6 events, 3 messages", r)
	}
	if got, _ := s.GetRun(ctx, "run-1"); got != r {
		t.Errorf("GetRun = %+v, EndLease returned %+v", got, r)
	}
	nextUpdate(t, updates, func(n store.Notification) bool { return n.Kind == store.NotifyEvent && n.Seq == 6 })
	nextUpdate(t, updates, func(n store.Notification) bool {
		return n.Kind == store.NotifyRun && n.RunID == "run-1" && n.Owner == queueOwner
	})
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a release that left the run queued")
	}
	if _, _, err := s.EndLease(ctx, lease, store.Release{}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("EndLease twice = %v, want ErrConflict", err)
	}

	// The next turn starts and pauses for an approval, in one batch.
	claimed, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].HandledSeq != 1 {
		t.Fatalf("ClaimRuns after a requeueing release = %+v, %v", claimed, err)
	}
	lease = claimed[0].Lease()
	_, r, err = s.EndLease(ctx, lease, store.Release{Status: store.RunAwaitingApproval},
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 2},
		store.NewEvent{Type: "agent.turn.pause"})
	if err != nil || r.Status != store.RunAwaitingApproval || r.TurnSeq != 2 || r.HandledSeq != 1 || r.LeaseOwner != "" || !r.QueuedAt.IsZero() {
		t.Fatalf("EndLease to AwaitingApproval = %+v, %v", r, err)
	}
	if _, err := s.RequeueRun(ctx, "run-1"); err != nil {
		t.Fatal(err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns after the approval = %+v, %v", claimed, err)
	}
	// A release without events leaves the turn open, queued (it has work
	// left), and the run's time alone: nothing happened in it.
	_, r, err = s.EndLease(ctx, claimed[0].Lease(), store.Release{})
	if err != nil || r.TurnSeq != 2 || r.LastSeq != 8 || r.LeaseOwner != "" || r.QueuedAt.IsZero() || r.LastActivityAt != claimed[0].LastActivityAt {
		t.Fatalf("EndLease without events = %+v, %v", r, err)
	}
}

// testTurnBatches: a batch of events moves the run's turn as the events
// would one after the other.
func testTurnBatches(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("one")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	lease := claimed[0].Lease()
	msg := func(text string) store.NewEvent {
		return store.NewEvent{Type: "message.assistant", Payload: json.RawMessage(`{}`), Preview: text}
	}
	for _, step := range []struct {
		events        []store.NewEvent
		turn, handled int64
		preview       string
	}{
		// Started and ended at once (a turn that failed before it began).
		{[]store.NewEvent{{Type: "agent.turn.start", StartsTurn: 1}, {Type: store.EventTurnEnd, EndsTurn: true}}, 0, 1, "one"},
		// Ended alone: the turn open before the batch is handled.
		{[]store.NewEvent{{Type: "agent.turn.start", StartsTurn: 5}}, 5, 1, "one"},
		{[]store.NewEvent{msg("a"), msg(""), {Type: store.EventTurnEnd, EndsTurn: true}}, 0, 5, "a"},
		// Two turns in one batch; the last preview counts.
		{[]store.NewEvent{{Type: "agent.turn.start", StartsTurn: 7}, msg("b"), {Type: store.EventTurnEnd, EndsTurn: true},
			{Type: "agent.turn.start", StartsTurn: 9}, msg("c")}, 9, 7, "c"},
	} {
		before, _ := s.GetRun(ctx, "run-1")
		evs, err := s.AppendLeased(ctx, lease, step.events...)
		if err != nil || len(evs) != len(step.events) {
			t.Fatalf("AppendLeased = %+v, %v", evs, err)
		}
		r, _ := s.GetRun(ctx, "run-1")
		messages := 0
		for i, e := range step.events {
			if evs[i].Seq != before.LastSeq+int64(i)+1 || evs[i].Type != e.Type {
				t.Errorf("event %d = %+v", i, evs[i])
			}
			if strings.HasPrefix(e.Type, store.MessageEventPrefix) {
				messages++
			}
		}
		if r.TurnSeq != step.turn || r.HandledSeq != step.handled || r.Preview != step.preview ||
			r.LastSeq != before.LastSeq+int64(len(step.events)) || r.MessageCount != before.MessageCount+messages {
			t.Errorf("after %d events: turn %d, handled %d, preview %q, last seq %d, %d messages; want %d, %d, %q, %d, %d",
				len(step.events), r.TurnSeq, r.HandledSeq, r.Preview, r.LastSeq, r.MessageCount,
				step.turn, step.handled, step.preview, before.LastSeq+int64(len(step.events)), before.MessageCount+messages)
		}
	}
}

// testPostMessageOnce: a message's idempotency key stores it once, and a
// retry gets the message stored.
func testPostMessageOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "run-1", nil)
	ev, r, created, err := s.PostMessageOnce(ctx, "run-1", userMessage("one"), "key-1")
	if err != nil || !created || ev.Seq != 1 || r.MessageCount != 1 || r.QueuedAt.IsZero() {
		t.Fatalf("PostMessageOnce = %+v, %+v, created %v, %v", ev, r, created, err)
	}
	again, r2, created, err := s.PostMessageOnce(ctx, "run-1", userMessage("one"), "key-1")
	if err != nil || created || again.Seq != 1 || again.Type != ev.Type || !jsonEqual(again.Payload, ev.Payload) || r2.MessageCount != 1 || r2.LastSeq != 1 {
		t.Fatalf("PostMessageOnce again = %+v, %+v, created %v, %v; want the first message, nothing written", again, r2, created, err)
	}
	for _, c := range []struct {
		run, key string
		want     bool
	}{{"run-1", "key-1", true}, {"run-1", "key-2", false}, {"run-2", "key-1", false}, {"run-1", "", false}} {
		if used, err := s.MessageKeyUsed(ctx, c.run, c.key); err != nil || used != c.want {
			t.Errorf("MessageKeyUsed(%q, %q) = %v, %v; want %v", c.run, c.key, used, err, c.want)
		}
	}
	// Another key, or none, posts; a key is the run's own.
	if ev, _, created, err := s.PostMessageOnce(ctx, "run-1", userMessage("two"), "key-2"); err != nil || !created || ev.Seq != 2 {
		t.Fatalf("PostMessageOnce(key-2) = %+v, created %v, %v", ev, created, err)
	}
	if ev, _, created, err := s.PostMessageOnce(ctx, "run-1", userMessage("three"), ""); err != nil || !created || ev.Seq != 3 {
		t.Fatalf("PostMessageOnce without a key = %+v, created %v, %v", ev, created, err)
	}
	mustOpenRun(t, s, "run-2", nil)
	if ev, _, created, err := s.PostMessageOnce(ctx, "run-2", userMessage("one"), "key-1"); err != nil || !created || ev.RunID != "run-2" {
		t.Fatalf("PostMessageOnce(key-1) to another run = %+v, created %v, %v", ev, created, err)
	}
	// A retry after the run closed still gets its message; a new post is
	// refused.
	if _, err := s.CloseRun(ctx, "run-1", store.RunCompleted, nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if again, _, created, err := s.PostMessageOnce(ctx, "run-1", userMessage("one"), "key-1"); err != nil || created || again.Seq != 1 {
		t.Fatalf("PostMessageOnce retried after the close = %+v, created %v, %v; want the first message", again, created, err)
	}
	if _, _, _, err := s.PostMessageOnce(ctx, "run-1", userMessage("late"), "key-3"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("PostMessageOnce to a closed run = %v, want ErrClosed", err)
	}
	if _, _, _, err := s.PostMessageOnce(ctx, "missing", userMessage("x"), "key-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PostMessageOnce to a missing run = %v, want ErrNotFound", err)
	}
}

// testPostMessageOnceRace: concurrent posts with one key store one
// message, and every one of them answers with it.
func testPostMessageOnceRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustOpenRun(t, s, "run-1", nil)
	const posters = 12
	var wg sync.WaitGroup
	seqs := make([]int64, posters)
	created := make([]bool, posters)
	start := make(chan struct{})
	for i := range posters {
		wg.Go(func() {
			<-start
			ev, _, c, err := s.PostMessageOnce(ctx, "run-1", userMessage("once"), "key-1")
			if err != nil {
				t.Errorf("PostMessageOnce = %v", err)
			}
			seqs[i], created[i] = ev.Seq, c
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for i := range posters {
		if created[i] {
			n++
		}
		if seqs[i] != 1 {
			t.Errorf("poster %d got message %d, want 1", i, seqs[i])
		}
	}
	r, _ := s.GetRun(ctx, "run-1")
	if n != 1 || r.MessageCount != 1 || r.LastSeq != 1 {
		t.Fatalf("%d concurrent posts with one key: %d created, run has %d messages, last seq %d; want 1, 1, 1", posters, n, r.MessageCount, r.LastSeq)
	}
}

// testRetryBackoff: a slice that failed leaves its run queued for a retry
// no sooner than its backoff, counting the failure; the next release that
// does not fail resets the count.
func testRetryBackoff(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := userMessage("hi")
	mustOpenRun(t, s, "run-1", &first)
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Retry: -time.Second}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndLease with a negative retry = %v, want ErrInvalid", err)
	}
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Status: store.RunAwaitingApproval, Retry: time.Second}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndLease to AwaitingApproval with a retry = %v, want ErrInvalid", err)
	}
	before := time.Now()
	_, r, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Retry: time.Hour})
	if err != nil || r.QueuedAt.IsZero() || r.Failures != 1 || r.NotBefore.Before(before.Add(59*time.Minute)) || r.LeaseOwner != "" {
		t.Fatalf("EndLease with a retry = %+v, %v; want queued, one failure, not before an hour", r, err)
	}
	if c, err := s.ClaimRuns(ctx, "replica-a", 10, time.Minute); err != nil || len(c) != 0 {
		t.Fatalf("ClaimRuns before the retry's time = %+v, %v; want none", c, err)
	}
	if at, err := s.NextClaimAt(ctx); err != nil || !at.Equal(r.NotBefore) {
		t.Fatalf("NextClaimAt = %v, %v; want the retry's time %v", at, err, r.NotBefore)
	}
	if runs, _ := s.RunsToResume(ctx, 10); len(runs) != 0 {
		t.Fatalf("RunsToResume of a run queued for a retry = %v, want none", runIDs(runs))
	}

	// A short backoff: claimable once it passed, the count kept.
	mustOpenRun(t, s, "run-2", &first)
	claimed, err = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "run-2" {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	for i := range 2 {
		if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Retry: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for claimed = nil; len(claimed) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the run was not claimable after its retry's time")
			}
			if claimed, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if c := claimed[0]; c.ID != "run-2" || c.Failures != i+1 || !c.NotBefore.IsZero() || !c.QueuedAt.IsZero() {
			t.Fatalf("claimed after retry %d = %+v; want run-2, %d failures, not queued", i+1, c, i+1)
		}
	}
	_, r, err = s.EndLease(ctx, claimed[0].Lease(), store.Release{},
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}, store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true})
	if err != nil || r.Failures != 0 || !r.NotBefore.IsZero() || !r.QueuedAt.IsZero() {
		t.Fatalf("EndLease that ends the turn = %+v, %v; want the failures reset, nothing queued", r, err)
	}

	// Woken: run-1, still an hour from its retry, is claimable now, its
	// failure counted; nothing else is woken, nor is it twice.
	if n, err := s.WakeRetries(ctx); err != nil || n != 1 {
		t.Fatalf("WakeRetries = %d, %v; want run-1", n, err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-a", 10, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].ID != "run-1" || claimed[0].Failures != 1 {
		t.Fatalf("ClaimRuns after WakeRetries = %+v, %v; want run-1, its failure counted", claimed, err)
	}
	if n, err := s.WakeRetries(ctx); err != nil || n != 0 {
		t.Errorf("WakeRetries again = %d, %v; want none", n, err)
	}
}

// testReleaseQueuesWork: a release that leaves the run with work (an open
// turn, a user message after the one handled) queues it, whatever the
// caller asked.
func testReleaseQueuesWork(t *testing.T, s store.Store) {
	ctx := t.Context()
	wakes, err := s.WakeUps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := userMessage("one")
	mustOpenRun(t, s, "run-1", &first)
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("two")); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	for len(wakes) > 0 {
		<-wakes
	}
	// The turn answers message 1; message 2 waits.
	_, r, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{},
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 1}, store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true})
	if err != nil || r.HandledSeq != 1 || r.QueuedAt.IsZero() {
		t.Fatalf("EndLease with message 2 unanswered = %+v, %v; want queued", r, err)
	}
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a release that queued the run")
	}
	// Answered in full, it is not queued.
	claimed, _ = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v", claimed)
	}
	_, r, err = s.EndLease(ctx, claimed[0].Lease(), store.Release{},
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 2}, store.NewEvent{Type: store.EventTurnEnd, EndsTurn: true})
	if err != nil || r.HandledSeq != 2 || !r.QueuedAt.IsZero() {
		t.Fatalf("EndLease with every message answered = %+v, %v; want not queued", r, err)
	}
	// Paused for an approval, it waits for the decision, not the queue.
	if _, _, err := s.PostMessage(ctx, "run-1", userMessage("three")); err != nil {
		t.Fatal(err)
	}
	claimed, _ = s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	_, r, err = s.EndLease(ctx, claimed[0].Lease(), store.Release{Status: store.RunAwaitingApproval},
		store.NewEvent{Type: "agent.turn.start", StartsTurn: 7})
	if err != nil || r.Status != store.RunAwaitingApproval || !r.QueuedAt.IsZero() {
		t.Fatalf("EndLease to AwaitingApproval = %+v, %v; want not queued", r, err)
	}
}

// testNextClaimAt: when the scheduler may next find a run to claim.
func testNextClaimAt(t *testing.T, s store.Store) {
	ctx := t.Context()
	if at, err := s.NextClaimAt(ctx); err != nil || !at.IsZero() {
		t.Fatalf("NextClaimAt of an empty store = %v, %v; want zero", at, err)
	}
	mustOpenRun(t, s, "quiet", nil)
	first := userMessage("hi")
	queued := mustOpenRun(t, s, "run-1", &first)
	if at, err := s.NextClaimAt(ctx); err != nil || !at.Equal(queued.QueuedAt) {
		t.Fatalf("NextClaimAt with a queued run = %v, %v; want its queue time %v", at, err, queued.QueuedAt)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Hour)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	if at, err := s.NextClaimAt(ctx); err != nil || !at.Equal(claimed[0].LeaseExpiresAt) {
		t.Fatalf("NextClaimAt with a leased run = %v, %v; want its lease's expiry %v", at, err, claimed[0].LeaseExpiresAt)
	}
	l, err := s.RenewLease(ctx, claimed[0].Lease(), 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if at, err := s.NextClaimAt(ctx); err != nil || !at.Equal(l.ExpiresAt) {
		t.Fatalf("NextClaimAt after a renewal = %v, %v; want %v", at, err, l.ExpiresAt)
	}
	// A run paused for an approval is claimed by no one until requeued.
	if _, _, err := s.EndLease(ctx, l, store.Release{Status: store.RunAwaitingApproval}); err != nil {
		t.Fatal(err)
	}
	if at, err := s.NextClaimAt(ctx); err != nil || !at.IsZero() {
		t.Fatalf("NextClaimAt with nothing leased or queued = %v, %v; want zero", at, err)
	}
}

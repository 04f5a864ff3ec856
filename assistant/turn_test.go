package assistant

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestTurnLoad checks that a turn's one read of the latest messages finds
// what the separate reads find (the user message the turn answers, the
// turn's messages, the messages of earlier turns logged after its message,
// the history the model sees), on conversations of many shapes: short and
// long, turns with tool calls, user messages queued behind the turn or
// arriving while turns ran, turns resumed with few and with many messages
// of their own, and nothing to answer.
func TestTurnLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewSQLite(t)
	rt := &Runtime{st: st, o: Options{HistoryMessages: DefaultHistoryMessages}}
	rng := rand.New(rand.NewPCG(4, 2))

	checked, each := 0, 0
	for c := range 12 {
		id := fmt.Sprintf("run_load_%d", c)
		first := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "hello"})}
		if _, _, err := st.OpenRun(ctx, store.Run{ID: id, Owner: id}, 1, &first); err != nil {
			t.Fatal(err)
		}
		claimed, err := st.ClaimRuns(ctx, "loader", 1, time.Hour)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		// A conversation of 1 to 160 messages, with turn records among
		// them; users is where each user message is.
		users := []int64{1}
		var batch []store.NewEvent
		n := 1 + rng.IntN(160)
		seq := int64(1)
		add := func(e store.NewEvent) {
			batch = append(batch, e)
			seq++
		}
		for i := 1; i < n; i++ {
			r := rng.IntN(10)
			if c == 0 {
				// Answers without a user message between them, more than
				// a window of them: the first message's turn lies before
				// the window.
				n, r = 62, 5
				if i == n-1 {
					r = 0
				}
			}
			switch {
			case r < 3:
				add(store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: fmt.Sprintf("user %d", i)})})
				users = append(users, seq)
			case r < 5:
				call := fmt.Sprintf("call_%d", i)
				add(store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(AssistantMessage{
					ToolCalls: []ToolCall{{ID: call, Name: "notes_list", Arguments: []byte(`{}`)}}})})
				if rng.IntN(4) > 0 {
					add(store.NewEvent{Type: EventToolResult, Payload: mustJSON(ToolResult{ToolCallID: call, Name: "notes_list", Content: "[]", Status: ToolSucceeded})})
				}
			case r < 8:
				add(store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(AssistantMessage{Content: fmt.Sprintf("answer %d", i)})})
			default:
				add(store.NewEvent{Type: EventRuntimeContext, Payload: mustJSON(RuntimeContextRecord{RunID: id})})
			}
		}
		if c%2 == 1 {
			// A log as the runtime writes it: messages that name their
			// turns, user messages arriving while turns run.
			sim := simulateRun(rng, 1+rng.IntN(160))
			users, batch = []int64{1}, nil
			for _, e := range sim.events[1:] {
				batch = append(batch, store.NewEvent{Type: e.Type, Payload: e.Payload})
				if e.Type == EventUserMessage {
					users = append(users, e.Seq)
				}
			}
		}
		if len(batch) > 0 {
			if _, err := st.AppendLeased(ctx, claimed[0].Lease(), batch...); err != nil {
				t.Fatal(err)
			}
		}
		// Every turn the conversation could start or resume now: a new
		// one after each handled user message, and a resumed one at each.
		var runs []store.Run
		for i, u := range users {
			handled := int64(0)
			if i > 0 {
				handled = users[i-1]
			}
			runs = append(runs, store.Run{ID: id, HandledSeq: handled}, store.Run{ID: id, TurnSeq: u, HandledSeq: handled})
		}
		// The latest turns, and a sample of the others.
		if len(runs) > 12 {
			rng.Shuffle(len(runs)-6, func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
			runs = runs[len(runs)-12:]
		}
		runs = append(runs,
			store.Run{ID: id},                                  // the first message, all others queued behind it
			store.Run{ID: id, TurnSeq: 1},                      // resumed, with every message after it
			store.Run{ID: id, HandledSeq: users[len(users)-1]}) // nothing to answer
		for _, r := range runs {
			one := &turn{rt: rt, run: r}
			if err := one.load(ctx); err != nil {
				t.Fatal(err)
			}
			sep := &turn{rt: rt, run: r}
			if err := sep.loadEach(ctx); err != nil {
				t.Fatal(err)
			}
			if one.seq != sep.seq || !reflect.DeepEqual(seqs(one.messages), seqs(sep.messages)) || !reflect.DeepEqual(one.past, sep.past) ||
				!reflect.DeepEqual(seqs(one.after), seqs(sep.after)) || one.queued != sep.queued {
				t.Fatalf("run of %d messages, turn %d, handled %d: one read found message %d, turn %v, history %d messages; "+
					"separate reads %d, %v, %d", n, r.TurnSeq, r.HandledSeq,
					one.seq, seqs(one.messages), len(one.past), sep.seq, seqs(sep.messages), len(sep.past))
			}
			checked++
			if sep.seq != 0 {
				// Whether load needed the separate reads: its window did
				// not reach back far enough.
				latest, _ := st.ListMessages(ctx, id, store.MessageQuery{Limit: DefaultHistoryMessages + turnWindowExtra, Last: true})
				if len(latest) == DefaultHistoryMessages+turnWindowExtra && latest[0].Seq > max(0, sep.seq-1) {
					each++
				}
			}
		}
	}
	t.Logf("%d turns checked, %d of them beyond one read", checked, each)
	if checked < 100 || each == 0 || each == checked {
		t.Fatalf("%d turns checked, %d of them beyond one read: the cases miss a path", checked, each)
	}
}

func seqs(events []store.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

// TestStepRestart: a model request that streamed text and then failed is
// tried again, after an agent.step.restart that voids what it streamed,
// for the pages that showed it; the reply is the retry's alone. A retry of
// a request that streamed nothing appends none.
func TestStepRestart(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	ms, provider := scriptedModel(t)
	ms.ReplyTruncated("Starting my answer: alpha.")
	ms.Reply("Starting my answer: alpha. And the rest.")
	ms.ReplyError(http.StatusServiceUnavailable)
	ms.Reply("Fine.")
	h := newHarness(t, st, provider, &Options{Lease: time.Minute})
	code, out := h.call(t, "POST", "/runs", `{}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /runs = %d %v", code, out)
	}
	runID := out["runId"].(string)
	h.sayAPI(t, runID, "hello")
	h.sayAPI(t, runID, "once more")
	events, err := st.ListEvents(t.Context(), runID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var restart StepRestart
	for _, e := range events {
		switch e.Type {
		case EventStepRestart:
			if err := json.Unmarshal(e.Payload, &restart); err != nil {
				t.Fatal(err)
			}
		case EventUserMessage, EventAssistantMessage:
		default:
			continue
		}
		types = append(types, e.Type)
	}
	want := []string{EventUserMessage, EventStepRestart, EventAssistantMessage, EventUserMessage, EventAssistantMessage}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("the log holds %v, want %v", types, want)
	}
	if restart != (StepRestart{MessageSeq: 1, Attempt: 2}) {
		t.Errorf("the restart = %+v, want message 1's attempt 2", restart)
	}
	if n := len(ms.Requests()); n != 4 {
		t.Errorf("model requests = %d, want 4", n)
	}
}

package assistant

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestRoomKeepsNoSubscribersFailure shows that a read of the run's row
// that fails for one subscriber — its request ended while it read — is not
// what the room's other subscribers get: each of them reads again. (A
// kept failure ended every other live-update stream of the run, silently,
// as the context.Canceled of a long-poll that had just answered.)
func TestRoomKeepsNoSubscribersFailure(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	run := openRun(t, st, "run-room", "hello")
	b := newBus(st, slog.New(slog.DiscardHandler), DefaultMaxStreamsPerUser)
	_, room, leave := b.joinRun(run.ID)
	defer leave()

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := room.run(ended); err == nil {
		t.Fatal("a read with an ended context succeeded; the test shows nothing")
	}
	got, err := room.run(t.Context())
	if err != nil || got.ID != run.ID {
		t.Fatalf("another subscriber's read = %q, %v; want the run", got.ID, err)
	}
	// A change is read again, for every subscriber, after a failure too.
	room.statusChanged()
	if _, err := room.run(ended); err == nil {
		t.Fatal("a read with an ended context succeeded")
	}
	if got, err := room.run(t.Context()); err != nil || got.ID != run.ID {
		t.Fatalf("after a change, another subscriber's read = %q, %v; want the run", got.ID, err)
	}
}

// recorder is an emitter that hands each message to the test, waiting
// for it to take the message.
type recorder struct {
	ctx context.Context
	got chan string
}

func (r recorder) send(event string, _ int64, data any) error {
	if event == "delta" {
		event += ":" + data.(map[string]any)["text"].(string)
	}
	select {
	case r.got <- event:
		return nil
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
}

func (r recorder) events(evs []roomEvent) error {
	for _, ev := range evs {
		if err := r.send(ev.Type, ev.Seq, nil); err != nil {
			return err
		}
	}
	return nil
}

// TestStreamKeepsDeltasBeforeTheirMessage: a stream that wakes for an
// event while a later event is already in the log, with the deltas
// published before that one still on their way, sends only the events
// announced: the deltas, then the message they streamed. (Reading the
// log to its end sent the committed message first and its last delta
// after it.)
func TestStreamKeepsDeltasBeforeTheirMessage(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	run := openRun(t, st, "run-deltas", "hello")
	b := newBus(st, slog.New(slog.DiscardHandler), DefaultMaxStreamsPerUser)
	rt := &Runtime{bus: b, o: Options{Heartbeat: time.Hour}}
	ctx, cancel := context.WithCancel(t.Context())
	rec := recorder{ctx: ctx, got: make(chan string)} // the stream waits for the test to read each message
	done := make(chan error, 1)
	go func() { done <- rt.streamRun(ctx, rec, run, run.LastSeq) }()
	defer func() { cancel(); <-done }()
	next := func(want string) {
		t.Helper()
		if m := <-rec.got; m != want {
			t.Fatalf("sent %q, want %q", m, want)
		}
	}
	next("connected")
	delta := func(text string) {
		b.dispatch(store.Notification{Kind: store.NotifyDelta, RunID: run.ID, MessageSeq: run.LastSeq, Text: text})
	}
	delta("Hel")
	next("delta:Hel")

	// A progress event, then the message, both committed; of their
	// announcements only the first has arrived, the last delta not yet.
	progress, err := st.AppendEvent(t.Context(), run.ID, EventTurnStart, mustJSON(TurnStart{MessageSeq: run.LastSeq}))
	if err != nil {
		t.Fatal(err)
	}
	message, err := st.AppendEvent(t.Context(), run.ID, EventAssistantMessage, mustJSON(AssistantMessage{Content: "Hello"}))
	if err != nil {
		t.Fatal(err)
	}
	b.dispatch(store.Notification{Kind: store.NotifyEvent, RunID: run.ID, Seq: progress.Seq})
	next(EventTurnStart)
	delta("lo")
	b.dispatch(store.Notification{Kind: store.NotifyEvent, RunID: run.ID, Seq: message.Seq})
	next("delta:lo")
	next(EventAssistantMessage)

	// The next step's text follows the event announced before it (the
	// tool's result), though both wait when the stream looks.
	delta("Calling")
	tool, err := st.AppendEvent(t.Context(), run.ID, EventToolResult, mustJSON(map[string]string{"content": "ok"}))
	if err != nil {
		t.Fatal(err)
	}
	b.dispatch(store.Notification{Kind: store.NotifyEvent, RunID: run.ID, Seq: tool.Seq})
	delta("Done")
	next("delta:Calling")
	next(EventToolResult)
	next("delta:Done")

	// After a resync (announcements lost), the log as it is.
	if _, err := st.AppendEvent(t.Context(), run.ID, EventAssistantMessage, mustJSON(AssistantMessage{Content: "More"})); err != nil {
		t.Fatal(err)
	}
	b.dispatch(store.Notification{Kind: store.NotifyResync})
	next(EventAssistantMessage)
}

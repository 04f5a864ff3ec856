package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// delta is the i-th delta a test of Updates publishes.
func delta(i int) store.Notification {
	return store.Notification{Kind: store.NotifyDelta, RunID: "run-1", MessageSeq: 1, Text: fmt.Sprint("delta ", i)}
}

// publishDeltas publishes the deltas from to to-1, in order.
func publishDeltas(t *testing.T, s store.Store, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Publish(t.Context(), delta(i)); err != nil {
			t.Fatalf("Publish(%d): %v", i, err)
		}
	}
}

// receive returns the next notification of ch, failing the test when ch
// closes or gives none within 10s.
func receive(t *testing.T, ch <-chan store.Notification, who string) store.Notification {
	t.Helper()
	var n store.Notification
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the updates channel closed", who)
		}
		n = got
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no notification within 10s", who)
	}
	return n
}

// receiveDeltas checks that the next notifications of ch are the deltas
// from to to-1, in order.
func receiveDeltas(t *testing.T, ch <-chan store.Notification, who string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if n := receive(t, ch, who); n != delta(i) {
			t.Fatalf("%s got %+v, want delta %d", who, n, i)
		}
	}
}

// testUpdatesFanOut: every subscriber gets every notification sent after
// its Updates returned, in order, one that joins later included; one that
// leaves has its channel closed, and the others go on; closing the store
// closes every channel.
func testUpdatesFanOut(t *testing.T, s store.Store) {
	subscribe := func() (<-chan store.Notification, context.CancelFunc) {
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		ch, err := s.Updates(ctx)
		if err != nil {
			t.Fatalf("Updates: %v", err)
		}
		return ch, cancel
	}
	subs := map[string]<-chan store.Notification{}
	var leave context.CancelFunc
	subs["a"], _ = subscribe()
	subs["b"], leave = subscribe()
	subs["c"], _ = subscribe()
	publishDeltas(t, s, 0, 50)
	for who, ch := range subs {
		receiveDeltas(t, ch, who, 0, 50)
	}
	// Every subscriber has had the first 50: the one that joins now gets
	// what follows, and nothing before.
	subs["d"], _ = subscribe()
	publishDeltas(t, s, 50, 100)
	for who, ch := range subs {
		receiveDeltas(t, ch, who, 50, 100)
	}
	// A write's notification reaches everyone too.
	mustOpenRun(t, s, "run-1", nil)
	for who, ch := range subs {
		if n := receive(t, ch, who); n.Kind != store.NotifyRun || n.RunID != "run-1" {
			t.Fatalf("%s got %+v, want the run's creation", who, n)
		}
	}

	leave()
	for n := range subs["b"] {
		t.Fatalf("b got %+v after it left", n)
	}
	delete(subs, "b")
	publishDeltas(t, s, 100, 150)
	for who, ch := range subs {
		receiveDeltas(t, ch, who, 100, 150)
	}

	// Closing the store ends every subscription, and refuses new ones.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for who, ch := range subs {
		for n := range ch {
			t.Fatalf("%s got %+v after the store closed", who, n)
		}
	}
	if _, err := s.Updates(t.Context()); err == nil {
		t.Error("Updates after Close = nil error, want one")
	}
}

// testUpdatesSlowSubscriber: a subscriber that does not read holds up no
// other: another gets ten times store.UpdateBuffer notifications meanwhile.
// The one that did not read gets what its buffer held, in order, then a
// NotifyResync as soon as it reads (nothing new is published), then what
// is published after. The last of the flood may still be on its way to
// the slow one when the fast one has it (the publisher queues each
// notification for one subscriber after the other): it then comes after
// the resync, in order, before what is published after.
func testUpdatesSlowSubscriber(t *testing.T, s store.Store) {
	ctx := t.Context()
	fast, err := s.Updates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := s.Updates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// In rounds of half a buffer that the fast one reads each time, so
	// that it never falls behind itself.
	total, round := 10*store.UpdateBuffer, store.UpdateBuffer/2
	for from := 0; from < total; from += round {
		publishDeltas(t, s, from, from+round)
		receiveDeltas(t, fast, "the fast subscriber", from, from+round)
	}

	held := 0
	for {
		n := receive(t, slow, "the slow subscriber")
		if n.Kind == store.NotifyResync {
			break
		}
		if n != delta(held) {
			t.Fatalf("the slow subscriber got %+v, want delta %d or a resync", n, held)
		}
		held++
	}
	if held < store.UpdateBuffer || held >= total {
		t.Fatalf("the slow subscriber got %d deltas before its resync, want its buffer's %d (or one more) and then the resync", held, store.UpdateBuffer)
	}
	publishDeltas(t, s, total, total+1)
	for last := held - 1; ; {
		n := receive(t, slow, "the slow subscriber")
		if n == delta(total) {
			break
		}
		var i int
		if _, err := fmt.Sscanf(n.Text, "delta %d", &i); err != nil || n != delta(i) || i <= last || i >= total {
			t.Fatalf("the slow subscriber got %+v after its resync, want delta %d (or one of the flood after delta %d)", n, total, last)
		}
		last = i
	}
	receiveDeltas(t, fast, "the fast subscriber", total, total+1)
}

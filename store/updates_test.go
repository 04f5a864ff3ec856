package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// updatesDelta is a delta the tests of Updates publish.
func updatesDelta(text string) store.Notification {
	return store.Notification{Kind: store.NotifyDelta, RunID: "run-1", MessageSeq: 1, Text: text}
}

// subscribeUpdates subscribes n times to s's Updates, each until its own
// cancel.
func subscribeUpdates(t *testing.T, s store.Store, n int) ([]<-chan store.Notification, []context.CancelFunc) {
	t.Helper()
	var chs []<-chan store.Notification
	var cancels []context.CancelFunc
	for range n {
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		ch, err := s.Updates(ctx)
		if err != nil {
			t.Fatalf("Updates: %v", err)
		}
		chs, cancels = append(chs, ch), append(cancels, cancel)
	}
	return chs, cancels
}

// awaitUpdate waits for the first notification of ch that is want,
// skipping those that are a resync when skipResync is set.
func awaitUpdate(t *testing.T, ch <-chan store.Notification, want store.Notification, skipResync bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatalf("the updates channel closed before %+v", want)
			}
			if n == want {
				return
			}
			if !skipResync || n.Kind != store.NotifyResync {
				t.Fatalf("got %+v, want %+v", n, want)
			}
		case <-timeout:
			t.Fatalf("no %+v within 10s", want)
		}
	}
}

// awaitClosed waits until ch is closed, failing on a notification.
func awaitClosed(t *testing.T, ch <-chan store.Notification) {
	t.Helper()
	select {
	case n, ok := <-ch:
		if ok {
			t.Fatalf("got %+v, want the channel closed", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the updates channel was not closed within 10s")
	}
}

// listenBackends returns how many backends LISTEN on s's updates channel.
func listenBackends(t *testing.T, s store.Store) int {
	t.Helper()
	n, err := store.ListenBackends(t.Context(), s)
	if err != nil {
		t.Fatalf("count the LISTEN backends: %v", err)
	}
	return n
}

// awaitNoListenBackend waits until no backend LISTENs on s's updates
// channel. The store closes its connection before it closes the last
// subscriber's channel, but PostgreSQL's backend exits a moment after it
// reads the client's goodbye, and tells no one: pg_stat_activity is
// asked again until it is gone.
func awaitNoListenBackend(t *testing.T, s store.Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); listenBackends(t, s) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d backends still LISTEN 10s after the listener stopped", listenBackends(t, s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPostgresUpdatesOneListener: a PostgreSQL store's subscribers share
// one LISTEN connection, closed when the last of them leaves and opened
// again for the next, and closed with the store.
func TestPostgresUpdatesOneListener(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s, observer := openMigrated(t, dsn), openMigrated(t, dsn) // the observer never subscribes
	chs, cancels := subscribeUpdates(t, s, 3)
	if n := listenBackends(t, observer); n != 1 {
		t.Fatalf("%d backends LISTEN for 3 subscribers, want 1", n)
	}
	if err := s.Publish(t.Context(), updatesDelta("one")); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chs {
		awaitUpdate(t, ch, updatesDelta("one"), false)
	}

	for _, cancel := range cancels {
		cancel()
	}
	for _, ch := range chs {
		awaitClosed(t, ch)
	}
	awaitNoListenBackend(t, observer)

	// The next subscriber listens again.
	chs, _ = subscribeUpdates(t, s, 1)
	if n := listenBackends(t, observer); n != 1 {
		t.Fatalf("%d backends LISTEN for a new subscriber, want 1", n)
	}
	if err := s.Publish(t.Context(), updatesDelta("two")); err != nil {
		t.Fatal(err)
	}
	awaitUpdate(t, chs[0], updatesDelta("two"), false)

	// Closing the store ends the listener and the subscriptions.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, chs[0])
	awaitNoListenBackend(t, observer)
	if _, err := s.Updates(t.Context()); err == nil {
		t.Error("Updates after Close = nil error, want one")
	}
}

// TestPostgresUpdatesTerminated terminates, for real, every backend of a
// database of the test's own, the listener's among them: every subscriber
// gets NotifyResync once the listener has reconnected, then the
// notifications sent after.
func TestPostgresUpdatesTerminated(t *testing.T) {
	s, terminate := storetest.NewPostgresDatabase(t)
	chs, _ := subscribeUpdates(t, s, 3)
	terminate()
	for _, ch := range chs {
		awaitUpdate(t, ch, store.Notification{Kind: store.NotifyResync}, false)
	}
	// The pool may hold terminated connections: each fails the one
	// statement that finds it dead, and is dropped.
	var err error
	for range 10 {
		if err = s.Publish(t.Context(), updatesDelta("after")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Publish after the termination: %v", err)
	}
	for _, ch := range chs {
		awaitUpdate(t, ch, updatesDelta("after"), true)
	}
	if n := listenBackends(t, s); n != 1 {
		t.Errorf("%d backends LISTEN after the reconnection, want 1", n)
	}
}

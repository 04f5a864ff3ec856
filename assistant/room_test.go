package assistant

import (
	"context"
	"log/slog"
	"testing"

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

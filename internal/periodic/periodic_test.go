package periodic_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/periodic"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestLoop checks that a pass runs at once and then every interval, that
// Stop waits for a pass under way and ends the loop, and that a Loop
// starts once.
func TestLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		passes := make(chan time.Time, 10)
		release := make(chan struct{})
		l := periodic.New(time.Minute, func(ctx context.Context) {
			passes <- time.Now()
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		l.Stop() // before Start: nothing to stop
		start := time.Now()
		if err := l.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := <-passes; !got.Equal(start) {
			t.Errorf("the first pass ran %s after Start, want at once", got.Sub(start))
		}
		release <- struct{}{}
		if got := <-passes; got.Sub(start) != time.Minute {
			t.Errorf("the second pass ran %s after Start, want 1m", got.Sub(start))
		}
		// The second pass is under way: Stop ends it and the loop.
		l.Stop()
		l.Stop()
		synctest.Wait()
		if len(passes) != 0 {
			t.Errorf("%d passes after Stop", len(passes))
		}
		if err := l.Start(t.Context()); !errors.Is(err, periodic.ErrStarted) {
			t.Errorf("Start after Stop = %v, want ErrStarted", err)
		}
	})
}

// TestLoopEndsWithContext checks that the loop ends when Start's context
// does, and that Stop then returns at once.
func TestLoopEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		l := periodic.New(time.Second, func(context.Context) { ran++ })
		ctx, cancel := context.WithCancel(t.Context())
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cancel()
		synctest.Wait() // the loop has returned
		l.Stop()
		if ran != 1 {
			t.Errorf("ran %d passes, want 1", ran)
		}
	})
}

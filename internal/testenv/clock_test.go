package testenv

import (
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now moved by itself: %v, want %v", got, start)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), start.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("after Advance, Now = %v, want %v", got, want)
	}
	earlier := start.Add(-time.Hour)
	c.Set(earlier)
	if got := c.Now(); !got.Equal(earlier) {
		t.Fatalf("after Set, Now = %v, want %v", got, earlier)
	}
}

// TestClockConcurrent advances a clock from several goroutines while
// others read it: under -race, no step is lost.
func TestClockConcurrent(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	const goroutines, steps = 8, 100
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range steps {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(goroutines*steps*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
}

package workers_test

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/workers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// goroutineID returns the id of the calling goroutine, as its stack trace
// names it.
func goroutineID(t *testing.T) uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		t.Fatalf("stack trace %q", buf)
	}
	id, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		t.Fatalf("stack trace %q: %v", buf, err)
	}
	return id
}

// TestRunKeepsAGoroutine checks that functions run one after the other go
// on the same goroutine, which is not the caller's, and that a goroutine
// that has waited its idle time for a function has ended.
func TestRunKeepsAGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workers.New(time.Minute)
		defer p.Close()
		var first, second, later uint64
		p.Run(func() { first = goroutineID(t) })
		// Run returns once its function has; the goroutine then goes back
		// to waiting, which a second Run finds once it is there.
		synctest.Wait()
		p.Run(func() { second = goroutineID(t) })
		if first == goroutineID(t) {
			t.Fatal("Run ran its function on its caller's goroutine")
		}
		if second != first {
			t.Errorf("the second function ran on goroutine %d, want %d, the first's", second, first)
		}
		time.Sleep(time.Minute + time.Second)
		p.Run(func() { later = goroutineID(t) })
		if later == first {
			t.Errorf("a function after the idle time ran on goroutine %d, which was to have ended", later)
		}
	})
}

// TestGoDoesNotQueue checks that a function handed over while every
// goroutine of the pool is busy runs at once, on another.
func TestGoDoesNotQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workers.New(time.Minute)
		defer p.Close()
		release, ran := make(chan struct{}), make(chan struct{})
		p.Go(func() { <-release })
		p.Go(func() { close(ran) })
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Error("a function waited for a busy goroutine")
		}
		close(release)
	})
}

// TestRunRaisesAPanic checks that a panic of Run's function is raised in
// Run's caller, and that the pool runs functions after it.
func TestRunRaisesAPanic(t *testing.T) {
	p := workers.New(time.Minute)
	defer p.Close()
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("Run's caller recovered %v, want boom", v)
			}
		}()
		p.Run(func() { panic("boom") })
		t.Error("Run returned after its function panicked")
	}()
	ran := false
	p.Run(func() { ran = true })
	if !ran {
		t.Error("the function after a panic did not run")
	}
}

// TestCloseEndsWaitingGoroutines checks that Close ends the goroutines
// waiting for a function, and that a function run after Close leaves no
// goroutine behind.
func TestCloseEndsWaitingGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	p := workers.New(time.Hour)
	p.Run(func() {})
	p.Go(func() {})
	p.Close()
	if err := goleak.Find(before); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	ran := false
	p.Run(func() { ran = true })
	if !ran {
		t.Error("Run after Close did not run its function")
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("after a Run after Close: %v", err)
	}
}

package workers

import (
	"sync"
	"time"
)

// Pool runs functions on goroutines it keeps: one that has run a function
// waits up to its idle time for the next, and then ends. It starts a
// goroutine whenever none is waiting, so it never queues a function
// behind another, and holds as many as have run at once lately. The zero
// value is not usable; use New.
type Pool struct {
	idle  time.Duration
	tasks chan func() // unbuffered: a send is taken by a waiting worker or not at all
	stop  chan struct{}
	once  sync.Once
}

// New returns a pool whose goroutines wait up to idle (at least a
// millisecond) for another function.
func New(idle time.Duration) *Pool {
	return &Pool{idle: max(idle, time.Millisecond), tasks: make(chan func()), stop: make(chan struct{})}
}

// Go runs f on a goroutine of p, one that is waiting or a new one, and
// returns without waiting for it. A panic of f is not recovered, as in a
// goroutine of f's own.
func (p *Pool) Go(f func()) {
	select {
	case p.tasks <- f:
	default:
		go p.work(f)
	}
}

// Run calls f on a goroutine of p and returns when f has; a panic of f is
// raised again in Run's caller.
func (p *Pool) Run(f func()) {
	done := make(chan any, 1)
	p.Go(func() {
		ended := false
		defer func() {
			if !ended {
				done <- panicked{recover()}
			}
		}()
		f()
		ended = true
		done <- nil
	})
	if v := <-done; v != nil {
		panic(v.(panicked).v)
	}
}

// panicked carries a panic's value, which may be nil, from Run's goroutine
// back to its caller.
type panicked struct{ v any }

// Close ends p's waiting goroutines and makes each of the others end after
// its function. p still runs functions after Close, each on a goroutine
// that then ends. Close does not wait for the functions running: their
// callers own them.
func (p *Pool) Close() { p.once.Do(func() { close(p.stop) }) }

// work runs f, then each function it is handed, until it has waited idle
// for one or p is closed.
func (p *Pool) work(f func()) {
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		f = nil // not kept alive while waiting
		select {
		case <-p.stop:
			return
		default:
		}
		t.Reset(p.idle)
		select {
		case f = <-p.tasks:
		case <-t.C:
			return
		case <-p.stop:
			return
		}
	}
}

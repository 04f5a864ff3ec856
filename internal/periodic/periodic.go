package periodic

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStarted is returned by Start on a Loop already started.
var ErrStarted = errors.New("periodic: already started")

// Loop runs a pass at once and then every interval, in one goroutine of its
// own, from Start until Stop (or until Start's context ends).
type Loop struct {
	interval time.Duration
	pass     func(ctx context.Context)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a Loop that calls pass every interval, which must be
// positive. pass gets a context that ends at Stop.
func New(interval time.Duration, pass func(ctx context.Context)) *Loop {
	return &Loop{interval: interval, pass: pass}
}

// Start starts the loop; its first pass runs at once. The loop runs until
// Stop or until ctx ends. A Loop starts once: ErrStarted afterwards, even
// after Stop.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.run(ctx, l.done)
	return nil
}

// Stop ends the loop and waits for its goroutine, and for a pass under
// way, to return. It is idempotent and safe to call without Start.
func (l *Loop) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return
	}
	l.cancel()
	<-l.done
	l.done = nil
}

func (l *Loop) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		l.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

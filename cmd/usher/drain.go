package main

import (
	"context"
	"time"
)

// drainKey is the context key of a drain.
type drainKey struct{}

// drain tells an orchestrator's stop (SIGTERM) from a person's (SIGINT):
// serve meets the first by failing its readiness for server.shutdown_delay
// while it goes on serving, and the second by stopping at once.
type drain struct {
	interrupt, term context.Context
}

// withDrain returns a context that ends when interrupt or term ends, as
// every command but serve needs, and carries both for serve (drainOf).
func withDrain(interrupt, term context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithValue(interrupt, drainKey{}, &drain{interrupt: interrupt, term: term}))
	stop := context.AfterFunc(term, cancel)
	return ctx, func() { stop(); cancel() }
}

// drainOf returns ctx's drain, or nil when ctx has none (a test's serve).
func drainOf(ctx context.Context) *drain {
	d, _ := ctx.Value(drainKey{}).(*drain)
	return d
}

// serving returns the context to serve under: it ends when interrupt
// ends, or delay after term ends, and draining is called as term ends.
func (d *drain) serving(delay time.Duration, draining func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(d.interrupt)
	stopTerm := context.AfterFunc(d.term, func() {
		draining()
		t := time.AfterFunc(delay, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stopTerm(); cancel() }
}

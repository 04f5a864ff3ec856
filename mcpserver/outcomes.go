package mcpserver

import (
	"context"
	"sync"
)

// maxPendingOutcomes bounds the outcome records being written at once.
const maxPendingOutcomes = 64

// outcomes writes the records of how tool calls ended (the execution's
// finish and its audit record) while their results go back to the callers.
// What must be durable before a tool runs (the decision, the execution's
// start) is written before it runs, on the caller's time; the outcome is not
// needed for the answer, so no caller waits for its write. Should the
// process stop before an outcome is written, the execution stays started
// and is reported as outcome_unknown (Executions), never run again.
//
// At most maxPendingOutcomes are written at once; beyond that a caller
// writes its own before it answers, so that callers slow down to what the
// database takes rather than pile up work in memory.
//
// A retry of a call whose outcome this process is still writing waits for
// it (await), so that it is answered from the finished execution rather
// than told the call is still running.
type outcomes struct {
	slots chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending map[string]chan struct{} // idempotency key → closed when written
}

func newOutcomes() *outcomes {
	return &outcomes{slots: make(chan struct{}, maxPendingOutcomes), pending: map[string]chan struct{}{}}
}

// write runs w, which records the outcome of the call of key (empty for a
// call without one), now in its own goroutine, or, when as many are being
// written as allowed, in the caller's.
func (o *outcomes) write(key string, w func()) {
	var done chan struct{}
	if key != "" {
		done = make(chan struct{})
		o.mu.Lock()
		o.pending[key] = done
		o.mu.Unlock()
	}
	run := func() {
		w()
		if done != nil {
			o.mu.Lock()
			delete(o.pending, key)
			o.mu.Unlock()
			close(done)
		}
	}
	select {
	case o.slots <- struct{}{}:
		o.wg.Go(func() {
			defer func() { <-o.slots }()
			run()
		})
	default:
		run()
	}
}

// await returns once the outcome of the call of key, if this process is
// writing one, is written, or when ctx ends.
func (o *outcomes) await(ctx context.Context, key string) {
	if key == "" {
		return
	}
	o.mu.Lock()
	done := o.pending[key]
	o.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// wait returns once every write started has ended, or with ctx's error.
func (o *outcomes) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		o.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
			return ctx.Err()
		}
	}
}

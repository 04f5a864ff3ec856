package store

import (
	"context"
	"errors"
	"sync"
)

// UpdateBuffer is how many notifications each subscriber of Updates may
// have waiting (see Store.Updates).
const UpdateBuffer = 1024

// errStoreClosed refuses a subscriber of a closed store's Updates.
var errStoreClosed = errors.New("store: the store is closed")

// updateHub fans notifications out to this process's subscribers: on
// SQLite each commit publishes to it, on PostgreSQL the store's one
// listener does. Publishing never waits for a subscriber: each has a
// queue of UpdateBuffer notifications, emptied into its channel by a
// goroutine of its own, so a slow one holds up neither the publisher nor
// the others. What does not fit is dropped, and the subscriber owes a
// NotifyResync, queued in the first slot its queue frees: after every
// notification it missed.
type updateHub struct {
	mu     sync.Mutex
	subs   map[*updateSub]struct{}
	closed bool
}

// updateSub is one subscriber of an updateHub.
type updateSub struct {
	out  chan Notification // unbuffered: the queue is the buffer
	quit chan struct{}     // closed when the subscriber leaves; its pump closes out
	wake chan struct{}     // one slot: the queue is no longer empty

	mu    sync.Mutex
	queue ring
	// resyncs counts the NotifyResync in the queue. A notification dropped
	// while there is one needs no other: the subscriber reads it after
	// the drop, and reads the database after that.
	resyncs int
	owed    bool // notifications were dropped: a NotifyResync is owed
	left    bool // the subscriber left (its ctx ended, or the hub closed)

	// stop unregisters the subscriber's context.AfterFunc.
	stop func() bool
}

// subscribe adds a subscriber until ctx ends or the hub closes, when its
// channel is closed. leaving, if not nil, is called when ctx ends, before
// the channel closes (not when the hub closes).
func (h *updateHub) subscribe(ctx context.Context, leaving func()) (<-chan Notification, error) {
	sub := &updateSub{
		out: make(chan Notification), quit: make(chan struct{}), wake: make(chan struct{}, 1),
		queue: ring{items: make([]Notification, UpdateBuffer)},
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errStoreClosed
	}
	if h.subs == nil {
		h.subs = map[*updateSub]struct{}{}
	}
	h.subs[sub] = struct{}{}
	go sub.pump()
	sub.stop = context.AfterFunc(ctx, func() {
		if leaving != nil {
			leaving()
		}
		h.unsubscribe(sub)
	})
	return sub.out, nil
}

// unsubscribe removes sub, if it has not left yet, and ends its pump.
func (h *updateHub) unsubscribe(sub *updateSub) {
	h.mu.Lock()
	_, ok := h.subs[sub]
	delete(h.subs, sub)
	h.mu.Unlock()
	if ok {
		sub.leave()
	}
}

// publish queues n for every subscriber.
func (h *updateHub) publish(n Notification) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		sub.push(n)
	}
}

// close ends every subscription and refuses new ones.
func (h *updateHub) close() {
	h.mu.Lock()
	subs := h.subs
	h.subs, h.closed = nil, true
	h.mu.Unlock()
	for sub := range subs {
		sub.stop()
		sub.leave()
	}
}

// push queues n, or drops it, owing a resync unless one is queued, when
// the queue is full.
func (sub *updateSub) push(n Notification) {
	sub.mu.Lock()
	sub.pushLocked(n)
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

// pushLocked is push with sub.mu held, without the pump's wake-up.
func (sub *updateSub) pushLocked(n Notification) {
	switch {
	case !sub.queue.push(n):
		sub.owed = sub.owed || sub.resyncs == 0
	case n.Kind == NotifyResync:
		sub.resyncs++
	}
}

// leave makes the pump stop and close the subscriber's channel.
func (sub *updateSub) leave() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.left {
		sub.left = true
		close(sub.quit)
	}
}

// pump hands the queue to the subscriber's channel, one at a time, until
// the subscriber leaves. The resync owed for dropped notifications takes
// the first slot that frees, so it comes after every drop it covers. A
// resync popped no longer covers the drops that follow, though it may not
// have been handed over yet: at worst the subscriber gets one more.
func (sub *updateSub) pump() {
	defer close(sub.out)
	for {
		sub.mu.Lock()
		n, ok := sub.queue.pop()
		if ok && n.Kind == NotifyResync {
			sub.resyncs--
		}
		if ok && sub.owed {
			sub.owed = false
			sub.pushLocked(Notification{Kind: NotifyResync})
		}
		sub.mu.Unlock()
		if !ok {
			select {
			case <-sub.wake:
				continue
			case <-sub.quit:
				return
			}
		}
		select {
		case sub.out <- n:
		case <-sub.quit:
			return
		}
	}
}

// ring is a queue of notifications of a fixed capacity.
type ring struct {
	items []Notification
	head  int // the oldest item's index
	n     int // how many are queued
}

// push appends x, or reports that the ring is full.
func (r *ring) push(x Notification) bool {
	if r.n == len(r.items) {
		return false
	}
	r.items[(r.head+r.n)%len(r.items)] = x
	r.n++
	return true
}

// pop removes and returns the oldest item, if there is one.
func (r *ring) pop() (Notification, bool) {
	if r.n == 0 {
		return Notification{}, false
	}
	x := r.items[r.head]
	r.items[r.head] = Notification{} // let its text go
	r.head = (r.head + 1) % len(r.items)
	r.n--
	return x, true
}

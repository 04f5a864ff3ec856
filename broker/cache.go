package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// keyCache holds a loaded key set and reloads it at a bounded rate. The
// Keyring (from the store) and the RemoteKeySet (over HTTP) both use it, so
// that a flood of tokens with unknown kids causes at most one load per
// minInterval, however many arrive.
type keyCache[T any] struct {
	// load reads the set afresh; prev is the current set (the zero T
	// before the first load), for reuse.
	load func(ctx context.Context, prev T) (T, error)
	// maxAge is how long a loaded set is used before get loads it again.
	maxAge time.Duration
	// minInterval is the least time between two loads by refresh.
	minInterval time.Duration
	now         func() time.Time
	// kept reports a failed load after which the previous set stays in use.
	kept func(error)

	cur atomic.Pointer[loadedSet[T]]

	mu      sync.Mutex // serialises loads; guards last and lastErr
	last    time.Time  // when the last load started
	lastErr error      // what it returned
}

// loadedSet is a key set and when it was loaded.
type loadedSet[T any] struct {
	set T
	at  time.Time
}

// peek returns the current set without loading, or the zero T.
func (c *keyCache[T]) peek() T {
	if e := c.cur.Load(); e != nil {
		return e.set
	}
	var zero T
	return zero
}

// get returns the current set, loading it (at the bounded rate) when there
// is none or it is older than maxAge.
func (c *keyCache[T]) get(ctx context.Context) (T, error) {
	if e := c.cur.Load(); e != nil && c.now().Sub(e.at) < c.maxAge {
		return e.set, nil
	}
	return c.refresh(ctx)
}

// refresh loads the set unless a load started within minInterval, in which
// case it returns what that load left. Callers that arrive during a load
// wait for it and share its result. When a load fails but an earlier one
// succeeded, the earlier set stays in use: every key carries its own
// validity, checked at each use.
func (c *keyCache[T]) refresh(ctx context.Context) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.cur.Load()
	if !c.last.IsZero() && c.now().Sub(c.last) < c.minInterval {
		if e == nil {
			var zero T
			return zero, c.lastErr
		}
		return e.set, nil
	}
	set, err := c.loadLocked(ctx)
	if err != nil && e != nil {
		c.kept(err)
		return e.set, nil
	}
	return set, err
}

// reload loads the set now, however recent the last load.
func (c *keyCache[T]) reload(ctx context.Context) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked(ctx)
}

// loadLocked loads the set and makes it current. c.mu must be held, so
// loads never overtake one another.
func (c *keyCache[T]) loadLocked(ctx context.Context) (T, error) {
	now := c.now()
	c.last = now
	set, err := c.load(ctx, c.peek())
	c.lastErr = err
	if err != nil {
		var zero T
		return zero, err
	}
	c.cur.Store(&loadedSet[T]{set: set, at: now})
	return set, nil
}

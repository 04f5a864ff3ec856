package jwks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnknownKey reports that no key of the set has the requested kid, even
// after reloading the set (at the bounded rate).
var ErrUnknownKey = errors.New("jwks: unknown signing key")

// Loader reads a key set afresh. prev is the set in use (the zero T before
// the first load), so that what has not changed can be reused. A positive
// maxAge shorter than the cache's MaxAge shortens how long this set is used
// (an HTTP Cache-Control max-age); zero means MaxAge.
type Loader[T any] func(ctx context.Context, prev T) (set T, maxAge time.Duration, err error)

// CacheOptions configures a Cache. The zero value of every field selects
// its default.
type CacheOptions struct {
	// MaxAge is how long a loaded set is used before the next Get loads it
	// again. Default 5 min.
	MaxAge time.Duration
	// MinRefreshInterval bounds the loads that Refresh starts (for a kid
	// not in the set) and is the shortest a set is ever used: at most one
	// load per interval, so a flood of tokens with made-up kids causes no
	// flood of loads. Default 10 s.
	MinRefreshInterval time.Duration
	// LoadTimeout bounds one load. A load outlives the cancellation of the
	// caller that started it, since others may wait for it too. Default
	// 10 s.
	LoadTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives failed loads after which the older set stays in use.
	// Default slog.Default().
	Logger *slog.Logger
	// Name describes the set in log records, e.g. its URL.
	Name string
}

// Cache holds one key set and reloads it at a bounded rate. It is safe for
// concurrent use.
type Cache[T any] struct {
	load Loader[T]
	opts CacheOptions

	cur atomic.Pointer[loaded[T]] // nil until the first successful load

	mu      sync.Mutex // guards the fields below; never held during a load
	flight  *flight[T] // the load under way, or nil
	started time.Time  // when the last load started
	lastErr error      // what the last load returned
}

// loaded is a key set and when it expires.
type loaded[T any] struct {
	set     T
	expires time.Time
}

// flight is one load; done is closed when set and err are final.
type flight[T any] struct {
	done chan struct{}
	set  T
	err  error
}

// NewCache returns a cache of the set that load reads, loaded on first use.
func NewCache[T any](load Loader[T], opts *CacheOptions) (*Cache[T], error) {
	var o CacheOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxAge == 0 {
		o.MaxAge = 5 * time.Minute
	}
	if o.MinRefreshInterval == 0 {
		o.MinRefreshInterval = 10 * time.Second
	}
	if o.LoadTimeout == 0 {
		o.LoadTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var errs []error
	if load == nil {
		errs = append(errs, errors.New("a loader is required"))
	}
	if o.MaxAge < 0 || o.MinRefreshInterval < 0 || o.LoadTimeout < 0 {
		errs = append(errs, errors.New("MaxAge, MinRefreshInterval and LoadTimeout must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("jwks: cache options: %w", err)
	}
	return &Cache[T]{load: load, opts: o}, nil
}

// Peek returns the current set without loading, or the zero T.
func (c *Cache[T]) Peek() T {
	if e := c.cur.Load(); e != nil {
		return e.set
	}
	var zero T
	return zero
}

// Get returns the current set, loading it (at the bounded rate) when there
// is none or it has expired.
func (c *Cache[T]) Get(ctx context.Context) (T, error) {
	if e := c.cur.Load(); e != nil && c.opts.Now().Before(e.expires) {
		return e.set, nil
	}
	return c.Refresh(ctx)
}

// Refresh loads the set again, for a kid it does not hold: it joins the
// load under way, if any; else it starts one unless one started within
// MinRefreshInterval, in which case it returns what that load left. When a
// load fails but an earlier one succeeded, the earlier set is returned and
// stays in use: each key carries its own validity, checked at each use.
func (c *Cache[T]) Refresh(ctx context.Context) (T, error) {
	c.mu.Lock()
	f := c.flight
	if f == nil {
		if !c.started.IsZero() && c.opts.Now().Sub(c.started) < c.opts.MinRefreshInterval {
			err := c.lastErr
			c.mu.Unlock()
			if e := c.cur.Load(); e != nil {
				return e.set, nil
			}
			var zero T
			return zero, err
		}
		f = c.startLocked(ctx)
	}
	c.mu.Unlock()
	set, err := c.wait(ctx, f)
	if err != nil && ctx.Err() == nil {
		if e := c.cur.Load(); e != nil {
			return e.set, nil
		}
	}
	return set, err
}

// Reload loads the set now, however recent the last load, and returns the
// load's own result. A load already under way may predate what the caller
// wants to read (its own write), so Reload waits for it and starts another.
func (c *Cache[T]) Reload(ctx context.Context) (T, error) {
	for {
		c.mu.Lock()
		f := c.flight
		if f == nil {
			f = c.startLocked(ctx)
			c.mu.Unlock()
			return c.wait(ctx, f)
		}
		c.mu.Unlock()
		if _, err := c.wait(ctx, f); ctx.Err() != nil {
			var zero T
			return zero, err
		}
	}
}

// startLocked starts a load; c.mu is held.
func (c *Cache[T]) startLocked(ctx context.Context) *flight[T] {
	f := &flight[T]{done: make(chan struct{})}
	c.flight = f
	c.started = c.opts.Now()
	prev := c.Peek()
	go c.run(context.WithoutCancel(ctx), f, prev)
	return f
}

// run performs the load of f and publishes its result.
func (c *Cache[T]) run(ctx context.Context, f *flight[T], prev T) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.LoadTimeout)
	defer cancel()
	set, maxAge, err := c.load(ctx, prev)
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		ttl := c.opts.MaxAge
		if maxAge > 0 && maxAge < ttl {
			ttl = maxAge
		}
		ttl = max(ttl, c.opts.MinRefreshInterval)
		c.cur.Store(&loaded[T]{set: set, expires: now.Add(ttl)})
	} else if c.cur.Load() != nil {
		c.opts.Logger.Warn("jwks: reloading the key set failed; using the loaded set", "set", c.opts.Name, "err", err)
	}
	f.set, f.err = set, err
	c.lastErr = err
	c.flight = nil
	close(f.done)
}

// wait waits for f, or for the end of ctx.
func (c *Cache[T]) wait(ctx context.Context, f *flight[T]) (T, error) {
	select {
	case <-f.done:
		return f.set, f.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("jwks: waiting for the key set: %w", context.Cause(ctx))
	}
}

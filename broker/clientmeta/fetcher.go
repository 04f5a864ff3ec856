package clientmeta

import (
	"container/list"
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultTimeout      = 5 * time.Second
	DefaultMaxBodyBytes = 64 << 10
	DefaultCacheSize    = 1000
	DefaultMinTTL       = 5 * time.Minute
	DefaultMaxTTL       = 24 * time.Hour
)

// Options configures a Fetcher. The zero value (or nil) is the production
// configuration.
type Options struct {
	// AllowLoopbackHTTP accepts http client_ids to a loopback host, and
	// lets both http and https dial loopback addresses. Usher sets it only
	// when its own public URL is on loopback (development, tests), where a
	// client on the same machine serves its document over plain http.
	AllowLoopbackHTTP bool
	// Resolver looks host names up; nil is net.DefaultResolver.LookupNetIP.
	Resolver Resolver
	// RootCAs verifies the documents' TLS certificates; nil is the system
	// pool. There is deliberately no HTTPClient option: the Fetcher's own
	// transport is what checks the addresses it dials, and a client from
	// outside would bypass it.
	RootCAs *x509.CertPool
	// Timeout bounds one fetch, from the name lookup to the last byte of
	// the body; zero is DefaultTimeout.
	Timeout time.Duration
	// MaxBodyBytes is the largest document accepted; a larger one is
	// refused. Zero is DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// CacheSize is the number of documents kept; zero is
	// DefaultCacheSize, a negative number disables the cache.
	CacheSize int
	// MinTTL and MaxTTL clamp a cached document's lifetime; zero is
	// DefaultMinTTL, DefaultMaxTTL.
	MinTTL, MaxTTL time.Duration
	// Now is the clock of the cache; nil is time.Now.
	Now func() time.Time
}

// Fetcher fetches, validates and caches Client ID Metadata Documents. It is
// safe for concurrent use.
type Fetcher struct {
	opts   Options
	client *http.Client

	mu      sync.Mutex
	entries map[string]*list.Element // of *entry, by client_id
	lru     *list.List               // most recently used first
	flights map[string]*flight       // fetches under way, by client_id
}

// entry is a cached document.
type entry struct {
	clientID string
	doc      *Document
	etag     string
	expires  time.Time
}

// flight is a fetch shared by the callers that asked for one client_id
// while it ran.
type flight struct {
	done chan struct{}
	doc  *Document
	err  *Error
}

// New returns a Fetcher configured by opts (nil for the defaults).
func New(opts *Options) (*Fetcher, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 || o.MaxBodyBytes < 0 || o.MinTTL < 0 || o.MaxTTL < 0 {
		return nil, errors.New("clientmeta: negative Timeout, MaxBodyBytes, MinTTL or MaxTTL")
	}
	o.Timeout = orDefault(o.Timeout, DefaultTimeout)
	o.MaxBodyBytes = orDefault(o.MaxBodyBytes, DefaultMaxBodyBytes)
	o.MinTTL = orDefault(o.MinTTL, DefaultMinTTL)
	o.MaxTTL = orDefault(o.MaxTTL, DefaultMaxTTL)
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MinTTL > o.MaxTTL {
		return nil, errors.New("clientmeta: MinTTL is longer than MaxTTL")
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver.LookupNetIP
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &dialer{resolve: o.Resolver, allowLoopback: o.AllowLoopbackHTTP, rootCAs: o.RootCAs}
	transport := &http.Transport{
		Proxy:                  nil, // the address dialled must be the document's host
		DialContext:            d.dialHTTP,
		DialTLSContext:         d.dialTLS,
		DisableKeepAlives:      true, // fetches are rare: the cache answers most lookups
		MaxResponseHeaderBytes: 16 << 10,
		ResponseHeaderTimeout:  o.Timeout,
	}
	return &Fetcher{
		opts: o,
		client: &http.Client{
			Transport: transport,
			// Redirects are refused: the draft forbids following them.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		entries: map[string]*list.Element{},
		lru:     list.New(),
		flights: map[string]*flight{},
	}, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Fetch returns the validated document of clientID: from the cache while it
// is fresh, else fetched (or revalidated) over the network, one request for
// all the callers asking for clientID meanwhile. Every error is an *Error.
// When ctx ends first, Fetch returns at once; the shared request goes on
// (bounded by Options.Timeout) for the other callers and the cache.
func (f *Fetcher) Fetch(ctx context.Context, clientID string) (*Document, error) {
	if err := checkClientID(clientID, f.opts.AllowLoopbackHTTP); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if doc := f.freshLocked(clientID); doc != nil {
		f.mu.Unlock()
		return doc.clone(), nil
	}
	fl, ok := f.flights[clientID]
	if !ok {
		fl = &flight{done: make(chan struct{})}
		f.flights[clientID] = fl
		var stale entry
		if el, ok := f.entries[clientID]; ok {
			stale = *el.Value.(*entry)
		}
		go f.run(context.WithoutCancel(ctx), clientID, fl, stale)
	}
	f.mu.Unlock()
	select {
	case <-fl.done:
		if fl.err != nil {
			return nil, fl.err
		}
		return fl.doc.clone(), nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fail("fetching the client metadata document timed out", context.Cause(ctx))
		}
		return nil, fail("fetching the client metadata document was cancelled", context.Cause(ctx))
	}
}

// freshLocked returns the cached document of clientID while it is fresh,
// marking it recently used; f.mu is held.
func (f *Fetcher) freshLocked(clientID string) *Document {
	el, ok := f.entries[clientID]
	if !ok {
		return nil
	}
	e := el.Value.(*entry)
	if !f.opts.Now().Before(e.expires) {
		return nil
	}
	f.lru.MoveToFront(el)
	return e.doc
}

// run performs the fetch of fl and publishes its result to the waiters
// and the cache. stale is the cached entry to revalidate (zero if none).
func (f *Fetcher) run(ctx context.Context, clientID string, fl *flight, stale entry) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	res, err := f.get(ctx, clientID, stale)
	received := f.opts.Now() // the lifetime runs from the answer
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err != nil:
		// Failures are not cached; a stale entry stays for revalidation.
	case res.noStore:
		f.removeLocked(clientID)
	default:
		f.storeLocked(&entry{clientID: clientID, doc: res.doc, etag: res.etag, expires: received.Add(res.ttl)})
	}
	// The waiters are released after the cache is filled, so that a
	// caller's next Fetch finds the entry.
	delete(f.flights, clientID)
	fl.doc, fl.err = res.doc, err
	close(fl.done)
}

// storeLocked inserts or replaces e, evicting the least recently used
// entries beyond CacheSize; f.mu is held.
func (f *Fetcher) storeLocked(e *entry) {
	if f.opts.CacheSize < 0 {
		return
	}
	if el, ok := f.entries[e.clientID]; ok {
		el.Value = e
		f.lru.MoveToFront(el)
		return
	}
	f.entries[e.clientID] = f.lru.PushFront(e)
	for f.lru.Len() > f.opts.CacheSize {
		last := f.lru.Back()
		f.lru.Remove(last)
		delete(f.entries, last.Value.(*entry).clientID)
	}
}

// removeLocked drops clientID's entry; f.mu is held.
func (f *Fetcher) removeLocked(clientID string) {
	if el, ok := f.entries[clientID]; ok {
		f.lru.Remove(el)
		delete(f.entries, clientID)
	}
}

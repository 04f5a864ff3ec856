package broker

import (
	"context"
	"sync"
	"time"
)

// DefaultTokenCacheSize is how many (subject, audience) pairs a TokenCache
// keeps unless told otherwise.
const DefaultTokenCacheSize = 4096

// TokenCache hands out broker tokens by subject and audience — what Usher
// presents to an upstream MCP server for a caller — reusing each until
// shortly before it expires (one minute, or half the lifetime if that is
// shorter), as TokenSource does. It is bounded: it holds at most its size
// of pairs, forgets a pair unused for longer than the token lifetime (its
// token would be minted anew anyway), and holds nothing of the requests
// that asked: each mint runs under the context of the call that needs it.
// It is safe for concurrent use.
type TokenCache struct {
	b    *Broker
	size int

	mu      sync.Mutex
	entries map[[2]string]*cachedToken
}

// cachedToken is one pair's current token; mu serialises its mints.
type cachedToken struct {
	mu   sync.Mutex
	tok  Token
	used time.Time // under TokenCache.mu
}

// NewTokenCache returns a cache of b's tokens holding at most size pairs
// (DefaultTokenCacheSize when size is not positive).
func NewTokenCache(b *Broker, size int) *TokenCache {
	if size <= 0 {
		size = DefaultTokenCacheSize
	}
	return &TokenCache{b: b, size: size, entries: map[[2]string]*cachedToken{}}
}

// Token returns a token of subject for audience, minted under ctx when
// the pair has none that is fresh.
func (c *TokenCache) Token(ctx context.Context, subject, audience string) (string, error) {
	now := c.b.now()
	key := [2]string{subject, audience}
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.evict(now)
		e = &cachedToken{}
		c.entries[key] = e
	}
	e.used = now
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	renewBefore := min(time.Minute, c.b.lifetime/2)
	if e.tok.Raw == "" || !now.Before(e.tok.Expiry.Add(-renewBefore)) {
		t, err := c.b.Mint(ctx, Grant{Subject: subject, Audience: audience})
		if err != nil {
			return "", err
		}
		e.tok = t
	}
	return e.tok.Raw, nil
}

// len reports how many pairs the cache holds.
func (c *TokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// evict makes room for one more pair: it forgets the pairs unused for a
// token's lifetime, then, while the cache is full, the least recently
// used. c.mu is held.
func (c *TokenCache) evict(now time.Time) {
	for k, e := range c.entries {
		if now.Sub(e.used) > c.b.lifetime {
			delete(c.entries, k)
		}
	}
	for len(c.entries) >= c.size {
		var oldest [2]string
		var at time.Time
		first := true
		for k, e := range c.entries {
			if first || e.used.Before(at) {
				oldest, at, first = k, e.used, false
			}
		}
		delete(c.entries, oldest)
	}
}

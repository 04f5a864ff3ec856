package broker

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"sync"
	"time"
)

// tokenHash keys the verified-token cache: the SHA-256 of a token's bytes,
// so that the cache holds no credential.
type tokenHash [sha256.Size]byte

func hashToken(raw string) tokenHash { return sha256.Sum256([]byte(raw)) }

// verifiedCache remembers the claims of tokens that passed every check, so
// that a token presented again (each call of a turn presents the same one)
// costs a hash and a lookup instead of parsing and an RSA verification. An
// entry is used only while its token is unexpired (checked at every use,
// with the verifier's leeway) and while the key source still returns the
// key it was verified with; a key that is gone or different means the key
// set changed, and the whole cache is dropped. The cache holds at most max
// entries.
type verifiedCache struct {
	max    int
	leeway time.Duration

	mu sync.Mutex
	m  map[tokenHash]*verifiedEntry
}

// verifiedEntry is one verified token.
type verifiedEntry struct {
	claims  *Claims
	kid     string
	key     *rsa.PublicKey
	expires time.Time // exp + leeway: the first instant it is refused
}

func newVerifiedCache(max int, leeway time.Duration) *verifiedCache {
	return &verifiedCache{max: max, leeway: leeway, m: make(map[tokenHash]*verifiedEntry)}
}

// get returns a copy of the claims of the token hashed to sum if it is
// cached, unexpired at now, and its key is unchanged in keys.
func (c *verifiedCache) get(ctx context.Context, sum tokenHash, now time.Time, keys KeySource) (*Claims, bool) {
	c.mu.Lock()
	e := c.m[sum]
	if e != nil && !now.Before(e.expires) {
		delete(c.m, sum) // the full check says why it fails
		e = nil
	}
	c.mu.Unlock()
	if e == nil {
		return nil, false
	}
	if k, err := keys.Key(ctx, e.kid); err != nil || (k != e.key && !k.Equal(e.key)) {
		c.clear()
		return nil, false
	}
	return e.claims.clone(), true
}

// put caches the claims of a token verified with key (kid) at now.
func (c *verifiedCache) put(sum tokenHash, kid string, key *rsa.PublicKey, claims *Claims, now time.Time) {
	e := &verifiedEntry{claims: claims, kid: kid, key: key, expires: claims.ExpiresAt.Add(c.leeway)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[sum]; !ok && len(c.m) >= c.max {
		c.evictLocked(now)
	}
	c.m[sum] = e
}

// evictLocked makes room: it drops the expired entries and, if that frees
// less than a quarter of the cache, arbitrary others (map order is
// random) down to three quarters, so that the next inserts are cheap.
// c.mu is held.
func (c *verifiedCache) evictLocked(now time.Time) {
	for sum, e := range c.m {
		if !now.Before(e.expires) {
			delete(c.m, sum)
		}
	}
	keep := c.max - max(1, c.max/4)
	for sum := range c.m {
		if len(c.m) <= keep {
			break
		}
		delete(c.m, sum)
	}
}

// clear drops every entry.
func (c *verifiedCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

// len returns the number of entries.
func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

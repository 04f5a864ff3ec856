package identity

import (
	"context"
	"crypto/rsa"
	"slices"
	"sync"
	"time"
)

const (
	// verifiedTTL is the longest a verified token is answered from
	// memory before it is verified in full again; never past its expiry.
	verifiedTTL = time.Minute
	// maxVerified bounds how many verified tokens are remembered.
	maxVerified = 1024
)

// verifiedTokens remembers the principals of access tokens verified in
// full, by the SHA-256 of the token, so that a client sending the same
// token with each request does not have its RS256 signature and claims
// checked every time. A remembered token counts only until the earlier of
// its expiry and verifiedTTL after its verification, and only while the
// issuer's key set still holds the key that verified it (a key withdrawn
// from the JWKS ends every token it signed). Only successes are
// remembered: a refused token is checked in full each time.
type verifiedTokens struct {
	mu     sync.Mutex
	tokens map[[32]byte]verifiedToken
}

// verifiedToken is a token that passed Verify.
type verifiedToken struct {
	principal Principal
	kid       string
	key       *rsa.PublicKey // the key of kid that verified it
	until     time.Time      // min(expiry, verification + verifiedTTL)
}

// get returns the principal of the token whose hash is sum if it was
// verified, has not expired at now, was verified less than verifiedTTL
// ago, and keys still holds the key that verified it under its kid.
func (c *verifiedTokens) get(ctx context.Context, sum [32]byte, now time.Time, keys *remoteKeys) (Principal, bool) {
	c.mu.Lock()
	t, ok := c.tokens[sum]
	c.mu.Unlock()
	if !ok {
		return Principal{}, false
	}
	if !now.Before(t.until) {
		c.forget(sum)
		return Principal{}, false
	}
	// The key set hands out the same key as long as it holds it: the same
	// pointer is the same key, without comparing its numbers.
	if k, err := keys.set.Key(ctx, t.kid); err != nil || (k != t.key && !k.Equal(t.key)) {
		c.forget(sum)
		return Principal{}, false
	}
	p := t.principal
	p.Scopes, p.Groups, p.Roles = slices.Clone(p.Scopes), slices.Clone(p.Groups), slices.Clone(p.Roles)
	return p, true
}

// put remembers a token verified at now, which expires at expiry.
func (c *verifiedTokens) put(sum [32]byte, p Principal, used usedKey, now, expiry time.Time) {
	if used.key == nil || expiry.IsZero() {
		return
	}
	until := now.Add(verifiedTTL)
	if expiry.Before(until) {
		until = expiry
	}
	p.Scopes, p.Groups, p.Roles = slices.Clone(p.Scopes), slices.Clone(p.Groups), slices.Clone(p.Roles)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil {
		c.tokens = make(map[[32]byte]verifiedToken)
	}
	if len(c.tokens) >= maxVerified {
		for s, t := range c.tokens {
			if !now.Before(t.until) {
				delete(c.tokens, s)
			}
		}
		// Still full: forget any one.
		for s := range c.tokens {
			if len(c.tokens) < maxVerified {
				break
			}
			delete(c.tokens, s)
		}
	}
	c.tokens[sum] = verifiedToken{principal: p, kid: used.kid, key: used.key, until: until}
}

func (c *verifiedTokens) forget(sum [32]byte) {
	c.mu.Lock()
	delete(c.tokens, sum)
	c.mu.Unlock()
}

// usedKey is where remoteKeys.VerifySignature records the key that
// verified a token, when the context carries one (withUsedKey).
type usedKey struct {
	kid string
	key *rsa.PublicKey
}

type usedKeyContext struct{}

// withUsedKey returns ctx carrying u for VerifySignature to fill.
func withUsedKey(ctx context.Context, u *usedKey) context.Context {
	return context.WithValue(ctx, usedKeyContext{}, u)
}

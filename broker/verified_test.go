package broker

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// swappableKeys is a KeySource whose keys a test can change, as a key set
// changes under a verifier.
type swappableKeys struct {
	mu   sync.Mutex
	keys map[string]*rsa.PublicKey
}

func (s *swappableKeys) Key(_ context.Context, kid string) (*rsa.PublicKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[kid]; k != nil {
		return k, nil
	}
	return nil, ErrUnknownKey
}

func (s *swappableKeys) set(kid string, k *rsa.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k == nil {
		delete(s.keys, kid)
	} else {
		s.keys[kid] = k
	}
}

// cachedVerifier returns a verifier with a cache of size over keys that
// hold key under kid "k1", on clock c.
func cachedVerifier(t *testing.T, key *rsa.PrivateKey, c *testenv.Clock, size int) (*Verifier, *swappableKeys) {
	t.Helper()
	keys := &swappableKeys{keys: map[string]*rsa.PublicKey{"k1": &key.PublicKey}}
	v, err := NewVerifier(keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, CacheSize: size, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return v, keys
}

// TestVerifiedCacheRechecksExpiry: a cached token is refused once it
// expires (past the leeway), however recently it was verified.
func TestVerifiedCacheRechecksExpiry(t *testing.T) {
	t.Parallel()
	c := newClock()
	key := attackerKey() // any 2048-bit key
	v, _ := cachedVerifier(t, key, c, 0)
	claims := validClaims(c.Now())
	exp := time.Unix(claims["exp"].(int64), 0)
	tok := compact(t, validHeader("k1"), claims, rs256(t, key))
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	if n := v.verified.len(); n != 1 {
		t.Fatalf("%d cached tokens after one verification, want 1", n)
	}
	c.Set(exp.Add(MaxLeeway - time.Second))
	if cl, err := v.Verify(t.Context(), tok); err != nil || cl.ID != "jti-1" {
		t.Fatalf("within the leeway: %+v, %v", cl, err)
	}
	c.Set(exp.Add(MaxLeeway))
	if _, err := v.Verify(t.Context(), tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a cached token past exp + leeway: %v, want ErrInvalidToken", err)
	}
	if n := v.verified.len(); n != 0 {
		t.Fatalf("%d cached tokens after the expiry, want 0", n)
	}
}

// TestVerifiedCacheDroppedWhenKeysChange: when the key a cached token was
// verified with leaves the key set or is replaced (a rotation that
// withdraws it), the token is checked afresh and refused, and the cache is
// dropped.
func TestVerifiedCacheDroppedWhenKeysChange(t *testing.T) {
	t.Parallel()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		change func(*swappableKeys)
	}{
		{"key withdrawn", func(k *swappableKeys) { k.set("k1", nil) }},
		{"key replaced under its kid", func(k *swappableKeys) { k.set("k1", &other.PublicKey) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			key := attackerKey()
			v, keys := cachedVerifier(t, key, c, 0)
			keys.set("k2", &key.PublicKey)
			tok := compact(t, validHeader("k1"), validClaims(c.Now()), rs256(t, key))
			claims2 := validClaims(c.Now())
			claims2["jti"] = "jti-2"
			tok2 := compact(t, validHeader("k2"), claims2, rs256(t, key))
			for _, raw := range []string{tok, tok2, tok} {
				if _, err := v.Verify(t.Context(), raw); err != nil {
					t.Fatal(err)
				}
			}
			if n := v.verified.len(); n != 2 {
				t.Fatalf("%d cached tokens, want 2", n)
			}
			tt.change(keys)
			if _, err := v.Verify(t.Context(), tok); !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("a cached token whose key changed: %v, want ErrInvalidToken", err)
			}
			if n := v.verified.len(); n != 0 {
				t.Fatalf("%d cached tokens after the key set changed, want 0", n)
			}
			if _, err := v.Verify(t.Context(), tok2); err != nil {
				t.Fatalf("a token of an unchanged key: %v", err)
			}
		})
	}
}

// TestVerifiedCacheBounded: however many distinct tokens arrive, the cache
// holds at most its size, and every token still verifies.
func TestVerifiedCacheBounded(t *testing.T) {
	t.Parallel()
	c := newClock()
	key := attackerKey()
	const size = 16
	v, _ := cachedVerifier(t, key, c, size)
	for i := range 5 * size {
		claims := validClaims(c.Now())
		claims["jti"] = fmt.Sprint("jti-", i)
		tok := compact(t, validHeader("k1"), claims, rs256(t, key))
		for range 2 {
			if cl, err := v.Verify(t.Context(), tok); err != nil || cl.ID != claims["jti"] {
				t.Fatalf("token %d: %+v, %v", i, cl, err)
			}
		}
		if n := v.verified.len(); n > size {
			t.Fatalf("%d cached tokens, more than the size %d", n, size)
		}
	}
}

// TestVerifiedCacheReturnsCopies: changing the claims Verify returned does
// not change what the next Verify of the same token returns.
func TestVerifiedCacheReturnsCopies(t *testing.T) {
	t.Parallel()
	c := newClock()
	key := attackerKey()
	v, _ := cachedVerifier(t, key, c, 0)
	claims := validClaims(c.Now())
	claims["groups"] = []string{"finance"}
	tok := compact(t, validHeader("k1"), claims, rs256(t, key))
	for range 3 {
		cl, err := v.Verify(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Subject != claims["sub"] || len(cl.Groups) != 1 || cl.Groups[0] != "finance" || cl.Scopes[0] != ScopeInvoke {
			t.Fatalf("claims = %+v", cl)
		}
		cl.Subject, cl.Groups[0], cl.Scopes[0] = "mallory", "admins", "x"
	}
}

// TestVerifiedCacheDisabled: a negative size caches nothing.
func TestVerifiedCacheDisabled(t *testing.T) {
	t.Parallel()
	c := newClock()
	v, _ := cachedVerifier(t, attackerKey(), c, -1)
	if v.verified != nil {
		t.Fatal("a cache with a negative size")
	}
	tok := compact(t, validHeader("k1"), validClaims(c.Now()), rs256(t, attackerKey()))
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
}

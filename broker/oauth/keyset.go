package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/jwks"
)

// The signature algorithms of client assertions (private_key_jwt): RSA
// PKCS #1 v1.5 with SHA-256 on keys of at least minClientRSABits, and
// ECDSA on P-256 with SHA-256. Symmetric algorithms (HS256, whose key a
// verifier holding only the public key must never take for a secret) and
// "none" are not among them.
var assertionAlgs = []string{"RS256", "ES256"}

// minClientRSABits is the smallest RSA key a client may sign with.
const minClientRSABits = 2048

// maxKeySets bounds the jwks_uri key sets cached.
const maxKeySets = 1000

// clientKey is one verification key of a client's key set.
type clientKey struct {
	kid string
	alg string // RS256 or ES256: what the key's type signs
	key any    // *rsa.PublicKey or *ecdsa.PublicKey
}

// clientKeys is a client's key set: the public signature keys fit for
// assertionAlgs; the others of the set are ignored (RFC 7517 §5).
type clientKeys []clientKey

// find returns the key to verify a signature of alg by the key kid: the
// one of that kid (and of alg's type), or — with no kid — the one key of
// alg's type when there is exactly one. nil when none.
func (ks clientKeys) find(kid, alg string) any {
	var found any
	n := 0
	for _, k := range ks {
		if k.alg != alg || (kid != "" && k.kid != kid) {
			continue
		}
		if kid != "" {
			return k.key
		}
		found = k.key
		n++
	}
	if n == 1 {
		return found
	}
	return nil
}

// errPrivateKey reports a key set holding private keys.
var errPrivateKey = errors.New("the key set holds a private key: give only the public keys")

// parseClientKeys reads a JWKS document (RFC 7517 §5) and keeps its public
// RS256 and ES256 signature keys. A set holding a private key is refused,
// since its owner has published a secret; a set with no usable key too.
func parseClientKeys(doc []byte) (clientKeys, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, errors.New("the key set is not a JSON Web Key Set")
	}
	var ks clientKeys
	for _, raw := range set.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			continue // an unknown type or a malformed key: not ours to use
		}
		if !jwk.IsPublic() {
			return nil, errPrivateKey
		}
		if jwk.Use != "" && jwk.Use != "sig" {
			continue
		}
		var alg string
		switch k := jwk.Key.(type) {
		case *rsa.PublicKey:
			if k.N.BitLen() < minClientRSABits {
				continue
			}
			alg = "RS256"
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() {
				continue
			}
			alg = "ES256"
		default:
			continue
		}
		if jwk.Algorithm != "" && jwk.Algorithm != alg {
			continue
		}
		ks = append(ks, clientKey{kid: jwk.KeyID, alg: alg, key: jwk.Key})
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("the key set has no public RS256 (RSA, %d bits or more) or ES256 (P-256) signature key", minClientRSABits)
	}
	return ks, nil
}

// keySets fetches and caches the key sets of jwks_uri URLs: each is used
// for its Cache-Control lifetime (within the Fetcher's bounds), and a kid
// not in it fetches it again at most once per minimum interval, however
// many assertions ask (internal/jwks).
type keySets struct {
	fetch *clientmeta.Fetcher // nil: no jwks_uri can be fetched
	now   func() time.Time
	log   *slog.Logger

	mu     sync.Mutex
	caches map[string]*jwks.Cache[clientKeys]
}

// cache returns the cache of uri's key set, creating it.
func (k *keySets) cache(uri string) (*jwks.Cache[clientKeys], error) {
	if k.fetch == nil {
		return nil, errors.New("no fetcher of jwks_uri key sets is configured")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.caches[uri]; ok {
		return c, nil
	}
	if len(k.caches) >= maxKeySets {
		for u := range k.caches { // any one: a dropped set is fetched again
			delete(k.caches, u)
			break
		}
	}
	c, err := jwks.NewCache(func(ctx context.Context, _ clientKeys) (clientKeys, time.Duration, error) {
		body, ttl, err := k.fetch.FetchKeySet(ctx, uri)
		if err != nil {
			return nil, 0, err
		}
		ks, err := parseClientKeys(body)
		return ks, ttl, err
	}, &jwks.CacheOptions{MaxAge: clientmeta.DefaultMaxTTL, Now: k.now, Logger: k.log, Name: uri})
	if err != nil {
		return nil, err
	}
	if k.caches == nil {
		k.caches = map[string]*jwks.Cache[clientKeys]{}
	}
	k.caches[uri] = c
	return c, nil
}

// clientKeySource is where a client's keys are: the jwks_uri or jwks
// member of its stored metadata (its configuration, or its metadata
// document).
type clientKeySource struct {
	JWKSURI string          `json:"jwks_uri"`
	JWKS    json.RawMessage `json:"jwks"`
}

// keySource reads a client's key source from its stored metadata.
func keySource(metadata json.RawMessage) (clientKeySource, error) {
	var src clientKeySource
	if len(metadata) == 0 {
		return src, errors.New("the client has no keys (jwks_uri or jwks)")
	}
	if err := json.Unmarshal(metadata, &src); err != nil {
		return src, errors.New("the client's metadata is not a JSON object")
	}
	hasSet := len(src.JWKS) > 0 && string(src.JWKS) != "null"
	switch {
	case src.JWKSURI != "" && hasSet:
		return src, errors.New("the client has both jwks_uri and jwks")
	case src.JWKSURI == "" && !hasSet:
		return src, errors.New("the client has no keys (jwks_uri or jwks)")
	}
	return src, nil
}

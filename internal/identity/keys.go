package identity

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const (
	// minRefetchInterval bounds how often tokens with unknown key ids make
	// the verifier fetch the key set again, so a stream of made-up kids
	// never becomes a stream of requests to the issuer.
	minRefetchInterval = 30 * time.Second
	// keysMaxAge is how long a fetched key set is used before it is
	// fetched again, so that a key the issuer withdrew stops being
	// accepted. If that fetch fails, the older keys stay in use.
	keysMaxAge = time.Hour
	// maxJWKSBytes bounds the key set document.
	maxJWKSBytes = 1 << 20
	// minRSABits is the smallest RSA key accepted.
	minRSABits = 2048
)

// remoteKeys is the issuer's key set, fetched from its jwks_uri on first
// use and cached by kid. It implements oidc.KeySet.
type remoteKeys struct {
	url    string
	client *http.Client
	now    func() time.Time

	fetchMu sync.Mutex // one fetch at a time

	mu          sync.RWMutex
	keys        map[string]*rsa.PublicKey
	loadedAt    time.Time // last successful fetch
	attemptedAt time.Time // last fetch, successful or not
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time) *remoteKeys {
	return &remoteKeys{url: url, client: client, now: now}
}

// VerifySignature verifies an RS256 token with the key named by its kid and
// returns the payload. go-oidc has already pinned the algorithm.
func (k *remoteKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("token must have exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	if kid == "" {
		return nil, errors.New("token has no kid")
	}
	key, err := k.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	return jws.Verify(key)
}

// key returns the key named kid, fetching the key set when kid is unknown
// or the set is old, at most once per minRefetchInterval.
func (k *remoteKeys) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	if key := k.lookup(kid, false); key != nil {
		return key, nil
	}
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	if key := k.lookup(kid, false); key != nil {
		return key, nil // fetched while this caller waited
	}
	var fetchErr error
	if k.mayFetch() {
		fetchErr = k.refresh(ctx)
	}
	if key := k.lookup(kid, true); key != nil {
		return key, nil
	}
	if fetchErr != nil {
		return nil, fmt.Errorf("no key %q: fetching key set: %w", kid, fetchErr)
	}
	return nil, fmt.Errorf("no key %q in the issuer's key set", kid)
}

// lookup returns the cached key named kid; unless stale is allowed, only
// from a key set younger than keysMaxAge.
func (k *remoteKeys) lookup(kid string, stale bool) *rsa.PublicKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if !stale && k.now().Sub(k.loadedAt) >= keysMaxAge {
		return nil
	}
	return k.keys[kid]
}

func (k *remoteKeys) mayFetch() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.attemptedAt.IsZero() || k.now().Sub(k.attemptedAt) >= minRefetchInterval
}

func (k *remoteKeys) refresh(ctx context.Context) error {
	keys, err := k.fetch(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.attemptedAt = k.now()
	if err != nil {
		return err
	}
	k.keys, k.loadedAt = keys, k.attemptedAt
	return nil
}

// fetch reads the key set and keeps the RSA signing keys that can verify
// RS256: keys of other types or uses are skipped, as RFC 7517 asks.
func (k *remoteKeys) fetch(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", k.url, resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJWKSBytes)).Decode(&set); err != nil {
		return nil, fmt.Errorf("GET %s: decoding key set: %w", k.url, err)
	}
	keys := make(map[string]*rsa.PublicKey, len(set.Keys))
	for _, raw := range set.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			continue
		}
		pub, ok := jwk.Key.(*rsa.PublicKey)
		switch {
		case !ok, jwk.KeyID == "", pub.N.BitLen() < minRSABits:
		case jwk.Use != "" && jwk.Use != "sig":
		case jwk.Algorithm != "" && jwk.Algorithm != string(jose.RS256):
		default:
			keys[jwk.KeyID] = pub
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("GET %s: no RS256 signing keys", k.url)
	}
	return keys, nil
}

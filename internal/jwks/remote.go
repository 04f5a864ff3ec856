package jwks

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/httpx"
)

// MaxDocumentBytes bounds the key set document a Remote reads.
const MaxDocumentBytes = 1 << 20

// MinKeyBits is the smallest RSA modulus a Remote keeps.
const MinKeyBits = 2048

// fetchTimeout bounds one fetch of the key set.
const fetchTimeout = 10 * time.Second

// RemoteOptions configures a Remote. The zero value of every field selects
// its default.
type RemoteOptions struct {
	// HTTPClient fetches the key set. Default: a client with a 10 s
	// timeout. Every fetch is also bounded by 10 s.
	HTTPClient *http.Client
	// RefreshInterval is the longest a fetched key set is used before the
	// next lookup fetches it again; a shorter Cache-Control max-age of the
	// response wins. Default 5 min.
	RefreshInterval time.Duration
	// MinRefreshInterval bounds fetches triggered by a kid not in the set:
	// at most one per interval, so a flood of tokens with random kids
	// causes no flood of requests. It is also the shortest a fetched set
	// is used, whatever its Cache-Control. Default 10 s.
	MinRefreshInterval time.Duration
	// InsecureAllowHTTP permits a plain http URL on a host other than
	// loopback. Default false: https is required except on 127.0.0.0/8,
	// ::1 and localhost.
	InsecureAllowHTTP bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives fetch failures that leave an older set in use.
	// Default slog.Default().
	Logger *slog.Logger
}

// Remote is a key set fetched from a JWKS URL. It keeps the RSA signature
// keys of at least 2048 bits that have a kid (and, when they say, use "sig"
// and alg "RS256"), and ignores every other key of the set, as RFC 7517
// §5 asks. A document without any such key is a failed fetch.
type Remote struct {
	url    string
	client *http.Client
	cache  *Cache[map[string]*rsa.PublicKey]
}

// NewRemote returns the key set at jwksURL, fetched on first use.
func NewRemote(jwksURL string, opts *RemoteOptions) (*Remote, error) {
	var o RemoteOptions
	if opts != nil {
		o = *opts
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if err := checkURL(jwksURL, o.InsecureAllowHTTP); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	r := &Remote{url: jwksURL, client: o.HTTPClient}
	c, err := NewCache(r.fetch, &CacheOptions{
		MaxAge: o.RefreshInterval, MinRefreshInterval: o.MinRefreshInterval, LoadTimeout: fetchTimeout,
		Now: o.Now, Logger: o.Logger, Name: jwksURL,
	})
	if err != nil {
		return nil, err
	}
	r.cache = c
	return r, nil
}

// checkURL requires an absolute https URL, or http on loopback (or
// anywhere, when insecure).
func checkURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("key set URL %q must be an absolute http or https URL", raw)
	}
	if u.Scheme == "http" && !insecure && !httpx.IsLoopbackHost(u.Hostname()) {
		return fmt.Errorf("key set URL %q must use https (plain http is allowed on loopback, or with InsecureAllowHTTP)", raw)
	}
	return nil
}

// Key returns the key with the given kid. A kid not in the fetched set
// fetches it again at most once per MinRefreshInterval; if it is still not
// there, the error is ErrUnknownKey. Any other error means the set could
// not be fetched.
func (r *Remote) Key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	set, err := r.cache.Get(ctx)
	if err != nil {
		return nil, err
	}
	if k := set[kid]; k != nil {
		return k, nil
	}
	if set, err = r.cache.Refresh(ctx); err != nil {
		return nil, err
	}
	if k := set[kid]; k != nil {
		return k, nil
	}
	return nil, ErrUnknownKey
}

// fetch reads the key set.
func (r *Remote) fetch(ctx context.Context, _ map[string]*rsa.PublicKey) (map[string]*rsa.PublicKey, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: fetch key set: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: fetch key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("jwks: fetch key set %s: status %s", r.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: fetch key set: %w", err)
	}
	if len(body) > MaxDocumentBytes {
		return nil, 0, fmt.Errorf("jwks: fetch key set %s: over %d bytes", r.url, MaxDocumentBytes)
	}
	keys, err := parseSet(body)
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: fetch key set %s: %w", r.url, err)
	}
	return keys, cacheMaxAge(resp.Header), nil
}

// parseSet returns the RS256 signature keys of a JWKS document by kid; the
// first of keys sharing a kid wins.
func parseSet(body []byte) (map[string]*rsa.PublicKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	keys := make(map[string]*rsa.PublicKey, len(doc.Keys))
	for _, raw := range doc.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			continue
		}
		pub, ok := jwk.Key.(*rsa.PublicKey)
		if !ok || jwk.KeyID == "" || pub.N.BitLen() < MinKeyBits ||
			(jwk.Use != "" && jwk.Use != "sig") || (jwk.Algorithm != "" && jwk.Algorithm != string(jose.RS256)) {
			continue
		}
		if _, dup := keys[jwk.KeyID]; !dup {
			keys[jwk.KeyID] = pub
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no RS256 signature keys")
	}
	return keys, nil
}

// cacheMaxAge returns the Cache-Control max-age of a response, or a tiny
// duration for no-store and no-cache (which the cache raises to its
// minimum), or 0 when the response says neither.
func cacheMaxAge(h http.Header) time.Duration {
	var maxAge time.Duration
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store", "no-cache":
				return time.Nanosecond
			case "max-age":
				if n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64); err == nil && n >= 0 {
					maxAge = time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
					if maxAge == 0 {
						maxAge = time.Nanosecond
					}
				}
			}
		}
	}
	return maxAge
}

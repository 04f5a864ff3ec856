package broker

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// maxJWKSBytes bounds the key set document a RemoteKeySet reads.
const maxJWKSBytes = 1 << 20

// fetchTimeout bounds one key set fetch.
const fetchTimeout = 10 * time.Second

// RemoteKeySetOptions configures a RemoteKeySet. The zero value of every
// field selects its default.
type RemoteKeySetOptions struct {
	// HTTPClient fetches the key set. Default: a client with a 10 s
	// timeout. Every fetch is also bounded by 10 s.
	HTTPClient *http.Client
	// RefreshInterval is how long a fetched key set is used before the next
	// lookup fetches it again. Default 5 min.
	RefreshInterval time.Duration
	// MinRefreshInterval bounds fetches triggered by a kid not in the set:
	// at most one per interval, so a flood of tokens with random kids
	// causes no flood of requests. Default 10 s.
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

// RemoteKeySet is a KeySource that fetches a JWKS over HTTP, for MCP servers
// in another process than the broker. It keeps RSA signature keys of at
// least 2048 bits that have a kid (and, when stated, use "sig" and alg
// "RS256"), and ignores every other key in the set.
type RemoteKeySet struct {
	url    string
	client *http.Client
	keys   keyCache[map[string]*rsa.PublicKey]
}

// NewRemoteKeySet returns a key set fetched from jwksURL, on first use.
func NewRemoteKeySet(jwksURL string, opts *RemoteKeySetOptions) (*RemoteKeySet, error) {
	var o RemoteKeySetOptions
	if opts != nil {
		o = *opts
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 5 * time.Minute
	}
	if o.MinRefreshInterval == 0 {
		o.MinRefreshInterval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}

	var errs []error
	if err := checkJWKSURL(jwksURL, o.InsecureAllowHTTP); err != nil {
		errs = append(errs, err)
	}
	if o.RefreshInterval < 0 || o.MinRefreshInterval < 0 {
		errs = append(errs, errors.New("RefreshInterval and MinRefreshInterval must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("broker: remote key set: %w", err)
	}
	r := &RemoteKeySet{url: jwksURL, client: o.HTTPClient}
	r.keys = keyCache[map[string]*rsa.PublicKey]{
		load:        r.fetch,
		maxAge:      o.RefreshInterval,
		minInterval: o.MinRefreshInterval,
		now:         o.Now,
		kept: func(err error) {
			o.Logger.Warn("broker: fetching the key set failed; using the fetched set", "url", jwksURL, "err", err)
		},
	}
	return r, nil
}

// checkJWKSURL requires https, or http on loopback (or anywhere, when
// insecure).
func checkJWKSURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("key set URL %q must be an absolute http or https URL", raw)
	}
	if u.Scheme == "http" && !insecure && !isLoopback(u.Hostname()) {
		return fmt.Errorf("key set URL %q must use https (plain http is allowed on loopback, or with InsecureAllowHTTP)", raw)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Key returns the key with the given kid. A kid not in the fetched set
// fetches it again at most once per MinRefreshInterval; otherwise the error
// is ErrUnknownKey.
func (r *RemoteKeySet) Key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	set, err := r.keys.get(ctx)
	if err != nil {
		return nil, err
	}
	if k := set[kid]; k != nil {
		return k, nil
	}
	if set, err = r.keys.refresh(ctx); err != nil {
		return nil, err
	}
	if k := set[kid]; k != nil {
		return k, nil
	}
	return nil, ErrUnknownKey
}

// fetch reads the key set. The fetch is shared by every caller waiting for
// it, so it outlives the cancellation of the one that started it.
func (r *RemoteKeySet) fetch(ctx context.Context, _ map[string]*rsa.PublicKey) (map[string]*rsa.PublicKey, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, fmt.Errorf("broker: fetch key set: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("broker: fetch key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("broker: fetch key set: status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("broker: fetch key set: %w", err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("broker: fetch key set: over %d bytes", maxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("broker: fetch key set: %w", err)
	}
	keys := make(map[string]*rsa.PublicKey, len(doc.Keys))
	for _, raw := range doc.Keys {
		// RFC 7517 §5: ignore keys not understood or not usable.
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			continue
		}
		pub, ok := jwk.Key.(*rsa.PublicKey)
		if !ok || jwk.KeyID == "" || pub.N.BitLen() < minKeyBits ||
			(jwk.Use != "" && jwk.Use != "sig") || (jwk.Algorithm != "" && jwk.Algorithm != Algorithm) {
			continue
		}
		if _, dup := keys[jwk.KeyID]; !dup {
			keys[jwk.KeyID] = pub
		}
	}
	return keys, nil
}

package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// Bounds of the retries of a discovery that failed for a reason that may
// pass (see [Options].DiscoveryRetry).
const (
	// DefaultDiscoveryRetry is how long New keeps trying: within the two
	// minutes a replica has to start in the Helm chart.
	DefaultDiscoveryRetry = 90 * time.Second
	// firstDiscoveryBackoff doubles after each failure, up to
	// maxDiscoveryBackoff.
	firstDiscoveryBackoff = time.Second
	maxDiscoveryBackoff   = 15 * time.Second
	// maxDiscoveryDocument bounds the discovery document read.
	maxDiscoveryDocument = 1 << 20
)

// errDiscoveryUnavailable marks a discovery that failed for a reason
// that may pass: the issuer did not answer, or answered 5xx, 408 or 429.
var errDiscoveryUnavailable = errors.New("the issuer is unavailable")

// discoverWithRetry returns discoverKeys's jwks_uri, trying again with
// backoff while the issuer is unavailable, for up to retry; any other
// failure (a 404, a document that names another issuer) is returned at
// once, as it will not pass.
func discoverWithRetry(ctx context.Context, o *Options, multiTenant bool) (string, error) {
	give := time.Now().Add(o.DiscoveryRetry)
	wait := firstDiscoveryBackoff
	for attempt := 1; ; attempt++ {
		jwksURL, err := discoverKeys(ctx, o.Issuer, multiTenant, o.HTTPClient)
		left := time.Until(give)
		if err == nil || !errors.Is(err, errDiscoveryUnavailable) || left <= 0 || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (tried %d times over %s)", err, attempt, o.DiscoveryRetry-max(left, 0))
			}
			return jwksURL, err
		}
		wait = min(wait, left)
		o.Logger.LogAttrs(ctx, slog.LevelWarn, "identity: the issuer's discovery failed; trying again",
			slog.String("issuer", o.Issuer), slog.String("error", err.Error()), slog.Duration("in", wait), slog.Int("attempt", attempt))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("%w (stopped while waiting to try again)", err)
		case <-t.C:
		}
		wait = min(2*wait, maxDiscoveryBackoff)
	}
}

// discoverKeys returns the jwks_uri of the issuer's discovery document after
// checking that the document names the configured issuer. The errors name
// the status, never the body, which may be an HTML page.
func discoverKeys(ctx context.Context, issuer string, multiTenant bool, client *http.Client) (string, error) {
	base := issuer
	if multiTenant {
		// The discovery URL differs from the issuer; the document names
		// the template, compared below.
		base = strings.Replace(issuer, TenantPlaceholder, multiTenantDiscovery, 1)
	}
	u := strings.TrimSuffix(base, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errDiscoveryUnavailable, err)
	}
	defer resp.Body.Close()
	switch s := resp.StatusCode; {
	case s == http.StatusOK:
	case s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		return "", fmt.Errorf("%w: %s answered %s", errDiscoveryUnavailable, u, resp.Status)
	default:
		return "", fmt.Errorf("%s answered %s", u, resp.Status)
	}
	var meta struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDiscoveryDocument)).Decode(&meta); err != nil {
		return "", fmt.Errorf("%s is not a discovery document: %w", u, err)
	}
	if meta.Issuer != issuer {
		return "", fmt.Errorf("discovery document names issuer %q", meta.Issuer)
	}
	if err := httpx.CheckEndpoint(meta.JWKSURI); err != nil {
		return "", fmt.Errorf("jwks_uri %q: %w", meta.JWKSURI, err)
	}
	return meta.JWKSURI, nil
}

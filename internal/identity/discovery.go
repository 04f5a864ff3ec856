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
// pass (see [Discover]).
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

// Discovery is what Usher reads of an issuer's discovery document.
type Discovery struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
}

// Discover reads the discovery document of issuer — of a multi-tenant
// template (containing [TenantPlaceholder]), Entra's common metadata,
// which names the template — and checks that it names issuer and a
// jwks_uri that is https (or http on loopback). While the issuer is
// unavailable — it does not answer, or answers 5xx, 408 or 429 — it tries
// again with backoff from 1 s to 15 s for up to retry (0:
// DefaultDiscoveryRetry; negative: once), logging each failure to logger;
// any other failure (a 404, a document that names another issuer) is
// returned at once, as it will not pass. The errors name the URL and the
// status, never the body, which may be an HTML page.
func Discover(ctx context.Context, issuer string, client *http.Client, retry time.Duration, logger *slog.Logger) (Discovery, error) {
	if retry == 0 {
		retry = DefaultDiscoveryRetry
	}
	give := time.Now().Add(retry)
	wait := firstDiscoveryBackoff
	for attempt := 1; ; attempt++ {
		d, err := discover(ctx, issuer, client)
		left := time.Until(give)
		if err == nil || !errors.Is(err, errDiscoveryUnavailable) || left <= 0 || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (tried %d times over %s)", err, attempt, retry-max(left, 0))
			}
			return d, err
		}
		wait = min(wait, left)
		logger.LogAttrs(ctx, slog.LevelWarn, "the issuer's discovery failed; trying again",
			slog.String("issuer", issuer), slog.String("error", err.Error()), slog.Duration("in", wait), slog.Int("attempt", attempt))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Discovery{}, fmt.Errorf("%w (stopped while waiting to try again)", err)
		case <-t.C:
		}
		wait = min(2*wait, maxDiscoveryBackoff)
	}
}

// discover reads and checks the discovery document once.
func discover(ctx context.Context, issuer string, client *http.Client) (Discovery, error) {
	// The discovery URL of a template differs from its issuer.
	base := strings.Replace(issuer, TenantPlaceholder, multiTenantDiscovery, 1)
	u := strings.TrimSuffix(base, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Discovery{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return Discovery{}, fmt.Errorf("%w: %w", errDiscoveryUnavailable, err)
	}
	defer resp.Body.Close()
	switch s := resp.StatusCode; {
	case s == http.StatusOK:
	case s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		return Discovery{}, fmt.Errorf("%w: %s answered %s", errDiscoveryUnavailable, u, resp.Status)
	default:
		return Discovery{}, fmt.Errorf("%s answered %s", u, resp.Status)
	}
	var d Discovery
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDiscoveryDocument)).Decode(&d); err != nil {
		return Discovery{}, fmt.Errorf("%s is not a discovery document: %w", u, err)
	}
	if d.Issuer != issuer {
		return Discovery{}, fmt.Errorf("discovery document names issuer %q", d.Issuer)
	}
	if err := httpx.CheckEndpoint(d.JWKSURI); err != nil {
		return Discovery{}, fmt.Errorf("jwks_uri %q: %w", d.JWKSURI, err)
	}
	return d, nil
}

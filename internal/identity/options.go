package identity

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// TenantPlaceholder in [Options.Issuer] makes the verifier multi-tenant, the
// way Microsoft Entra ID names the issuer of its common endpoint:
// "https://login.microsoftonline.com/{tenantid}/v2.0".
const TenantPlaceholder = "{tenantid}"

// multiTenantDiscovery replaces [TenantPlaceholder] to find the discovery
// document of a multi-tenant issuer. Entra's common metadata names the
// template itself as its issuer and publishes the keys of every tenant.
const multiTenantDiscovery = "common"

// defaultHTTPTimeout bounds discovery and key set requests when
// [Options.HTTPClient] is nil.
const defaultHTTPTimeout = 10 * time.Second

// Options configure a [Verifier]. The zero value is not valid: Issuer,
// Audiences and RequiredScopes are required.
type Options struct {
	// Issuer is the issuer URL exactly as the tokens' "iss" claim spells it,
	// for example "https://login.microsoftonline.com/<tenant-id>/v2.0".
	// Required. It must be https, or http on a loopback host. (Entra issues
	// tokens with that v2.0 issuer when the API's app registration sets
	// "requestedAccessTokenVersion": 2.)
	//
	// An issuer containing [TenantPlaceholder] accepts tokens from several
	// Entra tenants: discovery uses the "common" metadata, a token's "iss"
	// must equal the template with the token's own "tid" substituted, and
	// Tenants is then required.
	Issuer string

	// Audiences lists the values of which a token's "aud" must contain at
	// least one: for Entra, the API application's client id and its
	// Application ID URI ("api://…"). Required.
	Audiences []string

	// RequiredScopes must each be present in the token's "scp" claim (Entra),
	// or in "scope" when "scp" is absent: the API's delegated scope, which
	// only a token for a signed-in person carries (for Entra, the scope the
	// API's app registration exposes, e.g. "access_as_user"). Required, at
	// least one: without it the API would also accept tokens an
	// application obtained for itself.
	RequiredScopes []string

	// Tenants is the allow-list of tenant ids ("tid"). Default: empty, which
	// accepts any tenant of a single-tenant Issuer. Required when Issuer
	// contains [TenantPlaceholder].
	Tenants []string

	// JWKSURL, when set, is where the issuer's signing keys are fetched and
	// no discovery is done, so [New] makes no request. This serves an
	// issuer that is not listening yet, such as the built-in development
	// issuer of the same process. Default: empty, the "jwks_uri" of the
	// issuer's discovery document. It must be https, or http on a loopback
	// host.
	JWKSURL string

	// DiscoveryRetry is how long New keeps trying the issuer's discovery
	// while the issuer is unavailable — it does not answer, or answers
	// 5xx, 408 or 429 —, with backoff from 1 s to 15 s, so that a replica
	// starting during a blip of the issuer or of DNS waits for it rather
	// than exits; any other failure is returned at once. Default
	// DefaultDiscoveryRetry (90 s); negative: one attempt.
	DiscoveryRetry time.Duration

	// HTTPClient fetches the discovery document and the key set.
	// Default: a client with a 10 s timeout.
	HTTPClient *http.Client

	// Now is the clock for expiry checks and key set refreshes.
	// Default: time.Now.
	Now func() time.Time

	// Logger records why a request was refused; tokens are never logged.
	// Default: slog.Default().
	Logger *slog.Logger
}

// validate reports every problem of o in one error.
func (o *Options) validate() error {
	var errs []error
	if o.Issuer == "" {
		errs = append(errs, errors.New("issuer is required"))
	} else if err := httpx.CheckEndpoint(o.Issuer); err != nil {
		errs = append(errs, fmt.Errorf("issuer: %w", err))
	}
	if n := strings.Count(o.Issuer, TenantPlaceholder); n > 1 {
		errs = append(errs, fmt.Errorf("issuer: %s may appear only once", TenantPlaceholder))
	} else if n == 1 && len(o.Tenants) == 0 {
		errs = append(errs, fmt.Errorf("tenants: a multi-tenant issuer (containing %s) requires a tenant allow-list", TenantPlaceholder))
	}
	if len(o.Audiences) == 0 {
		errs = append(errs, errors.New("audiences: at least one audience is required"))
	}
	for _, a := range o.Audiences {
		if strings.TrimSpace(a) == "" {
			errs = append(errs, errors.New("audiences: empty audience"))
		}
	}
	if len(o.RequiredScopes) == 0 {
		errs = append(errs, errors.New("required scopes: at least one delegated scope is required"))
	}
	for _, s := range o.RequiredScopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			errs = append(errs, fmt.Errorf("required scopes: %q is not a scope", s))
		}
	}
	for _, t := range o.Tenants {
		if strings.TrimSpace(t) == "" {
			errs = append(errs, errors.New("tenants: empty tenant id"))
		}
	}
	if o.JWKSURL != "" {
		if err := httpx.CheckEndpoint(o.JWKSURL); err != nil {
			errs = append(errs, fmt.Errorf("jwks url: %w", err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("identity: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

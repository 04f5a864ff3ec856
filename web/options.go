package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// Defaults and bounds of [Options].
const (
	// DefaultSessionLifetime is how long a sign-in lasts.
	DefaultSessionLifetime = 8 * time.Hour
	// MinSessionLifetime and MaxSessionLifetime bound SessionLifetime.
	MinSessionLifetime = 5 * time.Minute
	MaxSessionLifetime = 7 * 24 * time.Hour
	// MinSecretBytes is the shortest accepted Secret.
	MinSecretBytes = 32
	// DefaultRevocationTTL is how long a replica trusts its last check of
	// a session against the store.
	DefaultRevocationTTL = 5 * time.Second
	// MaxRevocationTTL bounds RevocationTTL.
	MaxRevocationTTL = time.Minute
	// DefaultSweepInterval is how often ended sessions are deleted.
	DefaultSweepInterval = 10 * time.Minute
	// defaultHTTPTimeout bounds discovery, token and key set requests when
	// Options.HTTPClient is nil.
	defaultHTTPTimeout = 10 * time.Second
)

// TokenVerifier verifies an access token exactly as the API does and
// returns its principal; errors match the identity package's sentinels.
// Pass (*identity.Verifier).Verify.
type TokenVerifier func(ctx context.Context, raw string) (identity.Principal, error)

// Endpoints are an issuer's endpoints, given instead of discovering them.
type Endpoints struct {
	// AuthURL is the authorization endpoint, where browsers are sent.
	AuthURL string
	// TokenURL is the token endpoint, which the server calls.
	TokenURL string
	// JWKSURL is the key set that signs ID tokens, which the server reads.
	JWKSURL string
}

// SessionStore keeps the browser sessions; store.Store implements it.
type SessionStore interface {
	CreateBrowserSession(ctx context.Context, s store.BrowserSession) (store.BrowserSession, error)
	GetBrowserSession(ctx context.Context, idHash string) (store.BrowserSession, error)
	RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error
	RevokeBrowserSessions(ctx context.Context, principal string, now time.Time) (int, error)
	DeleteBrowserSessions(ctx context.Context, before time.Time) (int, error)
}

// Options configure [New]. PublicURL, Issuer, ClientID, VerifyAccessToken,
// Secret and Store are required.
type Options struct {
	// PublicURL is the URL people open Usher at (server.public_url). The
	// redirect URI is PublicURL + "/auth/callback". Required: https, or
	// plain http on a loopback host — then the cookies are named without
	// the __Host- prefix and are not Secure, because browsers refuse
	// __Host- cookies without Secure.
	PublicURL string

	// Issuer is the OIDC issuer people sign in with: the API's issuer. An
	// Entra multi-tenant template containing identity.TenantPlaceholder is
	// accepted; an ID token's issuer must then be the template filled with
	// its own tenant. Required.
	Issuer string

	// Endpoints, when set, are used instead of the issuer's discovery
	// document, so New makes no request: for an issuer that is not serving
	// yet, such as the development provider of the same process. Default
	// nil: discovery at Issuer + "/.well-known/openid-configuration".
	Endpoints *Endpoints

	// ClientID is the OIDC client the Sessions UI signs in as: the "aud"
	// of its ID tokens. Required.
	ClientID string

	// ClientSecret authenticates a confidential client at the token
	// endpoint (client_secret_post). Default "": a public client, which
	// PKCE alone protects.
	ClientSecret string

	// Scopes are requested besides "openid" and "profile": the API's scope,
	// so that the access token is one the API accepts (Entra:
	// "api://<app-id-uri>/access_as_user"). Default none.
	Scopes []string

	// VerifyAccessToken verifies the access token of a sign-in. Required:
	// the API's own verifier, so a session is the API's principal.
	VerifyAccessToken TokenVerifier

	// Secret is the key material the cookie keys are derived from (HKDF):
	// at least 32 random bytes, the same on every replica. Required.
	Secret []byte
	// PreviousSecrets are secrets Secret replaced: the cookies they
	// sealed still open, until they expire, so that replacing the secret
	// signs no one out. Nothing is sealed under them.
	PreviousSecrets [][]byte

	// SessionLifetime is how long a sign-in lasts; it is not extended by
	// use. Default DefaultSessionLifetime (8h); between 5m and 168h.
	SessionLifetime time.Duration

	// Store keeps every session, so that signing out ends it on every
	// replica. Required.
	Store SessionStore

	// RevocationTTL is how long a replica trusts its last check of a
	// session against Store: a session signed out on another replica
	// stops working here within it (on the replica that signed it out, at
	// once). Default DefaultRevocationTTL (5s); at most 1m.
	RevocationTTL time.Duration

	// SweepInterval is how often [Sessions.Start]'s sweep deletes ended
	// (expired or signed-out) sessions. Default DefaultSweepInterval
	// (10m).
	SweepInterval time.Duration

	// DiscoveryRetry is how long New keeps trying the issuer's discovery
	// while the issuer is unavailable (see identity.Discover). Default
	// identity.DefaultDiscoveryRetry (90 s); negative: one attempt.
	DiscoveryRetry time.Duration

	// HTTPClient makes discovery, token and key set requests.
	// Default: a client with a 10 s timeout.
	HTTPClient *http.Client

	// Now is the clock. Default time.Now.
	Now func() time.Time

	// Logger records sign-ins and refusals, never codes, tokens or
	// cookies. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of o with every unset field defaulted.
func (o Options) withDefaults() Options {
	o.PublicURL = strings.TrimSuffix(o.PublicURL, "/")
	if o.SessionLifetime == 0 {
		o.SessionLifetime = DefaultSessionLifetime
	}
	if o.RevocationTTL == 0 {
		o.RevocationTTL = DefaultRevocationTTL
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// validate reports every problem of the defaulted options in one error.
func (o *Options) validate() error {
	var errs []error
	if o.PublicURL == "" {
		errs = append(errs, errors.New("public url is required"))
	} else if err := httpx.CheckEndpoint(o.PublicURL); err != nil {
		errs = append(errs, fmt.Errorf("public url: %w", err))
	}
	if o.Issuer == "" {
		errs = append(errs, errors.New("issuer is required"))
	} else if err := httpx.CheckEndpoint(o.Issuer); err != nil {
		errs = append(errs, fmt.Errorf("issuer: %w", err))
	}
	if e := o.Endpoints; e != nil {
		for name, u := range map[string]string{"auth url": e.AuthURL, "token url": e.TokenURL, "jwks url": e.JWKSURL} {
			if err := httpx.CheckEndpoint(u); err != nil {
				errs = append(errs, fmt.Errorf("endpoints: %s: %w", name, err))
			}
		}
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("client id is required"))
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			errs = append(errs, fmt.Errorf("scopes: %q is not a scope", s))
		}
	}
	if o.VerifyAccessToken == nil {
		errs = append(errs, errors.New("an access token verifier is required"))
	}
	for i, p := range o.PreviousSecrets {
		if len(p) < MinSecretBytes {
			errs = append(errs, fmt.Errorf("previous secret %d: at least %d bytes are required", i+1, MinSecretBytes))
		}
	}
	if len(o.Secret) < MinSecretBytes {
		errs = append(errs, fmt.Errorf("secret: at least %d bytes are required", MinSecretBytes))
	}
	if o.SessionLifetime < MinSessionLifetime || o.SessionLifetime > MaxSessionLifetime {
		errs = append(errs, fmt.Errorf("session lifetime: must be between %s and %s", MinSessionLifetime, MaxSessionLifetime))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("a session store is required"))
	}
	if o.RevocationTTL < 0 || o.RevocationTTL > MaxRevocationTTL {
		errs = append(errs, fmt.Errorf("revocation ttl: must be between 0 and %s", MaxRevocationTTL))
	}
	if o.SweepInterval < 0 {
		errs = append(errs, errors.New("sweep interval: must not be negative"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("web: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

// insecureLoopback reports whether publicURL is plain http (on loopback,
// as validated): the one case where cookies cannot be Secure.
func insecureLoopback(publicURL string) bool {
	return strings.HasPrefix(publicURL, "http://")
}

package devoidc

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/httpx"
)

// Defaults of [Options].
const (
	// DefaultAudience is the default "aud" of access tokens.
	DefaultAudience = "usher-api"
	// DefaultScope is the default API scope granted in access tokens.
	DefaultScope = "usher.api"
	// DefaultClientID is the default client id of the Sessions UI.
	DefaultClientID = "usher-web"
	// DefaultTokenLifetime is the default lifetime of issued tokens.
	DefaultTokenLifetime = time.Hour
)

// maxTokenLifetime bounds Options.TokenLifetime.
const maxTokenLifetime = 24 * time.Hour

// KeySource provides the RSA keys the provider signs with and publishes.
type KeySource interface {
	// Signer returns the current signing key and its key id.
	Signer(ctx context.Context) (kid string, key *rsa.PrivateKey, err error)
	// PublicKeys returns every key a token still in use may be signed
	// with. Private parts, if any, are stripped before publication.
	PublicKeys(ctx context.Context) (jose.JSONWebKeySet, error)
}

// Options configure a [Provider]. Issuer, Keys and RedirectURIs are
// required.
type Options struct {
	// Issuer is the provider's issuer URL, the "iss" of its tokens, for
	// example "http://127.0.0.1:8080/dev/oidc". Required: https, or http on
	// a loopback host; no trailing slash, query or fragment. The handler is
	// mounted at its path.
	Issuer string

	// Keys signs the tokens and provides the published key set. Required.
	Keys KeySource

	// Audience is the "aud" of access tokens: the API's audience.
	// Default: DefaultAudience ("usher-api"). It must differ from ClientID,
	// so that an ID token is never accepted as an access token.
	Audience string

	// Scopes are the API scopes, granted in every access token ("scp").
	// Default (nil): [DefaultScope] ("usher.api").
	Scopes []string

	// ClientID is the one client allowed, the Sessions UI (a public client:
	// no secret, PKCE instead). Default: DefaultClientID ("usher-web").
	ClientID string

	// RedirectURIs are the client's allowed redirect URIs, compared
	// exactly (scheme, host, port, path and query): the client is a web
	// application, so no port of a loopback URI is left open. Required, at
	// least one.
	RedirectURIs []string

	// TokenLifetime is the lifetime of access and ID tokens.
	// Default: DefaultTokenLifetime (1 h); at most 24 h.
	TokenLifetime time.Duration

	// Now is the clock. Default: time.Now.
	Now func() time.Time

	// Logger records sign-ins and refused requests, never codes or tokens.
	// Default: slog.Default().
	Logger *slog.Logger
}

var scopeToken = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`) // RFC 6749 scope-token

// withDefaults returns a copy of o with every unset field defaulted.
func (o Options) withDefaults() Options {
	if o.Audience == "" {
		o.Audience = DefaultAudience
	}
	if o.Scopes == nil {
		o.Scopes = []string{DefaultScope}
	}
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = DefaultTokenLifetime
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Scopes = slices.Clone(o.Scopes)
	o.RedirectURIs = slices.Clone(o.RedirectURIs)
	return o
}

// validate reports every problem of the defaulted options in one error.
func (o *Options) validate() error {
	var errs []error
	if o.Issuer == "" {
		errs = append(errs, errors.New("issuer is required"))
	} else if err := checkURL(o.Issuer); err != nil {
		errs = append(errs, fmt.Errorf("issuer: %w", err))
	} else if strings.HasSuffix(o.Issuer, "/") || strings.Contains(o.Issuer, "?") {
		errs = append(errs, errors.New("issuer: must not end with a slash or have a query"))
	}
	if o.Keys == nil {
		errs = append(errs, errors.New("keys are required"))
	}
	if o.Audience == o.ClientID {
		errs = append(errs, errors.New("audience and client id must differ"))
	}
	if len(o.Scopes) == 0 {
		errs = append(errs, errors.New("scopes: at least one API scope is required"))
	}
	for _, s := range o.Scopes {
		if !scopeToken.MatchString(s) || slices.Contains(oidcScopes, s) {
			errs = append(errs, fmt.Errorf("scopes: %q is not an API scope", s))
		}
	}
	if len(o.RedirectURIs) == 0 {
		errs = append(errs, errors.New("redirect uris: at least one is required"))
	}
	for _, u := range o.RedirectURIs {
		if err := checkURL(u); err != nil {
			errs = append(errs, fmt.Errorf("redirect uri %q: %w", u, err))
		}
	}
	if o.TokenLifetime < 0 || o.TokenLifetime > maxTokenLifetime {
		errs = append(errs, fmt.Errorf("token lifetime: must be positive and at most %s", maxTokenLifetime))
	}
	if len(errs) > 0 {
		return fmt.Errorf("devoidc: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

// checkURL accepts an absolute https URL, or http on a loopback host,
// without user info or fragment.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Host == "" || u.Opaque != "":
		return errors.New("must be an absolute URL")
	case u.User != nil || u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("must not have user info or a fragment")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && httpx.IsLoopbackHost(u.Hostname()):
		return nil
	default:
		return errors.New("must be https (http only on a loopback host)")
	}
}

package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/seal"
)

// loginLifetime bounds a sign-in in progress: from /auth/login to the
// callback.
const loginLifetime = 10 * time.Minute

// Errors answered in the API's error shape.
var (
	errUnauthenticated = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in first.")
	errCrossOrigin     = httpx.Errorf(http.StatusForbidden, "cross_origin_refused", "A request from another site may not change anything here.")
)

// Sessions signs people in through the browser and authenticates their
// requests by a sealed session cookie whose session the store still has
// signed in. It is safe for concurrent use; any replica with the same
// secret and store serves any request, and a session signed out on one
// stops working on the others within Options.RevocationTTL.
//
// A nil *Sessions is browser sign-in switched off: [Sessions.Authenticate]
// accepts bearer tokens only, /auth/session answers signed out and
// /auth/login explains that sign-in is not configured.
type Sessions struct {
	o           Options
	oauth       oauth2.Config
	idVerifier  *oidc.IDTokenVerifier
	multiTenant bool
	cookies     cookies
	session     *seal.Sealer
	login       *seal.Sealer
	csrf        *http.CrossOriginProtection
	log         *slog.Logger
	checks      *checks

	startOnce, stopOnce sync.Once
	cancel              context.CancelFunc
	done                chan struct{}
}

// New returns the browser sign-in for opts. Unless opts.Endpoints is set it
// fetches the issuer's discovery document, so ctx bounds that request.
func New(ctx context.Context, opts *Options) (*Sessions, error) {
	if opts == nil {
		opts = &Options{}
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.Scopes = slices.Clone(o.Scopes)
	o.Secret = slices.Clone(o.Secret)
	multiTenant := strings.Contains(o.Issuer, identity.TenantPlaceholder)

	// The key set outlives ctx: go-oidc ignores its cancellation and keeps
	// only the HTTP client.
	clientCtx := oidc.ClientContext(ctx, o.HTTPClient)
	var provider *oidc.Provider
	if e := o.Endpoints; e != nil {
		provider = (&oidc.ProviderConfig{
			IssuerURL: o.Issuer, AuthURL: e.AuthURL, TokenURL: e.TokenURL, JWKSURL: e.JWKSURL,
			Algorithms: []string{oidc.RS256},
		}).NewProvider(clientCtx)
	} else {
		// Entra's common metadata names a multi-tenant template as its
		// issuer; an issuer away for a moment is waited for.
		d, err := identity.Discover(ctx, o.Issuer, o.HTTPClient, o.DiscoveryRetry, o.Logger)
		if err == nil && (d.AuthorizationEndpoint == "" || d.TokenEndpoint == "") {
			err = errors.New("the discovery document names no authorization_endpoint or token_endpoint")
		}
		if err != nil {
			return nil, fmt.Errorf("web: discovery for %s: %w", o.Issuer, err)
		}
		provider = (&oidc.ProviderConfig{
			IssuerURL: o.Issuer, AuthURL: d.AuthorizationEndpoint, TokenURL: d.TokenEndpoint, JWKSURL: d.JWKSURI,
			Algorithms: []string{oidc.RS256},
		}).NewProvider(clientCtx)
	}

	session, err := newSealer(o.Secret, o.PreviousSecrets, "usher web session")
	if err != nil {
		return nil, err
	}
	login, err := newSealer(o.Secret, o.PreviousSecrets, "usher web sign-in")
	if err != nil {
		return nil, err
	}
	csrf := http.NewCrossOriginProtection()
	// The public origin is ours even when a proxy rewrites Host.
	if err := csrf.AddTrustedOrigin(httpx.Origin(o.PublicURL)); err != nil {
		return nil, fmt.Errorf("web: public url as an origin: %w", err)
	}
	return &Sessions{
		o: o,
		oauth: oauth2.Config{
			ClientID:     o.ClientID,
			ClientSecret: o.ClientSecret,
			// Parameters in the body: a public client has no secret to put in
			// a Basic header, and client_secret_post serves a confidential one.
			Endpoint:    oauth2.Endpoint{AuthURL: provider.Endpoint().AuthURL, TokenURL: provider.Endpoint().TokenURL, AuthStyle: oauth2.AuthStyleInParams},
			RedirectURL: o.PublicURL + "/auth/callback",
			Scopes:      append([]string{oidc.ScopeOpenID, "profile"}, o.Scopes...),
		},
		idVerifier: provider.Verifier(&oidc.Config{
			ClientID:             o.ClientID,
			SupportedSigningAlgs: []string{oidc.RS256},
			SkipIssuerCheck:      multiTenant, // compared with the tenant's issuer in callback
			Now:                  o.Now,
		}),
		multiTenant: multiTenant,
		cookies:     newCookies(o.PublicURL),
		session:     session,
		login:       login,
		csrf:        csrf,
		log:         o.Logger,
		checks:      &checks{ttl: o.RevocationTTL, entries: map[string]check{}},
	}, nil
}

// session is what the session cookie holds: the session's id, the
// principal the API's verifier returned at sign-in, and when that was.
type session struct {
	ID       string   `json:"sid"` // 256 random bits: the key of its row (hashed); never logged
	Issuer   string   `json:"iss"`
	Tenant   string   `json:"tid,omitempty"`
	ObjectID string   `json:"oid,omitempty"`
	Subject  string   `json:"sub,omitempty"`
	Name     string   `json:"name,omitempty"`
	Email    string   `json:"email,omitempty"`
	Scopes   []string `json:"scp,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	SignedIn int64    `json:"iat"`
	Expires  int64    `json:"exp"`
}

func newSession(p identity.Principal, now, expires time.Time) session {
	return session{
		ID: newSessionID(), Issuer: p.Issuer, Tenant: p.Tenant, ObjectID: p.ObjectID, Subject: p.Subject,
		Name: p.Name, Email: p.Email, Scopes: p.Scopes, Groups: p.Groups, Roles: p.Roles,
		SignedIn: now.Unix(), Expires: expires.Unix(),
	}
}

func (s session) principal() identity.Principal {
	return identity.Principal{
		Issuer: s.Issuer, Tenant: s.Tenant, ObjectID: s.ObjectID, Subject: s.Subject,
		Name: s.Name, Email: s.Email, Scopes: s.Scopes, Groups: s.Groups, Roles: s.Roles,
	}
}

// signedIn returns the session of r's cookie when its seal opens and the
// store has it signed in; an error is a store that did not answer.
func (s *Sessions) signedIn(r *http.Request) (session, bool, error) {
	sess, ok := s.current(r)
	if !ok {
		return session{}, false, nil
	}
	active, err := s.active(r.Context(), sess)
	if err != nil || !active {
		return session{}, false, err
	}
	return sess, true, nil
}

// SignedIn reports the person signed in to the browser that sent r: the
// principal of its session cookie, when the seal opens and the store still
// has the session signed in, and the session: an identifier of this
// sign-in, the same on every request of it (and every replica) and
// different for every other sign-in, the same person's in another browser
// or after signing in again included. It is not secret — a hash of the
// session's id, which gives away neither the id nor the key of the
// session's row — so another handler may bind what it shows this browser
// to it (the OAuth consent form's CSRF token), or log it.
//
// It only reads: it writes no cookie (a stale one is left for the Sessions
// UI to delete) and checks no origin, so that another handler — the OAuth
// authorization endpoint, reached by a top-level navigation from an MCP
// client's page — can ask who is there and answer in its own shape. An
// error is a store that did not answer. A nil *Sessions (browser sign-in
// off) has nobody signed in.
func (s *Sessions) SignedIn(r *http.Request) (p identity.Principal, session string, ok bool, err error) {
	if s == nil {
		return identity.Principal{}, "", false, nil
	}
	sess, ok, err := s.signedIn(r)
	if err != nil || !ok {
		return identity.Principal{}, "", false, err
	}
	return sess.principal(), sess.handle(), true, nil
}

// LoginURL is where to send a browser to sign in and come back to
// returnTo, a path on this site such as "/oauth/authorize/continue?r=…":
// /auth/login on the public URL, which accepts only a local path of at
// most MaxReturnPath bytes outside /auth/ and returns anywhere else to "/".
// refusedTo, when not "", is where the browser goes instead of the
// refusal page when the identity provider refuses the account
// (access_denied) or the API's verifier does (identity.ErrForbidden: a
// tenant not on the allow-list): a path like returnTo, ignored unless it
// is one. With browser sign-in off (a nil *Sessions) the page it leads to
// says so.
func (s *Sessions) LoginURL(returnTo, refusedTo string) string {
	base := ""
	if s != nil {
		base = s.o.PublicURL
	}
	q := url.Values{"return": {returnTo}}
	if refusedTo != "" {
		q.Set("refused", refusedTo)
	}
	return base + "/auth/login?" + q.Encode()
}

// current returns the session of r's cookie, if it carries one that opens
// (whether the store still has it signed in is [Sessions.signedIn]'s
// question).
func (s *Sessions) current(r *http.Request) (session, bool) {
	raw := s.cookies.get(r, sessionCookie)
	if raw == "" {
		return session{}, false
	}
	var sess session
	if err := s.session.Open(raw, s.o.Now(), &sess); err != nil || sess.Issuer == "" {
		return session{}, false
	}
	return sess, true
}

// Authenticate authenticates every request to next:
//
//   - a request with an Authorization header goes through bearer (the API's
//     bearer-token middleware), whatever cookies it carries;
//   - one with a valid session cookie — its seal opens, and the store has
//     its session signed in — gets the session's principal in its
//     context (see identity.FromContext) — and, for a state-changing
//     method, only when it is not a cross-origin browser request
//     (http.CrossOriginProtection; 403 cross_origin_refused otherwise);
//   - anything else is answered 401 unauthenticated in the API's error
//     shape, and a session cookie that did not open, or whose session was
//     signed out or expired, is deleted; when the store cannot be asked,
//     503 session_check_failed, and the cookie is kept.
func (s *Sessions) Authenticate(next http.Handler, bearer func(http.Handler) http.Handler) http.Handler {
	viaBearer := bearer(next)
	if s == nil {
		return viaBearer
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values("Authorization")) > 0 {
			viaBearer.ServeHTTP(w, r)
			return
		}
		if !s.cookies.has(r, sessionCookie) {
			unauthenticated(w, r)
			return
		}
		sess, ok := s.cookieSession(w, r)
		if !ok {
			return
		}
		next.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), sess.principal())))
	})
}

// cookieSession checks a request by its session cookie: a state-changing
// one must not come from another origin, and the session must still be
// signed in. When either fails it answers the request itself (403
// cross_origin_refused; 503 session_check_failed; or 401, deleting a
// cookie whose session ended) and reports false.
func (s *Sessions) cookieSession(w http.ResponseWriter, r *http.Request) (session, bool) {
	if err := s.checkOrigin(r); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: cross-origin request refused",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("origin", r.Header.Get("Origin")), slog.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")))
		httpx.WriteError(w, r, nil, errCrossOrigin)
		return session{}, false
	}
	sess, ok, err := s.signedIn(r)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "web: checking a session failed", slog.String("error", err.Error()))
		httpx.WriteError(w, r, nil, errSessionStore)
		return session{}, false
	}
	if !ok {
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: session cookie refused",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
		s.cookies.clear(w, r, sessionCookie)
		unauthenticated(w, r)
		return session{}, false
	}
	return sess, true
}

func unauthenticated(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	httpx.WriteError(w, r, nil, errUnauthenticated)
}

// checkOrigin refuses a state-changing request from a browser page of
// another origin. http.CrossOriginProtection decides by Sec-Fetch-Site and,
// for a browser that sends none, compares Origin with Host, which ignores
// the scheme; an Origin, when sent, must also be exactly the public URL's
// (scheme, host and port), so the plain-http twin of an https Usher does
// not pass.
func (s *Sessions) checkOrigin(r *http.Request) error {
	if err := s.csrf.Check(r); err != nil {
		return err
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if !httpx.SameOrigin(r, s.o.PublicURL) {
		return errCrossOrigin
	}
	return nil
}

package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/httpx"
)

// scope is the one scope the endpoint requires and advertises.
const scope = broker.ScopeInvoke

// TokenVerifier checks a broker token for this endpoint's audience;
// *broker.Verifier implements it. It returns an error wrapping
// broker.ErrInvalidToken for a token that is not acceptable,
// broker.ErrInsufficientScope for one without the scope, and any other error
// when the token could not be checked.
type TokenVerifier interface {
	Verify(ctx context.Context, raw string) (*broker.Claims, error)
}

// Caller is who makes a request, from its verified broker token. It is what
// tool handlers and upstream credential hooks learn about the caller: the
// token itself goes no further than the authenticator.
type Caller struct {
	// Subject is the principal the token speaks for ("sub"): the owner of
	// runs, notes and approvals.
	Subject string
	// ClientID is the OAuth client that holds the token ("client_id").
	ClientID string
	// TokenID is the token's "jti", for audit.
	TokenID string
	// RunID is the run the token was minted for ("run_id"); empty outside a
	// run.
	RunID string
	// Actor is who acts for the subject ("act"."sub"); empty when the
	// token names none.
	Actor string
	// Tenant is the subject's tenant ("tid"); empty when the token names
	// none.
	Tenant string
	// Groups are the subject's groups ("groups"), as the broker took them
	// from the subject's verified identity; nil for none.
	Groups []string
}

type callerKey struct{}

// withCaller returns a copy of ctx carrying c.
func withCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// TokenSource mints broker tokens for the upstreams that take one
// (CatalogOptions.UpstreamTokens); broker.TokenCache implements it.
type TokenSource interface {
	Token(ctx context.Context, subject, audience string) (string, error)
}

// CatalogSubject is the subject of the broker tokens an upstream gets when
// the catalog lists its tools for itself, on no caller's behalf.
const CatalogSubject = "usher"

// CallerFromContext returns the caller carried by ctx: in a tool handler,
// the caller of the tool.
func CallerFromContext(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Refusals of the authenticator before a token is verified.
var (
	errNoToken      = errors.New("no bearer token")
	errTokenInQuery = errors.New("access_token in the query string")
	errManyTokens   = fmt.Errorf("%w: more than one Authorization header", broker.ErrInvalidToken)
)

// authenticate returns the caller of r. The token is taken only from the one
// Authorization header; a token in the query string is refused even next to
// a valid header, since URLs end up in logs. Everything else (signature,
// issuer, audience, lifetime, type, scope) is the verifier's.
func (s *Server) authenticate(r *http.Request) (Caller, error) {
	if r.URL.Query().Has("access_token") {
		return Caller{}, errTokenInQuery
	}
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0:
		return Caller{}, errNoToken
	case len(values) > 1:
		return Caller{}, errManyTokens
	}
	scheme, raw, _ := strings.Cut(values[0], " ")
	raw = strings.TrimSpace(raw)
	if !strings.EqualFold(scheme, "Bearer") || raw == "" {
		return Caller{}, errNoToken
	}
	claims, err := s.opts.Verifier.Verify(r.Context(), raw)
	if err != nil {
		return Caller{}, err
	}
	return Caller{
		Subject:  claims.Subject,
		ClientID: claims.ClientID,
		TokenID:  claims.ID,
		RunID:    claims.RunID,
		Actor:    claims.Actor,
		Tenant:   claims.Tenant,
		Groups:   claims.Groups,
	}, nil
}

// refuse answers a request that failed authentication, per RFC 6750 and the
// MCP authorization spec: the challenge names the resource metadata and the
// scope. A request without any token gets the challenge without an error
// code (RFC 6750 §3.1). The reason is logged; the body is generic.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelInfo
	challenge := fmt.Sprintf(`Bearer resource_metadata=%q, scope=%q`, s.metadataURL, scope)
	var e *httpx.Error
	switch {
	case errors.Is(err, errTokenInQuery):
		challenge += `, error="invalid_request"`
		e = httpx.Errorf(http.StatusBadRequest, "invalid_request", "Send the access token in the Authorization header, never in the URL.")
	case errors.Is(err, errNoToken):
		e = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "An access token is required.")
	case errors.Is(err, broker.ErrInsufficientScope):
		challenge += `, error="insufficient_scope"`
		e = httpx.Errorf(http.StatusForbidden, "insufficient_scope", "The access token lacks the required scope.")
	case errors.Is(err, broker.ErrInvalidToken):
		challenge += `, error="invalid_token"`
		e = httpx.Errorf(http.StatusUnauthorized, "invalid_token", "The access token is invalid or expired.")
	default:
		// The token could not be checked (the key set is unavailable):
		// not the client's fault, and no challenge would help.
		level, challenge = slog.LevelError, ""
		e = httpx.Errorf(http.StatusServiceUnavailable, "unavailable", "The access token cannot be checked right now. Try again later.")
	}
	s.log.LogAttrs(r.Context(), level, "mcpserver: request refused",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("reason", err.Error()))
	if !errors.Is(err, errNoToken) {
		// A presented token that fails is worth an audit record; a missing
		// one is the first step of every OAuth discovery and is not.
		s.auditAuthFailure(r.Context(), e.Code)
	}
	if challenge != "" {
		w.Header().Set("WWW-Authenticate", challenge)
	}
	httpx.WriteError(w, r, s.log, e)
}

// tokenInfoKey names the TokenInfo entry that carries the Caller.
const tokenInfoKey = "usher/caller"

// requireCaller authenticates every request and hands next a request that
// carries the caller, both in its context and as the SDK's auth.TokenInfo
// (the one way to reach the SDK's per-message RequestExtra, which stays
// correct in stateful mode, where one SDK session spans many requests), and
// whose Authorization header is gone, so the SDK never holds the token.
//
// The SDK's auth.RequireBearerToken is only used as the setter of TokenInfo,
// behind our own check: its verifier returns the caller already verified and
// cannot fail for a request that got this far, so its error text, which it
// writes to the client, is never produced.
func (s *Server) requireCaller(next http.Handler) http.Handler {
	strip := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.WithContext(r.Context())
		r2.Header = r.Header.Clone()
		r2.Header.Del("Authorization")
		next.ServeHTTP(w, r2)
	})
	setTokenInfo := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		c, ok := CallerFromContext(ctx)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			Scopes: []string{scope},
			// The verifier has checked the expiry, on our clock;
			// this only satisfies the SDK's own check, on its.
			Expiration: time.Now().Add(broker.MaxTokenLifetime),
			UserID:     c.Subject,
			Extra:      map[string]any{tokenInfoKey: c},
		}, nil
	}, &auth.RequireBearerTokenOptions{Scopes: []string{scope}})(strip)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.authenticate(r)
		if err != nil {
			s.refuse(w, r, err)
			return
		}
		s.flushAuthFailures(r.Context())
		setTokenInfo.ServeHTTP(w, r.WithContext(withCaller(r.Context(), c)))
	})
}

// callerOf returns the caller of an MCP request: the one requireCaller
// attached to its HTTP request.
func callerOf(extra *auth.TokenInfo) (Caller, bool) {
	if extra == nil {
		return Caller{}, false
	}
	c, ok := extra.Extra[tokenInfoKey].(Caller)
	return c, ok && c.Subject != ""
}

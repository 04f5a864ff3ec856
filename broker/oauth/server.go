package oauth

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/store"
)

// PathAuthorizeContinue is where a user comes back to after signing in in
// the middle of an authorization request: its id parameter names the
// pending request, which waits in a cookie of the browser (see
// [ServerOptions].LoginURL). With ParamSignIn=SignInRefused as well, the
// sign-in was refused, and the request is refused to its client.
const PathAuthorizeContinue = PathAuthorize + "/continue"

// ParamSignIn and SignInRefused mark a return to PathAuthorizeContinue
// after a refused sign-in.
const (
	ParamSignIn   = "signin"
	SignInRefused = "refused"
)

// Defaults and bounds of [ServerOptions].
const (
	DefaultRegistrationsPerHour = 20
	DefaultCodeLifetime         = 60 * time.Second
	MaxCodeLifetime             = 60 * time.Second
	DefaultRefreshIdle          = 14 * 24 * time.Hour
	DefaultRefreshAbsolute      = 90 * 24 * time.Hour
	// MaxRefreshReuseInterval bounds ServerOptions.RefreshReuseInterval:
	// a client repeats a refresh within seconds, and an access token
	// lasts at most broker.MaxTokenLifetime.
	MaxRefreshReuseInterval = 5 * time.Minute
	// MinSecretLen is the shortest ServerOptions.Secret accepted.
	MinSecretLen = 32
)

// pendingLifetime is how long a pending authorization request — across a
// sign-in, or on the consent page — stays valid.
const pendingLifetime = 10 * time.Minute

// Server is Usher's OAuth 2.1 authorization server for its MCP endpoint:
// the authorization, token, registration and revocation endpoints, and
// the metadata, over the store's clients, codes, refresh tokens and
// consents. It is safe for concurrent use, and any number of replicas
// sharing the store and the secret may serve one issuer.
type Server struct {
	issuer       string
	resources    []string
	st           Store
	broker       *broker.Broker
	clients      *clientmeta.Fetcher
	audit        *audit.Log
	signedIn     func(r *http.Request) (p identity.Principal, session string, ok bool, err error)
	loginURL     func(returnTo, refusedTo string) string
	admits       func(principal string) error
	registration bool
	perHour      int
	clientAddr   func(r *http.Request) string
	codeLife     time.Duration
	refreshIdle  time.Duration
	refreshAbs   time.Duration
	reuse        time.Duration
	now          func() time.Time
	log          *slog.Logger
	metadata     *Metadata
	// The token exchange (exchange.go): off when exchangers is empty.
	verifySubject SubjectTokenVerifier
	exchangers    []string

	// configuredClients are ServerOptions.ConfiguredClients as stored,
	// configured their ids; keys caches the jwks_uri key sets.
	configuredClients []store.OAuthClient
	configured        map[string]bool
	keys              *keySets

	pending *seal.Sealer // pending authorization requests
	// csrfKeys are the HMAC keys of the consent form's CSRF tokens: the
	// Secret's, which makes them, then the PreviousSecrets', which are
	// accepted too.
	csrfKeys [][]byte
	codeKey  []byte // HMAC key of the codes of answered consent forms
	// successorKey derives a rotated refresh token's successor
	// (refreshSuccessor); previousSuccessorKeys are those of the
	// PreviousSecrets, for a repeat of a rotation made before the
	// Secret was replaced.
	successorKey          []byte
	previousSuccessorKeys [][]byte
}

// ServerOptions configures a Server. Issuer, Resources, Store, Broker,
// Audit, SignedIn, LoginURL, Admits and Secret are required; the zero value of
// every other field selects its default.
type ServerOptions struct {
	// Issuer is Usher's public URL: the metadata's issuer, the iss of the
	// authorization responses (RFC 9207). As NewMetadata requires.
	Issuer string
	// Resources are the MCP resources tokens may be issued for:
	// <public_url>/mcp. At least one.
	Resources []string
	// Store keeps the clients, consents, codes and refresh tokens.
	Store Store
	// Broker mints the access tokens (broker tokens).
	Broker *broker.Broker
	// Clients resolves https client_ids (Client ID Metadata Documents);
	// nil turns them off, and such a client_id is unknown.
	Clients *clientmeta.Fetcher
	// Audit records what the server does.
	Audit *audit.Log
	// SignedIn reports the person signed in to this browser and the
	// browser's session — an identifier of that sign-in, not secret, the
	// same on every request of it and different for any other, which the
	// consent form's CSRF token is bound to; a signed-in person without one
	// is refused —, and LoginURL where to send one who is not, to come back
	// to returnTo (a local path, PathAuthorizeContinue with its query), or
	// to refusedTo (the same with ParamSignIn=SignInRefused) when the
	// identity provider or the allow-list refuses the account, so that the
	// client is told access_denied rather than left waiting.
	SignedIn func(r *http.Request) (p identity.Principal, session string, ok bool, err error)
	LoginURL func(returnTo, refusedTo string) string
	// Admits reports whether the person a grant speaks for, by principal
	// id, is still let in by the API's identity configuration — its
	// issuer and tenant allow-list: identity.Verifier.Admits —, asked
	// at every code and refresh token redeemed, so that a tenant taken
	// off the allow-list gets no more access tokens, as the API refuses
	// its tokens. A refusal is invalid_grant, recorded auth_failed.
	Admits func(principal string) error
	// PreviousSecrets are secrets Secret replaced: a pending
	// authorization request they sealed still opens, a consent form whose
	// CSRF token one of them keyed is answered, and a refresh repeated
	// (RefreshReuseInterval) after a rotation made under one of them is
	// answered with the token that rotation issued.
	PreviousSecrets [][]byte
	// Secret seals the pending authorization requests and keys the CSRF
	// tokens: at least MinSecretLen bytes, shared by the replicas.
	Secret []byte
	// Registration turns Dynamic Client Registration on.
	Registration bool
	// RegistrationsPerHour bounds the registrations per remote address,
	// across replicas. Default DefaultRegistrationsPerHour.
	RegistrationsPerHour int
	// ClientAddr is the address of the client that sent r, which the
	// registrations are counted and recorded by. Default: the host of
	// r.RemoteAddr, which behind a reverse proxy is the proxy's
	// (httpx.TrustedProxies reads the proxies' forwarding header).
	ClientAddr func(r *http.Request) string
	// CodeLifetime is an authorization code's. Default and maximum 60 s.
	CodeLifetime time.Duration
	// RefreshIdle is how long a refresh token lives unused, RefreshAbsolute
	// how long its family lives at most. Defaults 14 and 90 days.
	RefreshIdle, RefreshAbsolute time.Duration
	// RefreshReuseInterval is how long after a refresh token's rotation
	// its client may present it again and be answered with the same
	// next refresh token (and a new access token), as long as that one
	// is unused: two refreshes of one client at once, or a retry whose
	// answer was lost, rather than a copy in someone else's hands, whose
	// use revokes the family. The next token is derived from the rotated
	// one and a salt (refreshSuccessor), so that it can be answered again
	// without being stored. Zero, the default, allows none; at most
	// MaxRefreshReuseInterval.
	RefreshReuseInterval time.Duration
	// ConfiguredClients are the clients of Usher's configuration, which
	// PutConfiguredClients writes to the store; a configured client in the
	// store but not here is refused.
	ConfiguredClients []ConfiguredClient
	// KeySets fetches the jwks_uri key sets of clients that authenticate
	// with private_key_jwt. Default Clients; with neither, such a client
	// cannot authenticate (one with inline jwks can).
	KeySets *clientmeta.Fetcher
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the errors the clients are not told. Default
	// slog.Default().
	Logger *slog.Logger
	// VerifySubjectToken checks the subject token of a token exchange
	// (RFC 8693): it is the API's own verifier (identity.Verifier.Verify),
	// so that a token is exchanged only if the API would accept it. Nil
	// turns the exchange off.
	VerifySubjectToken SubjectTokenVerifier
	// ExchangeClients are the client_ids that may exchange a token, each
	// a confidential client (one that authenticates with a secret or a
	// key). None, the default, turns the exchange off; naming some
	// requires VerifySubjectToken.
	ExchangeClients []string
}

// NewServer checks opts and returns the server.
func NewServer(opts *ServerOptions) (*Server, error) {
	if opts == nil {
		return nil, errors.New("oauth: NewServer needs options")
	}
	o := *opts
	if o.RegistrationsPerHour == 0 {
		o.RegistrationsPerHour = DefaultRegistrationsPerHour
	}
	if o.ClientAddr == nil {
		o.ClientAddr = (*httpx.TrustedProxies)(nil).ClientAddr
	}
	if o.CodeLifetime == 0 {
		o.CodeLifetime = DefaultCodeLifetime
	}
	if o.RefreshIdle == 0 {
		o.RefreshIdle = DefaultRefreshIdle
	}
	if o.RefreshAbsolute == 0 {
		o.RefreshAbsolute = DefaultRefreshAbsolute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m, err := NewMetadata(o.Issuer)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(o.Resources) == 0 {
		errs = append(errs, errors.New("at least one resource is required"))
	}
	for _, r := range o.Resources {
		if _, err := CheckResource([]string{r}); err != nil {
			errs = append(errs, fmt.Errorf("resource %q is not an absolute URI without fragment", r))
		}
	}
	for name, missing := range map[string]bool{
		"Store": o.Store == nil, "Broker": o.Broker == nil, "Audit": o.Audit == nil,
		"SignedIn": o.SignedIn == nil, "LoginURL": o.LoginURL == nil, "Admits": o.Admits == nil,
	} {
		if missing {
			errs = append(errs, errors.New(name+" is required"))
		}
	}
	if len(o.Secret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("the Secret must have at least %d bytes", MinSecretLen))
	}
	for i, p := range o.PreviousSecrets {
		if len(p) < MinSecretLen {
			errs = append(errs, fmt.Errorf("previous secret %d must have at least %d bytes", i+1, MinSecretLen))
		}
	}
	if o.RegistrationsPerHour < 0 {
		errs = append(errs, errors.New("RegistrationsPerHour must not be negative"))
	}
	if o.CodeLifetime < time.Second || o.CodeLifetime > MaxCodeLifetime {
		errs = append(errs, fmt.Errorf("CodeLifetime must be between 1s and %s", MaxCodeLifetime))
	}
	if o.RefreshIdle < time.Minute || o.RefreshAbsolute < o.RefreshIdle {
		errs = append(errs, errors.New("RefreshIdle must be at least 1m and RefreshAbsolute at least RefreshIdle"))
	}
	if o.RefreshReuseInterval < 0 || o.RefreshReuseInterval > MaxRefreshReuseInterval {
		errs = append(errs, fmt.Errorf("RefreshReuseInterval must be between 0 and %s", MaxRefreshReuseInterval))
	}
	configured, err := checkConfiguredClients(o.ConfiguredClients)
	if err != nil {
		errs = append(errs, err)
	}
	if len(o.ExchangeClients) > 0 && o.VerifySubjectToken == nil {
		errs = append(errs, errors.New("ExchangeClients need VerifySubjectToken"))
	}
	if slices.Contains(o.ExchangeClients, "") {
		errs = append(errs, errors.New("ExchangeClients must not hold an empty client_id"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("oauth: server options: %w", err)
	}
	if !o.Registration {
		m.RegistrationEndpoint = ""
	}
	m.ClientIDMetadataDocumentSupported = o.Clients != nil
	// Announce what the endpoints do, no more: the token exchange only when
	// some client may exchange.
	m.GrantTypesSupported = []string{GrantAuthorizationCode, GrantRefreshToken}
	if len(o.ExchangeClients) > 0 {
		m.GrantTypesSupported = append(m.GrantTypesSupported, GrantTokenExchange)
	}
	m.TokenEndpointAuthMethodsSupported = []string{AuthNone, AuthClientSecretBasic, AuthPrivateKeyJWT}
	m.RevocationEndpointAuthMethodsSupported = []string{AuthNone, AuthClientSecretBasic, AuthPrivateKeyJWT}
	m.TokenEndpointAuthSigningAlgs, m.RevocationEndpointAuthSigningAlgs = slices.Clone(assertionAlgs), slices.Clone(assertionAlgs)
	keySetFetcher := o.KeySets
	if keySetFetcher == nil {
		keySetFetcher = o.Clients
	}
	s := &Server{
		issuer: o.Issuer, resources: slices.Clone(o.Resources), st: o.Store, broker: o.Broker,
		clients: o.Clients, audit: o.Audit, signedIn: o.SignedIn, loginURL: o.LoginURL, admits: o.Admits,
		registration: o.Registration, perHour: o.RegistrationsPerHour, clientAddr: o.ClientAddr, codeLife: o.CodeLifetime,
		refreshIdle: o.RefreshIdle, refreshAbs: o.RefreshAbsolute, reuse: o.RefreshReuseInterval, now: o.Now, log: o.Logger, metadata: m,
		verifySubject: o.VerifySubjectToken, exchangers: slices.Clone(o.ExchangeClients),
		configuredClients: configured, configured: map[string]bool{},
		keys: &keySets{fetch: keySetFetcher, now: o.Now, log: o.Logger},
	}
	for _, c := range configured {
		s.configured[c.ID] = true
	}
	if s.pending, err = seal.NewRotated(o.Secret, o.PreviousSecrets, hkdfSalt, "usher/oauth/pending", maxSealedChars); err != nil {
		return nil, err
	}
	for _, secret := range append([][]byte{o.Secret}, o.PreviousSecrets...) {
		k, err := hkdf.Key(sha256.New, secret, []byte(hkdfSalt), "usher/oauth/csrf", 32)
		if err != nil {
			return nil, err
		}
		s.csrfKeys = append(s.csrfKeys, k)
	}
	if s.codeKey, err = hkdf.Key(sha256.New, o.Secret, []byte(hkdfSalt), "usher/oauth/consent-code", 32); err != nil {
		return nil, err
	}
	if s.successorKey, err = successorKeyOf(o.Secret); err != nil {
		return nil, err
	}
	for _, secret := range o.PreviousSecrets {
		k, err := successorKeyOf(secret)
		if err != nil {
			return nil, err
		}
		s.previousSuccessorKeys = append(s.previousSuccessorKeys, k)
	}
	return s, nil
}

// Handler serves every endpoint: PathAuthorize (GET, and POST from the
// consent page), PathAuthorizeContinue, PathToken, PathRegister,
// PathRevoke — each under the issuer's path, when it has one — and the
// metadata's well-known paths ([Metadata.WellKnownPaths]). It expects the
// request paths as they arrive, from the host's root (mount it without
// http.StripPrefix). Any other path under /oauth/ is a 404 in OAuth error
// JSON. The token, registration and revocation endpoints answer CORS
// preflights and may be called from any origin: they take no cookies.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	base := s.basePath()
	mux.HandleFunc(base+PathAuthorize, s.serveAuthorize)
	mux.HandleFunc(base+PathAuthorizeContinue, s.serveContinue)
	mux.Handle(base+PathToken, cors(http.HandlerFunc(s.serveToken)))
	mux.Handle(base+PathRegister, cors(http.HandlerFunc(s.serveRegister)))
	mux.Handle(base+PathRevoke, cors(http.HandlerFunc(s.serveRevoke)))
	meta := MetadataHandler(s.metadata)
	for _, p := range s.metadata.WellKnownPaths() {
		mux.Handle(p, meta)
	}
	mux.HandleFunc(base+"/oauth/", func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, http.StatusNotFound, CodeInvalidRequest, "No such endpoint.")
	})
	return mux
}

// cors lets browser-based MCP clients (the Inspector) call the endpoints
// that answer JSON from another origin: they authenticate with the request
// itself, never with cookies, so any origin may read the answer. OPTIONS
// is the preflight.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Mcp-Protocol-Version")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clock is the server's now, at the store's precision.
func (s *Server) clock() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}

// serverError logs err and answers server_error, telling the client
// nothing of it; or, when err says the database is out of reach for a
// while, 503 temporarily_unavailable with a Retry-After, so that a client
// tries again rather than giving up its grant.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.ErrorContext(r.Context(), "oauth: "+what, "path", r.URL.Path, "err", err)
	if httpx.Unavailable(err) {
		w.Header().Set("Retry-After", httpx.RetryAfter)
		WriteError(w, http.StatusServiceUnavailable, CodeTemporarilyUnavailable, "The authorization server cannot reach its database just now; try again in a moment.")
		return
	}
	WriteError(w, http.StatusInternalServerError, CodeServerError, "The authorization server failed; try again.")
}

// record appends an audit entry. An audited action whose record cannot be
// written must not proceed, so the caller answers server_error on an error.
func (s *Server) record(ctx context.Context, e audit.Entry, details map[string]any) error {
	e, err := s.entry(e, details)
	if err != nil {
		return err
	}
	return s.audit.Append(ctx, e)
}

// builder returns the build function of an audit entry, for a store
// write that appends it in its own transaction.
func (s *Server) builder(e audit.Entry, details map[string]any) (func(store.AuditHead) (store.AuditRecord, error), error) {
	e, err := s.entry(e, details)
	if err != nil {
		return nil, err
	}
	return s.audit.Builder(e)
}

// entry is e with details and, when it has none, the time.
func (s *Server) entry(e audit.Entry, details map[string]any) (audit.Entry, error) {
	if details != nil {
		b, err := json.Marshal(details)
		if err != nil {
			return e, err
		}
		e.Details = b
	}
	if e.At.IsZero() {
		e.At = s.clock()
	}
	return e, nil
}

// allowedResource reports whether r is one of the server's MCP resources,
// compared exactly.
func (s *Server) allowedResource(r string) bool {
	return slices.Contains(s.resources, r)
}

// subject is what an authorization code and its refresh tokens carry of
// the user for the access tokens (store.AuthorizationCode.Subject).
type subject struct {
	Tenant string   `json:"tenant,omitempty"`
	Groups []string `json:"groups,omitempty"`
	Name   string   `json:"name,omitempty"`
}

// subjectOf is p's subject, as JSON.
func subjectOf(p identity.Principal) json.RawMessage {
	b, _ := json.Marshal(subject{Tenant: p.Tenant, Groups: p.Groups, Name: p.Name}) // strings only: cannot fail
	return b
}

// parseSubject reads a stored subject; nil is none.
func parseSubject(b json.RawMessage) (subject, error) {
	var sub subject
	if len(b) == 0 {
		return sub, nil
	}
	err := json.Unmarshal(b, &sub)
	return sub, err
}

// hkdfSalt separates the authorization server's keys from any other use
// of the secret.
const hkdfSalt = "usher/oauth/v1"

// maxSealedChars bounds a sealed value before it is decoded: room for a
// pending request of the longest URIs and state ParseAuthorize accepts.
const maxSealedChars = 32 << 10

// successorKeyOf is the key that derives refresh tokens' successors
// under secret.
func successorKeyOf(secret []byte) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, []byte(hkdfSalt), "usher/oauth/refresh-successor", 32)
}

// csrfToken is the consent form's CSRF token for the pending request
// sealed as request, shown to principal in the browser session session: an
// HMAC of the three, so that it is good only for that request, that user
// and that browser's sign-in — not for the same person's session in
// another browser, nor after signing in again —, and a page of another
// site cannot know it.
func (s *Server) csrfToken(principal, session, request string) string {
	return csrfToken(s.csrfKeys[0], principal, session, request)
}

// csrfToken is the CSRF token under key of request for principal in
// session.
func csrfToken(key []byte, principal, session, request string) string {
	mac := hmac.New(sha256.New, key)
	for _, part := range []string{principal, session} {
		mac.Write([]byte(strconv.Itoa(len(part))))
		mac.Write([]byte{0})
		mac.Write([]byte(part))
	}
	mac.Write([]byte(request))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// consentCode is the authorization code of the consent form whose pending
// request has the id id: an HMAC of the id, which only the sealed request
// holds, so that it is as unguessable as a random code, and the same for
// every post of one form, so that the store's refusal of a second code
// with its hash makes the form's answer single-use.
func (s *Server) consentCode(id string) string {
	mac := hmac.New(sha256.New, s.codeKey)
	mac.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// checkCSRF reports, in constant time, whether token is the CSRF token of
// request for principal in session, under the Secret or one it replaced:
// a form rendered by a replica before the Secret was replaced is
// answered.
func (s *Server) checkCSRF(principal, session, request, token string) bool {
	if session == "" {
		return false
	}
	ok := false
	for _, k := range s.csrfKeys {
		ok = hmac.Equal([]byte(token), []byte(csrfToken(k, principal, session, request))) || ok
	}
	return ok
}

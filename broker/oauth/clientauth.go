package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// ClientAssertionType is the client_assertion_type of a client that
// authenticates with a JWT signed by its private key (private_key_jwt: RFC
// 7523 §2.2, OpenID Connect Core §9).
const ClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// Limits of a client assertion.
const (
	// MaxAssertionLifetime is how far in the future a client assertion's
	// exp may be: an assertion is for one request, and its jti is
	// remembered until it expires.
	MaxAssertionLifetime = 5 * time.Minute
	// AssertionLeeway is the clock skew allowed on exp, nbf and iat.
	AssertionLeeway = 30 * time.Second
	// maxAssertionBytes bounds a client assertion before it is parsed.
	maxAssertionBytes = 8 << 10
	// maxAssertionJTI bounds a client assertion's jti, which is stored.
	maxAssertionJTI = 256
)

// clientError is the 401 invalid_client of a client that failed to
// authenticate (RFC 6749 §5.2).
func clientError(description string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeInvalidClient, Description: description}
}

// authenticateClient authenticates the client of a token or revocation
// request by the one method the client is registered with: a confidential
// client with HTTP Basic (client_secret_basic: the id and secret
// form-encoded, RFC 6749 §2.3.1) or with a client assertion
// (private_key_jwt: client_assertion_type and client_assertion in the
// form, verified by verifyAssertion), a public one by its client_id in the
// form and no credential. The secret in the body (client_secret_post) is
// not accepted, nor two methods at once. Unknown, revoked, a configured
// client this server's configuration no longer has, or a mismatch: 401
// invalid_client, and nothing is issued.
func (s *Server) authenticateClient(ctx context.Context, r *http.Request, form url.Values) (store.OAuthClient, *Error) {
	formID := form.Get("client_id")
	if form.Has("client_secret") {
		return store.OAuthClient{}, clientError("client_secret in the body is not accepted: use HTTP Basic (client_secret_basic).")
	}
	assertion := form.Has("client_assertion") || form.Has("client_assertion_type")
	id, secret, basic := r.BasicAuth()
	if r.Header.Get("Authorization") != "" && !basic {
		return store.OAuthClient{}, clientError("The only client authentication scheme is Basic.")
	}
	switch {
	case assertion && basic:
		return store.OAuthClient{}, clientError("Use one client authentication method: both HTTP Basic and a client assertion are given.")
	case assertion:
		var cerr *Error
		if id, cerr = assertionClientID(form); cerr != nil {
			return store.OAuthClient{}, cerr
		}
	case basic:
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil || id == "" || secret == "" {
			return store.OAuthClient{}, clientError("The Basic credentials are malformed.")
		}
	default:
		id = formID
		if id == "" {
			return store.OAuthClient{}, clientError("client_id is required.")
		}
	}
	if formID != "" && formID != id {
		return store.OAuthClient{}, clientError("client_id differs from the authenticated client.")
	}
	cl, err := s.st.GetOAuthClient(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && s.retired(cl):
		return store.OAuthClient{}, clientError("Unknown client.")
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: read the client", "err", err)
		return cl, &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "The authorization server failed; try again."}
	case !cl.RevokedAt.IsZero():
		return cl, clientError("The client is revoked.")
	}
	switch cl.AuthMethod {
	case AuthNone:
		if basic || assertion {
			return cl, clientError("The client is public: it authenticates with no secret or assertion.")
		}
	case AuthClientSecretBasic:
		if !basic {
			return cl, clientError("The client must authenticate with HTTP Basic.")
		}
		if !CheckSecret(secret, cl.SecretHash) {
			return cl, clientError("The client's credentials are wrong.")
		}
	case AuthPrivateKeyJWT:
		if !assertion {
			return cl, clientError("The client must authenticate with a client assertion (private_key_jwt).")
		}
		if cerr := s.verifyAssertion(ctx, cl, form.Get("client_assertion")); cerr != nil {
			return cl, cerr
		}
	default:
		return cl, clientError("The client's authentication method is not supported.")
	}
	return cl, nil
}

// assertionClientID checks a request's client assertion parameters and
// returns the client the assertion names: its sub, which must equal its
// iss (RFC 7523 §3). Nothing is verified yet: this only finds whose keys
// verifyAssertion should use.
func assertionClientID(form url.Values) (string, *Error) {
	raw := form.Get("client_assertion")
	switch {
	case form.Get("client_assertion_type") != ClientAssertionType:
		return "", clientError("client_assertion_type must be " + ClientAssertionType + ".")
	case raw == "":
		return "", clientError("client_assertion is required with client_assertion_type.")
	case len(raw) > maxAssertionBytes:
		return "", clientError("The client assertion is too large.")
	}
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(raw, &claims); err != nil {
		return "", clientError("The client assertion is not a JWT.")
	}
	if claims.Subject == "" || claims.Issuer != claims.Subject {
		return "", clientError("The client assertion's iss and sub must both be the client_id.")
	}
	return claims.Subject, nil
}

// verifyAssertion verifies cl's client assertion raw (RFC 7523 §3): signed
// with RS256 or ES256 by a key of the client's key set (its jwks, or its
// jwks_uri's, fetched again once for a kid not in it); iss and sub the
// client_id; aud naming this server — its issuer or its token endpoint;
// exp set, not past, and at most MaxAssertionLifetime away; nbf and iat,
// when set, not in the future; a jti, which is then recorded until the
// assertion expires so that the assertion is used once across replicas.
// Every claim is checked before the jti is spent, so that a refused
// assertion uses up nothing.
func (s *Server) verifyAssertion(ctx context.Context, cl store.OAuthClient, raw string) *Error {
	src, err := keySource(cl.Metadata)
	if err != nil {
		s.log.WarnContext(ctx, "oauth: a private_key_jwt client without keys", "client_id", cl.ID, "err", err)
		return clientError("The client has no keys to verify its assertion with.")
	}
	keys, refresh, kerr := s.clientKeys(ctx, src)
	if kerr != nil {
		s.log.WarnContext(ctx, "oauth: the client's key set", "client_id", cl.ID, "err", kerr)
		return clientError("The client's key set could not be read.")
	}
	now := s.clock()
	parser := jwt.NewParser(
		jwt.WithValidMethods(assertionAlgs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(cl.ID),
		jwt.WithSubject(cl.ID),
		jwt.WithAudience(s.issuer, s.metadata.TokenEndpoint),
		jwt.WithLeeway(AssertionLeeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	var claims jwt.RegisteredClaims
	_, err = parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		alg := t.Method.Alg()
		if k := keys.find(kid, alg); k != nil {
			return k, nil
		}
		if refresh != nil {
			if ks, err := refresh(ctx); err == nil {
				if k := ks.find(kid, alg); k != nil {
					return k, nil
				}
			}
		}
		return nil, errUnknownKey
	})
	switch {
	case errors.Is(err, errUnknownKey):
		return clientError("No key of the client's key set matches the assertion's kid and alg.")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		s.log.InfoContext(ctx, "oauth: client assertion refused", "client_id", cl.ID, "err", err)
		return clientError("The client assertion's signature is not valid, or its alg is not RS256 or ES256.")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return clientError("The client assertion's aud must name this server: its issuer or its token endpoint.")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return clientError("The client assertion lacks exp or aud.")
	case errors.Is(err, jwt.ErrTokenExpired):
		return clientError("The client assertion has expired.")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued), errors.Is(err, jwt.ErrTokenNotValidYet):
		return clientError("The client assertion's iat or nbf is in the future.")
	case err != nil:
		s.log.InfoContext(ctx, "oauth: client assertion refused", "client_id", cl.ID, "err", err)
		return clientError("The client assertion is not valid.")
	}
	exp := claims.ExpiresAt.Time
	switch {
	case exp.After(now.Add(MaxAssertionLifetime + AssertionLeeway)):
		return clientError("The client assertion's exp is more than 5 minutes away.")
	case claims.ID == "":
		return clientError("The client assertion has no jti.")
	case len(claims.ID) > maxAssertionJTI:
		return clientError("The client assertion's jti is too long.")
	}
	// Remembered past exp by the leeway, during which it would still pass.
	err = s.st.UseClientAssertion(ctx, cl.ID, claims.ID, exp.Add(AssertionLeeway), now)
	switch {
	case errors.Is(err, store.ErrConflict):
		// Refused whether or not the record is written: a replay is
		// never let in.
		jti := HashSecret(claims.ID)
		s.log.WarnContext(ctx, "oauth: a client assertion replayed", "client_id", cl.ID, "jti_sha256", jti)
		if aerr := s.record(ctx, audit.Entry{Kind: audit.KindOAuthClientAssertionReplayed, ClientID: cl.ID},
			map[string]any{"jti_sha256": jti}); aerr != nil {
			s.log.ErrorContext(ctx, "oauth: audit a client assertion replay", "err", aerr)
		}
		return clientError("The client assertion was already used.")
	case errors.Is(err, store.ErrInvalid):
		return clientError("The client assertion's jti is not valid.")
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: record the client assertion", "err", err)
		return &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "The authorization server failed; try again."}
	}
	return nil
}

// errUnknownKey reports an assertion no key of its client's set verifies.
var errUnknownKey = errors.New("oauth: no key of the client's set matches the assertion's kid and alg")

// clientKeys returns the key set of src: its jwks, parsed, or its
// jwks_uri's, from the cache, with refresh to fetch it again (at the
// cache's bounded rate) for a kid not in it.
func (s *Server) clientKeys(ctx context.Context, src clientKeySource) (clientKeys, func(context.Context) (clientKeys, error), error) {
	if src.JWKSURI == "" {
		ks, err := parseClientKeys(src.JWKS)
		return ks, nil, err
	}
	c, err := s.keys.cache(src.JWKSURI)
	if err != nil {
		return nil, nil, err
	}
	ks, err := c.Get(ctx)
	return ks, c.Refresh, err
}

// retired reports whether cl is a configured client this server's
// configuration does not have: removed from it, or configured only on
// other replicas for now. Such a client is unknown here; it stays in the
// store, so that configuring it again restores it.
func (s *Server) retired(cl store.OAuthClient) bool {
	return cl.Kind == store.OAuthClientConfigured && !s.configured[cl.ID]
}

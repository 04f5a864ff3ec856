package devoidc

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
)

// Access tokens carry the header "typ": "at+jwt" (RFC 9068) and the claims
// iss, sub, aud (the API), client_id, iat, nbf, exp, jti, scp, oid, name and
// preferred_username; ID tokens carry "typ": "JWT". The distinct typ and aud
// keep one from being taken for the other.
const (
	accessTokenType = "at+jwt"
	idTokenType     = "JWT"
)

const (
	// codeLifetime is how long an authorization code may be exchanged.
	codeLifetime = 60 * time.Second
	// maxCodes caps outstanding authorization codes.
	maxCodes = 1000
	// maxFormBytes bounds the bodies of POST requests.
	maxFormBytes = 16 << 10
	// minRSABits is the smallest signing key used.
	minRSABits = 2048
)

// oidcScopes are the OpenID Connect scopes a client may request besides
// the API scopes. No email claim is issued; "email" is accepted because
// common clients ask for it.
var oidcScopes = []string{"openid", "profile", "email"}

// userName is the syntax of a user name: it becomes the "name" and
// "preferred_username" claims and, folded to lower case, the user's key.
var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Provider is the development OIDC provider. It is safe for concurrent use.
type Provider struct {
	o              Options
	codes          *codeStore
	csrf           *http.CrossOriginProtection
	accessVerifier *oidc.IDTokenVerifier
}

// New returns a Provider for opts; nil opts is invalid (Issuer, Keys and
// RedirectURIs are required).
func New(opts *Options) (*Provider, error) {
	if opts == nil {
		opts = &Options{}
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Provider{
		o:     o,
		codes: newCodeStore(maxCodes),
		csrf:  http.NewCrossOriginProtection(),
		accessVerifier: oidc.NewVerifier(o.Issuer, publishedKeys{o.Keys}, &oidc.Config{
			ClientID:             o.Audience,
			SupportedSigningAlgs: []string{oidc.RS256},
			Now:                  o.Now,
		}),
	}, nil
}

// Handler serves the provider's endpoints at paths relative to the
// issuer's path; mount it with http.StripPrefix at that path:
//
//	GET  /.well-known/openid-configuration  discovery
//	GET  /jwks                              the published keys
//	GET  /authorize                         the sign-in form
//	POST /authorize                         sign-in: redirects with a code
//	POST /token                             authorization_code grant
//	GET  /userinfo                          claims of an access token
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorizeForm)
	mux.HandleFunc("POST /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /userinfo", p.userinfo)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeOAuthError(w, &oauthError{status: http.StatusNotFound, code: "invalid_request", desc: "no such endpoint or method"})
	})
	return mux
}

// IssueAccessToken returns an access token for username with the same
// claims as one from the token endpoint, as if issued to the configured
// client, plus the given "groups" (as Entra puts a user's group ids in its
// tokens), so that group policies can be tried. It serves command-line
// tools that call the API directly.
func (p *Provider) IssueAccessToken(ctx context.Context, username string, groups ...string) (string, error) {
	user, ok := canonicalUser(username)
	if !ok {
		return "", fmt.Errorf("devoidc: user name %q: use 1 to 64 letters, digits, dots, underscores or hyphens, starting with a letter or digit", username)
	}
	for _, g := range groups {
		if !userName.MatchString(g) {
			return "", fmt.Errorf("devoidc: group %q: use 1 to 64 letters, digits, dots, underscores or hyphens, starting with a letter or digit", g)
		}
	}
	return p.accessToken(ctx, user, p.o.Now(), groups...)
}

func (p *Provider) discovery(w http.ResponseWriter, r *http.Request) {
	iss := p.o.Issuer
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                         iss,
		"authorization_endpoint":                         iss + "/authorize",
		"token_endpoint":                                 iss + "/token",
		"jwks_uri":                                       iss + "/jwks",
		"userinfo_endpoint":                              iss + "/userinfo",
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code"},
		"code_challenge_methods_supported":               []string{"S256"},
		"id_token_signing_alg_values_supported":          []string{string(jose.RS256)},
		"scopes_supported":                               append(append([]string{}, oidcScopes...), p.o.Scopes...),
		"subject_types_supported":                        []string{"public"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"claims_supported":                               []string{"iss", "sub", "aud", "iat", "exp", "auth_time", "nonce", "name", "preferred_username", "oid"},
		"authorization_response_iss_parameter_supported": true,
	})
}

func (p *Provider) jwks(w http.ResponseWriter, r *http.Request) {
	set, err := p.o.Keys.PublicKeys(r.Context())
	if err != nil {
		p.o.Logger.LogAttrs(r.Context(), slog.LevelError, "devoidc: reading public keys", slog.String("error", err.Error()))
		writeOAuthError(w, errServer)
		return
	}
	out := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(set.Keys))}
	for _, k := range set.Keys {
		pub := k.Public() // never publish a private part by mistake
		if pub.Valid() {
			out.Keys = append(out.Keys, pub)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (p *Provider) userinfo(w http.ResponseWriter, r *http.Request) {
	scheme, raw, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	var claims struct {
		Subject           string `json:"sub"`
		Name              string `json:"name"`
		PreferredUsername string `json:"preferred_username"`
	}
	tok, err := p.accessVerifier.Verify(r.Context(), raw)
	if err == nil {
		err = tok.Claims(&claims)
	}
	if !strings.EqualFold(scheme, "Bearer") || err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeOAuthError(w, &oauthError{status: http.StatusUnauthorized, code: "invalid_token", desc: "a valid access token is required"})
		return
	}
	writeJSON(w, http.StatusOK, claims)
}

// canonicalUser validates a user name and folds it to lower case, so that
// "Alice" and "alice" are one user.
func canonicalUser(name string) (string, bool) {
	if !userName.MatchString(name) {
		return "", false
	}
	return strings.ToLower(name), true
}

// objectID is the stable id of a user: a name-based (SHA-1, version 5)
// UUID of the issuer and the user name.
func (p *Provider) objectID(user string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(p.o.Issuer+"/users/"+user)).String()
}

type accessTokenClaims struct {
	Issuer            string   `json:"iss"`
	Subject           string   `json:"sub"`
	Audience          string   `json:"aud"`
	ClientID          string   `json:"client_id"`
	IssuedAt          int64    `json:"iat"`
	NotBefore         int64    `json:"nbf"`
	Expiry            int64    `json:"exp"`
	JWTID             string   `json:"jti"`
	Scope             string   `json:"scp"`
	ObjectID          string   `json:"oid"`
	Name              string   `json:"name"`
	PreferredUsername string   `json:"preferred_username"`
	Groups            []string `json:"groups,omitempty"`
}

func (p *Provider) accessToken(ctx context.Context, user string, now time.Time, groups ...string) (string, error) {
	oid := p.objectID(user)
	return p.sign(ctx, accessTokenType, accessTokenClaims{
		Issuer:            p.o.Issuer,
		Subject:           oid,
		Audience:          p.o.Audience,
		ClientID:          p.o.ClientID,
		IssuedAt:          now.Unix(),
		NotBefore:         now.Unix(),
		Expiry:            now.Add(p.o.TokenLifetime).Unix(),
		JWTID:             uuid.NewString(),
		Scope:             strings.Join(p.o.Scopes, " "),
		ObjectID:          oid,
		Name:              user,
		PreferredUsername: user,
		Groups:            groups,
	})
}

type idTokenClaims struct {
	Issuer            string `json:"iss"`
	Subject           string `json:"sub"`
	Audience          string `json:"aud"`
	IssuedAt          int64  `json:"iat"`
	Expiry            int64  `json:"exp"`
	AuthTime          int64  `json:"auth_time"`
	Nonce             string `json:"nonce,omitempty"`
	AccessTokenHash   string `json:"at_hash"`
	Name              string `json:"name"`
	PreferredUsername string `json:"preferred_username"`
}

func (p *Provider) idToken(ctx context.Context, g grant, accessToken string, now time.Time) (string, error) {
	atHash := sha256.Sum256([]byte(accessToken))
	return p.sign(ctx, idTokenType, idTokenClaims{
		Issuer:            p.o.Issuer,
		Subject:           p.objectID(g.user),
		Audience:          p.o.ClientID,
		IssuedAt:          now.Unix(),
		Expiry:            now.Add(p.o.TokenLifetime).Unix(),
		AuthTime:          g.authTime.Unix(),
		Nonce:             g.nonce,
		AccessTokenHash:   base64.RawURLEncoding.EncodeToString(atHash[:len(atHash)/2]),
		Name:              g.user,
		PreferredUsername: g.user,
	})
}

// sign returns claims as a compact JWS signed with RS256 by the current key.
func (p *Provider) sign(ctx context.Context, typ string, claims any) (string, error) {
	kid, key, err := p.o.Keys.Signer(ctx)
	if err != nil {
		return "", fmt.Errorf("devoidc: signing key: %w", err)
	}
	if kid == "" || key == nil || key.N.BitLen() < minRSABits {
		return "", errors.New("devoidc: signing key: need a key id and an RSA key of at least 2048 bits")
	}
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType(jose.ContentType(typ)))
	if err != nil {
		return "", fmt.Errorf("devoidc: signer: %w", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("devoidc: signing: %w", err)
	}
	return obj.CompactSerialize()
}

// publishedKeys verifies tokens with the keys the provider publishes.
type publishedKeys struct{ src KeySource }

func (k publishedKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 || jws.Signatures[0].Header.KeyID == "" {
		return nil, errors.New("token needs one signature with a kid")
	}
	kid := jws.Signatures[0].Header.KeyID
	set, err := k.src.PublicKeys(ctx)
	if err != nil {
		return nil, err
	}
	for _, key := range set.Key(kid) {
		pub := key.Public()
		if payload, err := jws.Verify(&pub); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("no published key verifies the token")
}

// redirectAllowed reports whether raw is exactly a registered redirect
// URI. The client is the Sessions UI, a web application: a loopback URI
// on another port is another application on the machine, not this one.
func (p *Provider) redirectAllowed(raw string) bool {
	return slices.Contains(p.o.RedirectURIs, raw)
}

// oauthError is an OAuth 2.0 error (RFC 6749 sections 4.1.2.1 and 5.2).
type oauthError struct {
	status int    // HTTP status when answered directly
	code   string // "error"
	desc   string // "error_description": safe to show, no internals
	// redirect sends the error to the client's redirect URI instead: only
	// once client_id and redirect_uri have been validated.
	redirect bool
}

var errServer = &oauthError{status: http.StatusInternalServerError, code: "server_error", desc: "the provider could not complete the request"}

func writeOAuthError(w http.ResponseWriter, e *oauthError) {
	writeJSON(w, e.status, map[string]string{"error": e.code, "error_description": e.desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *Provider) logRefusal(r *http.Request, e *oauthError) {
	p.o.Logger.LogAttrs(r.Context(), slog.LevelInfo, "devoidc: request refused",
		slog.String("path", r.URL.Path),
		slog.String("error", e.code),
		slog.String("description", e.desc))
}

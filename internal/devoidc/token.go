package devoidc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// codeVerifier is the syntax of a PKCE code_verifier (RFC 7636 section 4.1).
var codeVerifier = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// tokenParams may each appear at most once (RFC 6749 section 3.2).
var tokenParams = []string{"grant_type", "code", "redirect_uri", "client_id", "code_verifier"}

type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
	IDToken     string `json:"id_token,omitempty"`
	Scope       string `json:"scope"`
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	resp, e := p.exchange(w, r)
	if e != nil {
		p.logRefusal(r, e)
		writeOAuthError(w, e)
		return
	}
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, resp)
}

// exchange redeems an authorization code (RFC 6749 section 4.1.3, RFC 7636
// section 4.6): the code once, by its client, with its redirect URI and the
// verifier of its challenge.
func (p *Provider) exchange(w http.ResponseWriter, r *http.Request) (*tokenResponse, *oauthError) {
	bad := func(code, desc string) *oauthError {
		return &oauthError{status: http.StatusBadRequest, code: code, desc: desc}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return nil, bad("invalid_request", "the body must be application/x-www-form-urlencoded")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return nil, bad("invalid_request", "malformed or too large form")
	}
	f := r.PostForm
	for _, name := range tokenParams {
		if len(f[name]) > 1 {
			return nil, bad("invalid_request", "parameter "+name+" is repeated")
		}
	}
	if f.Get("grant_type") != "authorization_code" {
		return nil, bad("unsupported_grant_type", "only grant_type=authorization_code is supported")
	}
	if f.Get("client_id") != p.o.ClientID {
		return nil, &oauthError{status: http.StatusUnauthorized, code: "invalid_client", desc: "unknown client_id"}
	}
	if f.Get("code") == "" || f.Get("redirect_uri") == "" {
		return nil, bad("invalid_request", "code and redirect_uri are required")
	}
	if !codeVerifier.MatchString(f.Get("code_verifier")) {
		return nil, bad("invalid_request", "PKCE is required: code_verifier of 43 to 128 characters")
	}
	now := p.o.Now()
	g, ok := p.codes.take(now, f.Get("code")) // spent from here on, whatever follows
	if !ok {
		return nil, bad("invalid_grant", "the code is unknown, used or expired")
	}
	if g.clientID != f.Get("client_id") || g.redirectURI != f.Get("redirect_uri") {
		return nil, bad("invalid_grant", "the code was issued for another client or redirect_uri")
	}
	if !pkceMatches(f.Get("code_verifier"), g.challenge) {
		return nil, bad("invalid_grant", "code_verifier does not match code_challenge")
	}
	resp, err := p.issue(r.Context(), g, now)
	if err != nil {
		p.o.Logger.LogAttrs(r.Context(), slog.LevelError, "devoidc: issuing tokens", slog.String("error", err.Error()))
		return nil, errServer
	}
	return resp, nil
}

// pkceMatches compares BASE64URL(SHA256(verifier)) with the challenge in
// constant time.
func pkceMatches(verifier, challenge string) bool {
	sum := sha256.Sum256([]byte(verifier))
	got := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

func (p *Provider) issue(ctx context.Context, g grant, now time.Time) (*tokenResponse, error) {
	access, err := p.accessToken(ctx, g.user, now, g.groups...)
	if err != nil {
		return nil, err
	}
	resp := &tokenResponse{
		AccessToken: access,
		TokenType:   "Bearer",
		ExpiresIn:   int64(p.o.TokenLifetime / time.Second),
		Scope:       g.scope,
	}
	if slices.Contains(strings.Fields(g.scope), "openid") {
		if resp.IDToken, err = p.idToken(ctx, g, access, now); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// Token type identifiers of the token exchange (RFC 8693 §3).
const (
	// TokenTypeAccessToken is the subject_token_type of an access token,
	// and the issued_token_type of every exchange.
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	// TokenTypeJWT is accepted as subject_token_type too: the access
	// tokens of Entra and of most OIDC issuers are JWTs, and some clients
	// label them so. The subject token is verified as an access token for
	// Usher's API whichever of the two it is labelled.
	TokenTypeJWT = "urn:ietf:params:oauth:token-type:jwt"
)

// SubjectTokenVerifier checks the subject token of a token exchange: an
// access token for Usher's API, verified exactly as the API verifies it
// (identity.Verifier.Verify: signature, issuer, audience, lifetime, scope,
// tenant, and a person's token, not an application's). It returns the
// person the token speaks for. Its errors match identity.ErrUnauthenticated,
// identity.ErrForbidden, identity.ErrInsufficientScope or
// identity.ErrAppToken, and their text is for logs only.
type SubjectTokenVerifier func(ctx context.Context, raw string) (identity.Principal, error)

// exchangeRequest is a token exchange request whose parameters are good.
type exchangeRequest struct {
	SubjectToken     string
	SubjectTokenType string
	Resource         string
	Scope            string
}

// exchangeResponse is the body of a successful token exchange (RFC 8693
// §2.2.1). No refresh token: the client exchanges again.
type exchangeResponse struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope"`
}

// exchangeGrant answers a token exchange (RFC 8693): a person's access
// token for Usher's API, presented by a client that may exchange, for a
// broker token for one of the MCP resources, with the person as sub and
// the client as client_id and act. Cheap checks first — the client, then
// the parameters —, the subject token's signature last. Nothing is issued
// unless its audit record is written.
func (s *Server) exchangeGrant(w http.ResponseWriter, r *http.Request, cl store.OAuthClient, form url.Values) {
	ctx := r.Context()
	if len(s.exchangers) == 0 {
		WriteError(w, http.StatusBadRequest, CodeUnsupportedGrantType, "Token exchange is not enabled on this server.")
		return
	}
	if e := s.mayExchange(cl); e != nil {
		e.Write(w)
		return
	}
	req, e := parseExchange(form)
	if e != nil {
		e.Write(w)
		return
	}
	if !s.allowedResource(req.Resource) {
		WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource is not this server's MCP endpoint.")
		return
	}
	p, err := s.verifySubject(ctx, req.SubjectToken)
	if err != nil {
		s.log.InfoContext(ctx, "oauth: token exchange refused", "client_id", cl.ID, "err", err)
		subjectTokenError(err).Write(w)
		return
	}
	tok, err := s.broker.Mint(ctx, broker.Grant{
		Subject: p.ID(), Audience: req.Resource, ClientID: cl.ID, Actor: cl.ID, Tenant: p.Tenant, Groups: p.Groups,
	})
	switch {
	case errors.Is(err, broker.ErrBadGrant):
		s.log.InfoContext(ctx, "oauth: token exchange refused", "client_id", cl.ID, "err", err)
		WriteError(w, http.StatusBadRequest, codeBadSubjectToken,
			"The subject_token's tenant or groups do not fit in an access token (at most "+strconv.Itoa(broker.MaxGroups)+" groups).")
		return
	case err != nil:
		s.serverError(w, r, "mint the exchanged token", err)
		return
	}
	err = s.record(ctx, audit.Entry{Kind: audit.KindOAuthTokenExchanged, Principal: p.ID(), ClientID: cl.ID, TokenJTI: tok.ID},
		map[string]any{"resource": req.Resource, "subject_token_type": req.SubjectTokenType})
	if err != nil {
		s.serverError(w, r, "audit the exchanged token", err)
		return
	}
	now := s.clock()
	body, _ := json.Marshal(exchangeResponse{ // strings and a number: cannot fail
		AccessToken: tok.Raw, IssuedTokenType: TokenTypeAccessToken, TokenType: "Bearer",
		ExpiresIn: max(int64(tok.Expiry.Sub(now)/time.Second), 1), Scope: req.Scope,
	})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	noStore(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

// mayExchange refuses a client that may not exchange: one not named in
// ServerOptions.ExchangeClients, or a public one — whose client_id anyone
// can send, so that the list would name no one in particular. The stored
// method is how the client just authenticated (authenticateClient
// enforces it); any method but a secret or a key is refused.
func (s *Server) mayExchange(cl store.OAuthClient) *Error {
	if !slices.Contains(s.exchangers, cl.ID) {
		return newError(CodeUnauthorizedClient, "This client may not exchange tokens.", false)
	}
	if cl.AuthMethod != AuthClientSecretBasic && cl.AuthMethod != AuthPrivateKeyJWT {
		return newError(CodeUnauthorizedClient, "Only a confidential client, one that authenticates with a secret or a key, may exchange tokens.", false)
	}
	return nil
}

// parseExchange checks the parameters of a token exchange request (RFC
// 8693 §2.1) and returns them. The subject token itself is not looked at:
// it is the verifier's.
func parseExchange(form url.Values) (exchangeRequest, *Error) {
	bad := func(description string) (exchangeRequest, *Error) {
		return exchangeRequest{}, newError(CodeInvalidRequest, description, false)
	}
	if form.Has("actor_token") || form.Has("actor_token_type") {
		return bad("actor_token is not supported: the authenticated client is the actor.")
	}
	req := exchangeRequest{SubjectToken: form.Get("subject_token"), SubjectTokenType: form.Get("subject_token_type")}
	switch {
	case req.SubjectToken == "":
		return bad("subject_token is required.")
	case req.SubjectTokenType == "":
		return bad("subject_token_type is required.")
	case req.SubjectTokenType != TokenTypeAccessToken && req.SubjectTokenType != TokenTypeJWT:
		return bad("subject_token_type must be " + TokenTypeAccessToken + ": an access token for Usher's API.")
	}
	if t := form.Get("requested_token_type"); t != "" && t != TokenTypeAccessToken {
		return bad("requested_token_type may only be " + TokenTypeAccessToken + ".")
	}
	res, err := CheckResource(form["resource"])
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = newError(CodeInvalidTarget, "resource must be an absolute URI without fragment.", false)
		}
		return exchangeRequest{}, e
	}
	req.Resource = res
	if form.Has("audience") && form.Get("audience") != res {
		return exchangeRequest{}, newError(CodeInvalidTarget, "audience, if given, must be the resource.", false)
	}
	if req.Scope, err = parseScope(form.Get("scope")); err != nil {
		return exchangeRequest{}, newError(CodeInvalidScope, "The only scope is mcp:invoke.", false)
	}
	return req, nil
}

// codeBadSubjectToken is the error of a subject token that is invalid or
// refused by policy: RFC 8693 §2.2.2 says it MUST be invalid_request.
const codeBadSubjectToken = CodeInvalidRequest

// subjectTokenError is what a client is told of a subject token the
// verifier refused: what the API would tell it of that token, no more.
func subjectTokenError(err error) *Error {
	description := "The subject_token is not a valid access token for Usher's API: malformed, expired, badly signed, or from another issuer or for another audience."
	switch {
	case errors.Is(err, identity.ErrAppToken):
		description = "The subject_token speaks for an application, not a person: only a person's token may be exchanged."
	case errors.Is(err, identity.ErrInsufficientScope):
		description = "The subject_token lacks the API's scope."
	case errors.Is(err, identity.ErrTooManyGroups):
		description = "The subject_token does not list its person's groups (there are too many): the identity provider must send only the groups assigned to the application."
	case errors.Is(err, identity.ErrForbidden):
		description = "The subject_token's tenant is not allowed."
	}
	return newError(codeBadSubjectToken, description, false)
}

package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// maxTokenForm bounds a token or revocation request's body.
const maxTokenForm = 16 << 10

// refreshContext is the grant a refresh token family carries on: from
// the authorization code that started it, or from the stored token being
// rotated. A refresh token itself is 256 random bits (NewSecret), stored
// by its hash: the store is the only authority on it.
type refreshContext struct {
	Family    string
	ClientID  string
	Principal string
	Subject   json.RawMessage
	Resource  string
	Scope     string
	FamilyEnd time.Time
}

// tokenResponse is the body of a successful token request (RFC 6749 §5.1).
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope"`
}

// serveToken is the token endpoint (RFC 6749 §3.2): form-encoded POSTs of
// the authorization_code and refresh_token grants.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	form, ferr := readForm(w, r)
	if ferr != nil {
		ferr.Write(w)
		return
	}
	cl, cerr := s.authenticateClient(r.Context(), r, form)
	if cerr != nil {
		cerr.Write(w)
		return
	}
	grant, _ := single(form, "grant_type")
	switch grant {
	case GrantAuthorizationCode:
		s.codeGrant(w, r, cl, form)
	case GrantRefreshToken:
		s.refreshGrant(w, r, cl, form)
	case GrantTokenExchange:
		s.exchangeGrant(w, r, cl, form)
	case "":
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "grant_type is required.")
	default:
		WriteError(w, http.StatusBadRequest, CodeUnsupportedGrantType, "The grant types are authorization_code and refresh_token.")
	}
}

// readForm reads a POST's form-encoded body, at most maxTokenForm bytes,
// refusing a parameter given twice (RFC 6749 §3.2).
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, *Error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST, OPTIONS")
		return nil, &Error{Status: http.StatusMethodNotAllowed, Code: CodeInvalidRequest, Description: "Use POST."}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, newError(CodeInvalidRequest, "The body must be application/x-www-form-urlencoded.", false)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTokenForm))
	if err != nil {
		return nil, newError(CodeInvalidRequest, "The body could not be read, or is larger than "+strconv.Itoa(maxTokenForm)+" bytes.", false)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, newError(CodeInvalidRequest, "The body is not a valid form.", false)
	}
	for _, v := range form {
		if len(v) > 1 {
			return nil, newError(CodeInvalidRequest, "A parameter appears more than once.", false)
		}
	}
	return form, nil
}

// clientError is the 401 invalid_client of a client that failed to
// authenticate (RFC 6749 §5.2).
func clientError(description string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeInvalidClient, Description: description}
}

// authenticateClient authenticates the client of a token or revocation
// request: a confidential client with HTTP Basic (client_secret_basic: the
// id and secret form-encoded, RFC 6749 §2.3.1), a public one by its
// client_id in the form and no secret. The secret in the body
// (client_secret_post) is not accepted. Unknown, revoked, or a mismatch:
// 401 invalid_client.
func (s *Server) authenticateClient(ctx context.Context, r *http.Request, form url.Values) (store.OAuthClient, *Error) {
	formID := form.Get("client_id")
	if form.Has("client_secret") {
		return store.OAuthClient{}, clientError("client_secret in the body is not accepted: use HTTP Basic (client_secret_basic).")
	}
	id, secret, basic := r.BasicAuth()
	if r.Header.Get("Authorization") != "" && !basic {
		return store.OAuthClient{}, clientError("The only client authentication scheme is Basic.")
	}
	if basic {
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil || id == "" || secret == "" {
			return store.OAuthClient{}, clientError("The Basic credentials are malformed.")
		}
		if formID != "" && formID != id {
			return store.OAuthClient{}, clientError("client_id differs from the authenticated client.")
		}
	} else {
		id = formID
		if id == "" {
			return store.OAuthClient{}, clientError("client_id is required.")
		}
	}
	cl, err := s.st.GetOAuthClient(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return cl, clientError("Unknown client.")
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: read the client", "err", err)
		return cl, &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "The authorization server failed; try again."}
	case !cl.RevokedAt.IsZero():
		return cl, clientError("The client is revoked.")
	}
	switch cl.AuthMethod {
	case AuthNone:
		if basic {
			return cl, clientError("The client is public: it authenticates with no secret.")
		}
	case AuthClientSecretBasic:
		if !basic {
			return cl, clientError("The client must authenticate with HTTP Basic.")
		}
		if !CheckSecret(secret, cl.SecretHash) {
			return cl, clientError("The client's credentials are wrong.")
		}
	default:
		return cl, clientError("The client's authentication method is not supported.")
	}
	return cl, nil
}

// codeGrant redeems an authorization code (RFC 6749 §4.1.3, RFC 7636
// §4.5). The code is used up by the first attempt, whatever its outcome,
// so a code tried with a wrong verifier cannot be tried again.
func (s *Server) codeGrant(w http.ResponseWriter, r *http.Request, cl store.OAuthClient, form url.Values) {
	ctx := r.Context()
	code, redirectURI, verifier := form.Get("code"), form.Get("redirect_uri"), form.Get("code_verifier")
	switch {
	case code == "":
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "code is required.")
		return
	case redirectURI == "":
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "redirect_uri is required.")
		return
	case verifier == "":
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "code_verifier is required (PKCE).")
		return
	}
	var resource string
	if form.Has("resource") {
		var err error
		if resource, err = CheckResource(form["resource"]); err != nil {
			WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource must be an absolute URI without fragment.")
			return
		}
	}
	now := s.clock()
	family := randomText(16)
	ac, err := s.st.RedeemAuthorizationCode(ctx, HashSecret(code), family, now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code is unknown.")
		return
	case errors.Is(err, store.ErrConflict) && !ac.UsedAt.IsZero():
		// A replay: the store revoked what the code issued.
		if err := s.record(ctx, audit.Entry{Kind: audit.KindOAuthCodeReplayed, Principal: ac.Principal, ClientID: ac.ClientID},
			map[string]any{"family": ac.FamilyID, "presented_by": cl.ID}); err != nil {
			s.log.ErrorContext(ctx, "oauth: audit a code replay", "err", err)
		}
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code was already used; the tokens it issued are revoked.")
		return
	case errors.Is(err, store.ErrConflict):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code has expired.")
		return
	case err != nil:
		s.serverError(w, r, "redeem the authorization code", err)
		return
	}
	switch {
	case ac.ClientID != cl.ID:
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code was issued to another client.")
		return
	case ac.RedirectURI != redirectURI:
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "redirect_uri differs from the authorization request's.")
		return
	case !VerifyPKCE(verifier, ac.CodeChallenge):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "code_verifier does not match the code challenge.")
		return
	case resource != "" && resource != ac.Resource:
		WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource differs from the authorization request's.")
		return
	}
	rc := refreshContext{
		Family: family, ClientID: cl.ID, Principal: ac.Principal, Subject: ac.Subject,
		Resource: ac.Resource, Scope: ac.Scope, FamilyEnd: now.Add(s.refreshAbs),
	}
	s.issueTokens(w, r, cl, rc, GrantAuthorizationCode, func(refresh string) error {
		err := s.st.IssueRefreshToken(ctx, store.RefreshToken{
			TokenHash: HashSecret(refresh), FamilyID: family, ClientID: cl.ID, Principal: ac.Principal,
			Subject: ac.Subject, Resource: ac.Resource, Scope: ac.Scope, CreatedAt: now,
			ExpiresAt: s.refreshEnd(now, rc), FamilyExpiresAt: rc.FamilyEnd,
		})
		return err
	})
}

// refreshGrant rotates a refresh token (RFC 6749 §6, OAuth 2.1 §4.3.1):
// the old one is used up, a new one of its family issued with the access
// token. A token presented again after its rotation revokes the family.
func (s *Server) refreshGrant(w http.ResponseWriter, r *http.Request, cl store.OAuthClient, form url.Values) {
	ctx := r.Context()
	raw := form.Get("refresh_token")
	if raw == "" {
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "refresh_token is required.")
		return
	}
	now := s.clock()
	hash := HashSecret(raw)
	old, err := s.st.GetRefreshToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token is unknown or expired.")
		return
	case err != nil:
		s.serverError(w, r, "read the refresh token", err)
		return
	}
	rc := refreshContext{
		Family: old.FamilyID, ClientID: old.ClientID, Principal: old.Principal, Subject: old.Subject,
		Resource: old.Resource, Scope: old.Scope, FamilyEnd: old.FamilyExpiresAt,
	}
	if rc.ClientID != cl.ID {
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token was issued to another client.")
		return
	}
	if form.Has("resource") {
		if res, err := CheckResource(form["resource"]); err != nil || res != rc.Resource {
			WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource differs from the one the refresh token is for.")
			return
		}
	}
	if form.Has("scope") {
		if sc, err := parseScope(form.Get("scope")); err != nil || sc != rc.Scope {
			WriteError(w, http.StatusBadRequest, CodeInvalidScope, "scope may only be the refresh token's.")
			return
		}
	}
	if !slices.Contains(cl.GrantTypes, GrantRefreshToken) {
		WriteError(w, http.StatusBadRequest, CodeUnauthorizedClient, "The client is not registered for the refresh_token grant.")
		return
	}
	s.issueTokens(w, r, cl, rc, GrantRefreshToken, func(next string) error {
		// The store carries the grant on from the old token, and refuses
		// it if the token was used, revoked or expired meanwhile.
		old, err := s.st.RotateRefreshToken(ctx, hash, store.RefreshToken{
			TokenHash: HashSecret(next), CreatedAt: now, ExpiresAt: s.refreshEnd(now, rc),
		}, now)
		if errors.Is(err, store.ErrReused) {
			if aerr := s.record(ctx, audit.Entry{Kind: audit.KindOAuthRefreshReused, Principal: old.Principal, ClientID: old.ClientID},
				map[string]any{"family": old.FamilyID}); aerr != nil {
				s.log.ErrorContext(ctx, "oauth: audit a refresh token reuse", "err", aerr)
			}
		}
		return err
	})
}

// refreshEnd is when a refresh token issued at now dies unused: after the
// idle lifetime, or at its family's end.
func (s *Server) refreshEnd(now time.Time, rc refreshContext) time.Time {
	idle, family := now.Add(s.refreshIdle), rc.FamilyEnd
	if family.Before(idle) {
		return family
	}
	return idle
}

// errNoConsent reports that the user's consent to the client is gone.
var errNoConsent = errors.New("oauth: the consent is revoked or gone")

// issueTokens answers a grant whose refresh token, rc, is good: it checks
// the consent still stands (and moves its LastUsedAt), stores the next
// refresh token with store (a refresh token for a client registered for
// the refresh_token grant only), mints the access token, audits it, and
// answers both. A refresh token's store refusal is invalid_grant.
func (s *Server) issueTokens(w http.ResponseWriter, r *http.Request, cl store.OAuthClient, rc refreshContext, grant string, storeRefresh func(string) error) {
	ctx := r.Context()
	now := s.clock()
	var refresh string
	if slices.Contains(cl.GrantTypes, GrantRefreshToken) {
		refresh = NewSecret()
		err := storeRefresh(refresh)
		switch {
		case errors.Is(err, store.ErrReused):
			WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token was already used; its family is revoked.")
			return
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The grant is revoked, expired or unknown.")
			return
		case err != nil:
			s.serverError(w, r, "store the refresh token", err)
			return
		}
	}
	err := s.st.TouchConsent(ctx, rc.Principal, cl.ID, now)
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		s.log.InfoContext(ctx, "oauth: grant refused", "client_id", cl.ID, "err", errNoConsent)
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The user's consent to this client is revoked.")
		return
	case err != nil:
		s.serverError(w, r, "touch the consent", err)
		return
	}
	sub, err := parseSubject(rc.Subject)
	if err != nil {
		s.serverError(w, r, "read the grant's subject", err)
		return
	}
	tok, err := s.broker.Mint(ctx, broker.Grant{
		Subject: rc.Principal, Audience: rc.Resource, ClientID: cl.ID, Tenant: sub.Tenant, Groups: sub.Groups,
	})
	if err != nil {
		s.serverError(w, r, "mint the access token", err)
		return
	}
	err = s.record(ctx, audit.Entry{Kind: audit.KindOAuthTokenIssued, Principal: rc.Principal, ClientID: cl.ID, TokenJTI: tok.ID},
		map[string]any{"grant": grant, "resource": rc.Resource, "family": rc.Family})
	if err != nil {
		s.serverError(w, r, "audit the token", err)
		return
	}
	body, _ := json.Marshal(tokenResponse{ // strings and a number: cannot fail
		AccessToken: tok.Raw, TokenType: "Bearer", ExpiresIn: max(int64(tok.Expiry.Sub(now)/time.Second), 1),
		RefreshToken: refresh, Scope: rc.Scope,
	})
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	noStore(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

package oauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// maxTokenForm bounds a token or revocation request's body.
const maxTokenForm = 16 << 10

// refreshContext is the grant a refresh token family carries on: from
// the authorization code that started it, or from the stored token being
// rotated. A refresh token itself is 256 random bits (NewSecret), or,
// rotated from Rotated while repeats are allowed, an HMAC of it and a
// salt (refreshSuccessor); it is stored by its hash: the store is the
// only authority on it.
type refreshContext struct {
	// Rotated is the refresh token being rotated, as the client sent it;
	// empty for a code.
	Rotated   string
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
// the authorization_code and refresh_token grants, and of the token
// exchange (exchange.go) when it is on. Another grant type is answered
// with the ones the metadata announces.
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
		WriteError(w, http.StatusBadRequest, CodeUnsupportedGrantType, "The grant types are "+strings.Join(s.metadata.GrantTypesSupported, ", ")+".")
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

// codeGrant redeems an authorization code (RFC 6749 §4.1.3, RFC 7636
// §4.5) and answers it, in one store transaction (see issue). The code
// is used up by the first attempt, whatever its outcome, so a code tried
// with a wrong verifier cannot be tried again.
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
	// A malformed verifier is refused as such, before the code is read:
	// it matches no challenge, so the code is not used up by it.
	if e := (*Error)(nil); errors.As(CheckVerifier(verifier), &e) {
		e.Write(w)
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
	hash := HashSecret(code)
	ac, err := s.st.GetAuthorizationCode(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code is unknown.")
		return
	case err != nil:
		s.serverError(w, r, "read the authorization code", err)
		return
	}
	var refusal *Error
	switch {
	case ac.ClientID != cl.ID:
		refusal = newError(CodeInvalidGrant, "The authorization code was issued to another client.", false)
	case ac.RedirectURI != redirectURI:
		refusal = newError(CodeInvalidGrant, "redirect_uri differs from the authorization request's.", false)
	case !VerifyPKCE(verifier, ac.CodeChallenge):
		refusal = newError(CodeInvalidGrant, "code_verifier does not match the code challenge.", false)
	case resource != "" && resource != ac.Resource:
		refusal = newError(CodeInvalidTarget, "resource differs from the authorization request's.", false)
	default:
		refusal = s.admitted(ctx, ac.Principal, cl.ID, GrantAuthorizationCode, "")
	}
	family := randomText(16)
	var out issued
	var g *store.TokenGrant
	if refusal == nil {
		// The code's grant is immutable: what was read is what the
		// transaction redeems, if it still may.
		grant, err := s.issue(ctx, cl, refreshContext{
			Family: family, ClientID: cl.ID, Principal: ac.Principal, Subject: ac.Subject,
			Resource: ac.Resource, Scope: ac.Scope, FamilyEnd: now.Add(s.refreshAbs),
		}, GrantAuthorizationCode, now, &out)
		switch {
		case errors.Is(err, broker.ErrBadGrant):
			s.log.InfoContext(ctx, "oauth: grant refused", "client_id", cl.ID, "err", err)
			refusal = errUnfitGrant()
		case err != nil:
			s.serverError(w, r, "answer the authorization code grant", err)
			return
		default:
			g = &grant
		}
	}
	// A refused request redeems the code with no grant: it is used up by
	// the first attempt all the same.
	ac, err = s.st.RedeemAuthorizationCode(ctx, hash, family, now, g)
	if err == nil && refusal != nil {
		refusal.Write(w)
		return
	}
	switch {
	case err == nil:
		s.writeTokens(w, now, out)
	case errors.Is(err, store.ErrNotFound) && ac.UsedAt.IsZero():
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code is unknown.")
	case errors.Is(err, store.ErrReused) && ac.IssuedAt.IsZero():
		// Presented again after a first presentation that was refused:
		// nothing was issued, so nothing is revoked or replayed.
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code was already presented, and refused: start the sign-in again.")
	case errors.Is(err, store.ErrReused):
		// A replay: the store revoked what the code issued.
		if err := s.record(ctx, audit.Entry{Kind: audit.KindOAuthCodeReplayed, Principal: ac.Principal, ClientID: ac.ClientID},
			map[string]any{"family": ac.FamilyID, "presented_by": cl.ID}); err != nil {
			s.log.ErrorContext(ctx, "oauth: audit a code replay", "err", err)
		}
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code was already used; the tokens it issued are revoked.")
	case errors.Is(err, store.ErrConflict) && ac.UsedAt.IsZero():
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The authorization code has expired.")
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		s.log.InfoContext(ctx, "oauth: grant refused", "client_id", cl.ID, "err", errNoConsent)
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The client or the user's consent to it is revoked.")
	default:
		s.serverError(w, r, "answer the authorization code grant", err)
	}
}

// refreshGrant rotates a refresh token (RFC 6749 §6, OAuth 2.1 §4.3.1)
// and answers it, in one store transaction (see issue): the old token is
// used up, a new one of its family issued with the access token. A token
// presented again after its rotation revokes the family, unless it is a
// repeat (ServerOptions.RefreshReuseInterval): then the same next token
// is answered again, with a new access token. A request that
// does not match the token (another client, resource or scope) uses
// nothing up.
func (s *Server) refreshGrant(w http.ResponseWriter, r *http.Request, cl store.OAuthClient, form url.Values) {
	ctx := r.Context()
	raw := form.Get("refresh_token")
	if raw == "" {
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "refresh_token is required.")
		return
	}
	var resource, scope string
	if form.Has("resource") {
		var err error
		if resource, err = CheckResource(form["resource"]); err != nil {
			WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource must be an absolute URI without fragment.")
			return
		}
	}
	if form.Has("scope") {
		var err error
		if scope, err = parseScope(form.Get("scope")); err != nil {
			WriteError(w, http.StatusBadRequest, CodeInvalidScope, "scope may only be the refresh token's.")
			return
		}
	}
	if !slices.Contains(cl.GrantTypes, GrantRefreshToken) {
		WriteError(w, http.StatusBadRequest, CodeUnauthorizedClient, "The client is not registered for the refresh_token grant.")
		return
	}
	hash := HashSecret(raw)
	old, err := s.st.GetRefreshToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token is unknown or expired.")
		return
	case err != nil:
		s.serverError(w, r, "read the refresh token", err)
		return
	case old.ClientID != cl.ID:
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token was issued to another client.")
		return
	case resource != "" && resource != old.Resource:
		WriteError(w, http.StatusBadRequest, CodeInvalidTarget, "resource differs from the one the refresh token is for.")
		return
	case scope != "" && scope != old.Scope:
		WriteError(w, http.StatusBadRequest, CodeInvalidScope, "scope may only be the refresh token's.")
		return
	}
	if e := s.admitted(ctx, old.Principal, cl.ID, GrantRefreshToken, old.FamilyID); e != nil {
		// Nothing is used up: the token stays as it was, refused while
		// the person is not admitted.
		e.Write(w)
		return
	}
	now := s.clock()
	var out issued
	// A token's grant is immutable: what was read is what the rotation
	// carries on, if it still may.
	g, err := s.issue(ctx, cl, refreshContext{
		Rotated: raw, Family: old.FamilyID, ClientID: old.ClientID, Principal: old.Principal, Subject: old.Subject,
		Resource: old.Resource, Scope: old.Scope, FamilyEnd: old.FamilyExpiresAt,
	}, GrantRefreshToken, now, &out)
	switch {
	case errors.Is(err, broker.ErrBadGrant):
		// Nothing is used up: the token stays as it was, and so refused.
		s.log.InfoContext(ctx, "oauth: grant refused", "client_id", cl.ID, "err", err)
		errUnfitGrant().Write(w)
		return
	case err != nil:
		s.serverError(w, r, "answer the refresh token grant", err)
		return
	}
	old, err = s.st.RotateRefreshToken(ctx, hash, now, g)
	switch {
	case err == nil && g.Refresh != nil && old.SuccessorHash != g.Refresh.TokenHash:
		// A repeat: the successor the rotation answered, again.
		var ok bool
		if out.refresh, ok = s.successorOf(raw, old); !ok {
			s.serverError(w, r, "answer a repeated refresh", errors.New("no secret of the server derives the successor stored"))
			return
		}
		s.writeTokens(w, now, out)
	case err == nil:
		s.writeTokens(w, now, out)
	case errors.Is(err, store.ErrReused):
		if aerr := s.record(ctx, audit.Entry{Kind: audit.KindOAuthRefreshReused, Principal: old.Principal, ClientID: old.ClientID},
			map[string]any{"family": old.FamilyID}); aerr != nil {
			s.log.ErrorContext(ctx, "oauth: audit a refresh token reuse", "err", aerr)
		}
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The refresh token was already used; its family is revoked.")
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusBadRequest, CodeInvalidGrant, "The grant is revoked, expired or unknown.")
	default:
		s.serverError(w, r, "answer the refresh token grant", err)
	}
}

// successorOf derives again the successor of raw, rotated as old says,
// under the Secret or else a previous one; false when none derives the
// token old names.
func (s *Server) successorOf(raw string, old store.RefreshToken) (string, bool) {
	for _, key := range append([][]byte{s.successorKey}, s.previousSuccessorKeys...) {
		if next := refreshSuccessor(key, raw, old.SuccessorSalt); HashSecret(next) == old.SuccessorHash {
			return next, true
		}
	}
	return "", false
}

// refreshSuccessor is the refresh token a rotation of raw issues, with
// salt: an HMAC of both under key, base64url as NewSecret's. The store
// keeps the salt on the rotated token only while a repeat may need it,
// and the token by its hash only: who has the database and the key still
// needs the rotated token to derive its successor.
func refreshSuccessor(key []byte, raw, salt string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(raw))
	m.Write([]byte{0})
	m.Write([]byte(salt))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
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

// errUnfitGrant is the invalid_grant of a grant whose person an access
// token cannot carry: the broker refuses a tenant or groups it would have
// to cut (broker.ErrBadGrant), which could change a policy's decision.
func errUnfitGrant() *Error {
	return newError(CodeInvalidGrant, "The person's tenant or groups do not fit in an access token (at most "+
		strconv.Itoa(broker.MaxGroups)+" groups of at most "+strconv.Itoa(broker.MaxClaimLength)+" bytes).", false)
}

// admitted refuses a grant of principal, redeemed by client, when the
// API's identity configuration no longer lets the person in
// (ServerOptions.Admits): their tenant was taken off the allow-list, or
// the issuer replaced. The refusal is logged and recorded auth_failed,
// with the grant type and, for a refresh token, its family; it says
// nothing of the configuration to the client but that the account is not
// allowed.
func (s *Server) admitted(ctx context.Context, principal, client, grant, family string) *Error {
	err := s.admits(principal)
	if err == nil {
		return nil
	}
	s.log.InfoContext(ctx, "oauth: grant refused: the person is not admitted", "client_id", client, "grant", grant, "err", err)
	details := map[string]any{"endpoint": "token", "grant": grant, "reason": "principal_not_admitted"}
	if family != "" {
		details["family"] = family
	}
	if aerr := s.record(ctx, audit.Entry{Kind: audit.KindAuthFailed, Principal: principal, ClientID: client}, details); aerr != nil {
		s.log.ErrorContext(ctx, "oauth: audit a refused grant", "err", aerr)
	}
	return newError(CodeInvalidGrant, "This account, or its organisation, is no longer allowed on this server.", false)
}

// errNoConsent reports that the user's consent to the client is gone.
var errNoConsent = errors.New("oauth: the consent is revoked or gone")

// issued is what a grant answers: the access token minted, and the
// refresh token issued with it, if any.
type issued struct {
	token   broker.Token
	refresh string
	scope   string
}

// issue prepares the answer of a grant whose code or refresh token was
// read good: it mints the access token of rc for cl into out and returns
// what the store's transaction of the grant writes with it: the next
// refresh token (for a client registered for the refresh_token grant),
// the consent's use (it must still stand) and the oauth_token_issued
// record. All of it commits or none, so no token is answered without its
// record, and a revocation that commits first is seen. The mint comes
// before the transaction, which holds locks, and may need a write of its
// own (a signing key's rotation). An error is a server failure, but for
// broker.ErrBadGrant: the grant's person does not fit in a token, which
// the caller refuses (errUnfitGrant).
func (s *Server) issue(ctx context.Context, cl store.OAuthClient, rc refreshContext, grant string, now time.Time, out *issued) (store.TokenGrant, error) {
	sub, err := parseSubject(rc.Subject)
	if err != nil {
		return store.TokenGrant{}, fmt.Errorf("read the grant's subject: %w", err)
	}
	tok, err := s.broker.Mint(ctx, broker.Grant{
		Subject: rc.Principal, Audience: rc.Resource, ClientID: cl.ID, Tenant: sub.Tenant, Groups: sub.Groups,
		// The family names the grant: its revocation (a replayed code,
		// a reused refresh token, a revocation) refuses the token at the
		// MCP endpoint (broker.VerifierOptions.GrantRevoked).
		GrantID: rc.Family,
	})
	if err != nil {
		return store.TokenGrant{}, fmt.Errorf("mint the access token: %w", err)
	}
	entry := audit.Entry{Kind: audit.KindOAuthTokenIssued, Principal: rc.Principal, ClientID: cl.ID, TokenJTI: tok.ID, At: now}
	details := map[string]any{"grant": grant, "resource": rc.Resource, "family": rc.Family}
	build, err := s.builder(entry, details)
	if err != nil {
		return store.TokenGrant{}, fmt.Errorf("audit the token: %w", err)
	}
	*out = issued{token: tok, scope: rc.Scope}
	g := store.TokenGrant{Consent: true, Audit: build}
	if !slices.Contains(cl.GrantTypes, GrantRefreshToken) {
		return g, nil
	}
	if rc.Rotated == "" || s.reuse == 0 {
		out.refresh = NewSecret()
	} else {
		// A rotation that may be repeated for s.reuse
		// (ServerOptions.RefreshReuseInterval): its next token derived
		// from the rotated one and a new salt, so that a repeat can answer
		// it again, and the record a repeat appends instead of g's own.
		g.RepeatSalt, g.RepeatUntil = randomText(16), now.Add(s.reuse)
		out.refresh = refreshSuccessor(s.successorKey, rc.Rotated, g.RepeatSalt)
		details["repeat"] = true
		if g.RepeatAudit, err = s.builder(entry, details); err != nil {
			return store.TokenGrant{}, fmt.Errorf("audit the token: %w", err)
		}
	}
	g.Refresh = &store.RefreshToken{
		TokenHash: HashSecret(out.refresh), ExpiresAt: s.refreshEnd(now, rc), FamilyExpiresAt: rc.FamilyEnd,
	}
	return g, nil
}

// writeTokens answers a grant with what it issued (RFC 6749 §5.1).
func (s *Server) writeTokens(w http.ResponseWriter, now time.Time, out issued) {
	body, _ := json.Marshal(tokenResponse{ // strings and a number: cannot fail
		AccessToken: out.token.Raw, TokenType: "Bearer", ExpiresIn: max(int64(out.token.Expiry.Sub(now)/time.Second), 1),
		RefreshToken: out.refresh, Scope: out.scope,
	})
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	noStore(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

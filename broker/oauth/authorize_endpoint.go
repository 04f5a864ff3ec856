package oauth

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// maxConsentForm bounds the consent form's body: a sealed request, a CSRF
// token and a decision.
const maxConsentForm = 16 << 10

// serveAuthorize is the authorization endpoint: GET (and HEAD) starts an
// authorization request, POST is the consent page's answer.
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.authorize(w, r, r.URL.RawQuery, http.StatusFound)
	case http.MethodPost:
		s.serveConsent(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		WriteError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "The authorization endpoint takes GET, and POST from its consent page.")
	}
}

// pendingRequest is an authorization request waiting for its browser's
// sign-in, sealed into a cookie of that browser: its id names the cookie
// and is the continue path's only parameter, so that the path the sign-in
// returns to stays short whatever the request holds.
type pendingRequest struct {
	ID string `json:"i"`
	// Params are the request's parameters, as JSON keeps them: most
	// characters as they are, where the query escaped many in three.
	Params url.Values `json:"p"`
}

// pendingCookiePrefix starts the name of a pending request's cookie; its
// id follows, so that requests of several clients can wait at once.
const pendingCookiePrefix = "usher_oauth_pending_"

// maxPendingCookie bounds a pending request's cookie: browsers keep
// cookies of up to 4 KiB, name and attributes included.
const maxPendingCookie = 3800

// serveContinue resumes an authorization request after the user signed
// in: its id parameter names the cookie authorize sealed it into, which
// only this browser has. The cookie is deleted: a request continues once.
// After a refused sign-in (ParamSignIn=SignInRefused) the request is
// refused to its client with access_denied (RFC 6749 §4.1.2.1), which
// would otherwise wait for an answer that never comes.
func (s *Server) serveContinue(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		WriteError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "Use GET.")
		return
	}
	id := r.URL.Query().Get("id")
	var p pendingRequest
	c, err := r.Cookie(pendingCookiePrefix + id)
	if err == nil && validPendingID(id) {
		s.setPendingCookie(w, r, id, "", -1)
		err = s.pending.Open(c.Value, s.clock(), &p)
	}
	if err != nil || !validPendingID(id) || p.ID != id {
		showError(w, r, newError(CodeInvalidRequest, "This authorization request has expired, was used, or was started in another browser. Start again from your application.", false))
		return
	}
	if r.URL.Query().Get(ParamSignIn) == SignInRefused {
		a, _, perr := s.checkAuthorize(r.Context(), p.Params)
		if perr == nil {
			perr = newError(CodeAccessDenied, "The sign-in was refused: this account may not use Usher.", true)
		}
		s.refuseAuthorize(w, r, a, perr, http.StatusFound)
		return
	}
	s.authorize(w, r, p.Params.Encode(), http.StatusFound)
}

// validPendingID reports whether id is one newPendingID could make.
func validPendingID(id string) bool {
	return len(id) == 16 && !strings.ContainsFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
	})
}

// setPendingCookie sets (maxAge > 0) or deletes (maxAge < 0) the cookie of
// the pending request id, scoped to the authorization endpoint's paths.
func (s *Server) setPendingCookie(w http.ResponseWriter, r *http.Request, id, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: pendingCookiePrefix + id, Value: value, Path: s.basePath() + PathAuthorize,
		MaxAge: maxAge, HttpOnly: true, Secure: strings.HasPrefix(s.issuer, "https://"),
		// Lax: the browser comes back from the sign-in by a top-level
		// navigation, which may start at the identity provider's site.
		SameSite: http.SameSiteLaxMode,
	})
}

// authorize handles the authorization request whose query is rawQuery:
// refused, sent to sign in, answered with a code at once (a remembered
// consent), or shown the consent page.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, rawQuery string, redirect int) {
	ctx := r.Context()
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		showError(w, r, newError(CodeInvalidRequest, "The authorization request's query is malformed.", false))
		return
	}
	a, cl, perr := s.checkAuthorize(ctx, q)
	if perr != nil {
		s.refuseAuthorize(w, r, a, perr, redirect)
		return
	}
	p, session, ok, err := s.whoIsSignedIn(r)
	if err != nil {
		s.log.ErrorContext(ctx, "oauth: who is signed in", "err", err)
		showError(w, r, &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "Usher could not tell who is signed in; try again."})
		return
	}
	if ok && len(p.Groups) > broker.MaxGroups {
		// No access token can carry this person: say so now, not after
		// the consent, at the token endpoint.
		s.refuseAuthorize(w, r, a, newError(CodeAccessDenied, fmt.Sprintf(
			"Your account is in %d groups, more than the %d an access token for Usher carries; ask your administrator.",
			len(p.Groups), broker.MaxGroups), true), redirect)
		return
	}
	if ok {
		c, err := s.st.GetConsent(ctx, p.ID(), cl.ID)
		switch {
		case err == nil && c.RevokedAt.IsZero() && c.Scope == a.Scope && c.Resource == a.Resource:
			s.issueCode(w, r, a, cl, p, redirect)
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			s.log.ErrorContext(ctx, "oauth: read the consent", "err", err)
			s.refuseAuthorize(w, r, a, authorizeFailed(err, true), redirect)
			return
		}
	}
	if !ok {
		// The request waits for the sign-in in a sealed cookie of this
		// browser: any replica can take it up, and nobody can change it
		// meanwhile.
		id := randomText(12)
		sealed, err := s.pending.Seal(pendingRequest{ID: id, Params: q}, s.clock().Add(pendingLifetime))
		if err != nil {
			s.serverError(w, r, "seal the pending request", err)
			return
		}
		if len(sealed) > maxPendingCookie {
			s.refuseAuthorize(w, r, a, newError(CodeInvalidRequest, "The authorization request is too large to wait for the sign-in; shorten its state.", true), redirect)
			return
		}
		s.setPendingCookie(w, r, id, sealed, int(pendingLifetime/time.Second))
		noStore(w)
		next := s.basePath() + PathAuthorizeContinue + "?id=" + id
		http.Redirect(w, r, s.loginURL(next, next+"&"+ParamSignIn+"="+SignInRefused), http.StatusFound)
		return
	}
	// The request waits for the consent in the form, sealed, with an id
	// that makes its answer single-use (see consentCode).
	sealed, err := s.pending.Seal(pendingRequest{ID: randomText(12), Params: q}, s.clock().Add(pendingLifetime))
	if err != nil {
		s.serverError(w, r, "seal the pending request", err)
		return
	}
	err = RenderConsent(w, ConsentView{
		ClientName:     cl.Name,
		ClientID:       cl.ID,
		ClientKind:     string(cl.Kind),
		RegisteredAt:   cl.CreatedAt,
		RegisteredFrom: cl.RegisteredBy,
		RedirectURI:    a.RedirectURI,
		Scopes:         strings.Fields(a.Scope),
		Resource:       a.Resource,
		User:           cmp.Or(p.Name, p.Email),
		Theme:          s.theme(ctx, p.ID()),
		Action:         s.basePath() + PathAuthorize,
		CSRFToken:      s.csrfToken(p.ID(), session, sealed),
		RequestID:      sealed,
	})
	if err != nil {
		s.serverError(w, r, "render the consent page", err)
	}
}

// theme is the colour theme the principal chose in their settings; "" (the
// device's) when they chose none or it cannot be read: the page shows
// either way.
func (s *Server) theme(ctx context.Context, principal string) string {
	st, err := s.st.GetSettings(ctx, principal)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.log.WarnContext(ctx, "oauth: read the person's theme", "err", err)
		}
		return ""
	}
	return st.Theme
}

// serveConsent is the consent page's answer: same-origin only, with the
// CSRF token of the pending request and the user signed in now.
func (s *Server) serveConsent(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !httpx.SameOrigin(r, s.issuer) {
		showError(w, r, &Error{Status: http.StatusForbidden, Code: CodeAccessDenied, Description: "The consent form must be posted from Usher's own page."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxConsentForm)
	if err := r.ParseForm(); err != nil {
		showError(w, r, newError(CodeInvalidRequest, "The consent form could not be read.", false))
		return
	}
	form := r.PostForm
	request, _ := single(form, FormRequest)
	token, _ := single(form, FormCSRFToken)
	decision, _ := single(form, FormDecision)
	var pr pendingRequest
	if err := s.pending.Open(request, s.clock(), &pr); err != nil || !validPendingID(pr.ID) {
		showError(w, r, newError(CodeInvalidRequest, "This authorization request has expired or is not valid. Start again from your application.", false))
		return
	}
	p, session, ok, err := s.whoIsSignedIn(r)
	switch {
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: who is signed in", "err", err)
		showError(w, r, &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "Usher could not tell who is signed in; try again."})
		return
	case !ok || !s.checkCSRF(p.ID(), session, request, token):
		// A missing or wrong token, or a token shown to someone else than
		// who is signed in now, or in another browser session.
		showError(w, r, &Error{Status: http.StatusForbidden, Code: CodeAccessDenied, Description: "The consent form is not valid for this request, this user or this browser session. Start again from your application."})
		return
	}
	q := pr.Params
	// Check the request again: the client may have been revoked, or its
	// document changed, while the page was open.
	a, cl, perr := s.checkAuthorize(ctx, q)
	if perr != nil {
		s.refuseAuthorize(w, r, a, perr, http.StatusSeeOther)
		return
	}
	if decision != DecisionApprove && decision != DecisionDeny {
		showError(w, r, newError(CodeInvalidRequest, "The consent form has no decision.", false))
		return
	}
	// The form is answered once, whichever way: the answer is recorded
	// before it takes effect, and a second post — Approve after Deny, a
	// double click, a replay of the captured form — is refused.
	now := s.clock()
	_, err = s.st.AnswerConsentForm(ctx, store.ConsentAnswer{
		RequestHash: HashSecret(pr.ID), Decision: decision, AnsweredAt: now, ExpiresAt: now.Add(pendingLifetime),
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		showError(w, r, errAnsweredBefore())
		return
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: record the consent form's answer", "err", err)
		s.refuseAuthorize(w, r, a, authorizeFailed(err, true), http.StatusSeeOther)
		return
	}
	if decision == DecisionDeny {
		s.refuseAuthorize(w, r, a, newError(CodeAccessDenied, "The user denied the request.", true), http.StatusSeeOther)
		return
	}
	if _, err := s.st.PutConsent(ctx, store.Consent{Principal: p.ID(), ClientID: cl.ID, Scope: a.Scope, Resource: a.Resource, UpdatedAt: now}); err != nil {
		s.log.ErrorContext(ctx, "oauth: store the consent", "err", err)
		s.refuseAuthorize(w, r, a, authorizeFailed(err, true), http.StatusSeeOther)
		return
	}
	code := s.consentCode(pr.ID)
	err = s.storeCode(ctx, code, a, cl, p)
	switch {
	case errors.Is(err, store.ErrConflict):
		// The form was answered before: its code exists already.
		showError(w, r, errAnsweredBefore())
		return
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: store the authorization code", "err", err)
		s.refuseAuthorize(w, r, a, authorizeFailed(err, true), http.StatusSeeOther)
		return
	}
	err = s.record(ctx, audit.Entry{Kind: audit.KindOAuthConsentGiven, Principal: p.ID(), ClientID: cl.ID},
		map[string]any{"scope": a.Scope, "resource": a.Resource, "redirect_uri": a.RedirectURI})
	if err != nil {
		s.log.ErrorContext(ctx, "oauth: audit the consent", "err", err)
		s.refuseAuthorize(w, r, a, authorizeFailed(err, true), http.StatusSeeOther)
		return
	}
	noStore(w)
	http.Redirect(w, r, a.Redirect(code, s.issuer), http.StatusSeeOther)
}

// errAnsweredBefore refuses a consent form posted again after its answer.
func errAnsweredBefore() *Error {
	return newError(CodeInvalidRequest,
		"This consent form was answered already; its answer went to the application. Start again from your application if it did not sign in.", false)
}

// whoIsSignedIn asks ServerOptions.SignedIn who is signed in to r's
// browser, in which session. A person signed in without a session is an
// error: the consent form could not be bound to the browser.
func (s *Server) whoIsSignedIn(r *http.Request) (identity.Principal, string, bool, error) {
	p, session, ok, err := s.signedIn(r)
	switch {
	case err != nil || !ok:
		return identity.Principal{}, "", false, err
	case session == "":
		return identity.Principal{}, "", false, errors.New("signed in, without a session")
	}
	return p, session, true, nil
}

// checkAuthorize parses an authorization request and resolves its client:
// an error is redirectable only once the client and its redirect URI are
// known to match (RFC 6749 §4.1.2.1).
func (s *Server) checkAuthorize(ctx context.Context, q url.Values) (AuthorizeRequest, store.OAuthClient, *Error) {
	a, err := ParseAuthorize(q)
	var perr *Error
	if err != nil && (!errors.As(err, &perr) || !perr.Redirectable) {
		if perr == nil {
			perr = newError(CodeInvalidRequest, "The authorization request is malformed.", false)
		}
		return a, store.OAuthClient{}, perr
	}
	cl, cerr := s.resolveClient(ctx, a.ClientID)
	if cerr != nil {
		return a, cl, cerr
	}
	if !MatchRedirect(cl.RedirectURIs, a.RedirectURI, native(cl, a.RedirectURI)) {
		return a, cl, newError(CodeInvalidRequest, "redirect_uri is not one of the client's registered redirect URIs.", false)
	}
	switch {
	case perr != nil:
		return a, cl, perr
	case !slices.Contains(cl.GrantTypes, GrantAuthorizationCode):
		return a, cl, newError(CodeUnauthorizedClient, "The client is not registered for the authorization_code grant.", true)
	case cl.AuthMethod != AuthNone && cl.AuthMethod != AuthClientSecretBasic && cl.AuthMethod != AuthPrivateKeyJWT:
		return a, cl, newError(CodeUnauthorizedClient, "The client's token_endpoint_auth_method is not supported by this server; use none, client_secret_basic or private_key_jwt.", true)
	case !s.allowedResource(a.Resource):
		return a, cl, newError(CodeInvalidTarget, "resource is not an MCP server of this authorization server.", true)
	}
	return a, cl, nil
}

// native reports whether a client's redirect to uri is a native app's
// loopback redirect, which may take any port (RFC 8252 §7.3): a public
// client (no secret) redirecting to a loopback host.
func native(cl store.OAuthClient, uri string) bool {
	if cl.SecretHash != "" || cl.AuthMethod != AuthNone {
		return false
	}
	u, err := url.Parse(uri)
	return err == nil && strings.EqualFold(u.Scheme, "http") && isLoopbackName(u.Hostname())
}

// resolveClient finds the client of an authorization request: in the
// store, or — an https client_id, with Clients set — by its metadata
// document, fetched (the Fetcher caches it) and stored with
// PutMetadataClient, so that a changed document is seen and the token
// endpoint knows the client. A revoked client is refused. The errors are
// not redirectable: the client is in question.
func (s *Server) resolveClient(ctx context.Context, id string) (store.OAuthClient, *Error) {
	cl, err := s.st.GetOAuthClient(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: read the client", "err", err)
		return cl, authorizeFailed(err, false)
	case cl.Kind != store.OAuthClientMetadataDocument:
		if s.retired(cl) {
			return store.OAuthClient{}, newError(CodeInvalidRequest, "Unknown client_id.", false)
		}
		if !cl.RevokedAt.IsZero() {
			return cl, newError(CodeUnauthorizedClient, "This application's access to Usher has been revoked.", false)
		}
		return cl, nil
	}
	if s.clients == nil || !strings.Contains(id, "://") {
		return store.OAuthClient{}, newError(CodeInvalidRequest, "Unknown client_id.", false)
	}
	if err == nil && !cl.RevokedAt.IsZero() {
		// No need to fetch a document Usher will not use.
		return cl, newError(CodeUnauthorizedClient, "This application's access to Usher has been revoked.", false)
	}
	doc, err := s.clients.Fetch(ctx, id)
	if err != nil {
		var ce *clientmeta.Error
		if errors.As(err, &ce) {
			s.log.InfoContext(ctx, "oauth: client metadata document refused", "client_id", id, "reason", ce.Reason, "cause", ce.Cause)
			return store.OAuthClient{}, newError(CodeInvalidRequest, "The client's metadata document was refused: "+ce.Reason+".", false)
		}
		s.log.ErrorContext(ctx, "oauth: fetch the client metadata document", "client_id", id, "err", err)
		return store.OAuthClient{}, newError(CodeInvalidRequest, "The client's metadata document could not be fetched.", false)
	}
	cl, err = s.st.PutMetadataClient(ctx, store.OAuthClient{
		ID: doc.ClientID, Kind: store.OAuthClientMetadataDocument, Name: doc.ClientName,
		RedirectURIs: doc.RedirectURIs, GrantTypes: doc.GrantTypes, AuthMethod: doc.TokenEndpointAuthMethod,
		Metadata: doc.Raw, CreatedAt: s.clock(), UpdatedAt: s.clock(), // an update keeps the CreatedAt stored
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		return cl, newError(CodeInvalidRequest, "Unknown client_id.", false)
	case err != nil:
		s.log.ErrorContext(ctx, "oauth: store the metadata document's client", "err", err)
		return cl, authorizeFailed(err, false)
	case !cl.RevokedAt.IsZero():
		return cl, newError(CodeUnauthorizedClient, "This application's access to Usher has been revoked.", false)
	}
	return cl, nil
}

// issueCode issues an authorization code for a, approved by p, and
// redirects the browser to the client with it, its state and iss.
func (s *Server) issueCode(w http.ResponseWriter, r *http.Request, a AuthorizeRequest, cl store.OAuthClient, p identity.Principal, redirect int) {
	code := NewSecret()
	if err := s.storeCode(r.Context(), code, a, cl, p); err != nil {
		s.log.ErrorContext(r.Context(), "oauth: store the authorization code", "err", err)
		s.refuseAuthorize(w, r, a, authorizeFailed(err, true), redirect)
		return
	}
	noStore(w)
	http.Redirect(w, r, a.Redirect(code, s.issuer), redirect)
}

// storeCode stores the authorization code code of the request a, for the
// client cl and the person p; ErrConflict when it exists already.
func (s *Server) storeCode(ctx context.Context, code string, a AuthorizeRequest, cl store.OAuthClient, p identity.Principal) error {
	now := s.clock()
	return s.st.CreateAuthorizationCode(ctx, store.AuthorizationCode{
		CodeHash: HashSecret(code), ClientID: cl.ID, Principal: p.ID(), Subject: subjectOf(p),
		RedirectURI: a.RedirectURI, CodeChallenge: a.CodeChallenge, Resource: a.Resource, Scope: a.Scope,
		CreatedAt: now, ExpiresAt: now.Add(s.codeLife),
	})
}

// refuseAuthorize answers a refused authorization request: to the client's
// redirect URI when e is redirectable, else to the user.
func (s *Server) refuseAuthorize(w http.ResponseWriter, r *http.Request, a AuthorizeRequest, e *Error, redirect int) {
	if !e.Redirectable {
		showError(w, r, e)
		return
	}
	noStore(w)
	http.Redirect(w, r, a.ErrorRedirect(e, s.issuer), redirect)
}

// authorizeFailed is the error of an authorization request, or a consent
// form, that Usher could not answer because of err: temporarily_unavailable
// (503 when shown, with a Retry-After) when the database is out of reach
// for a while — RFC 6749 §4.1.2.1's code for what a redirect cannot carry
// as a 503 —, else server_error (500). Neither tells what err says.
func authorizeFailed(err error, redirectable bool) *Error {
	if httpx.Unavailable(err) {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeTemporarilyUnavailable,
			Description: "Usher cannot reach its database just now; try again in a moment.", Redirectable: redirectable}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeServerError,
		Description: "The authorization server failed; try again.", Redirectable: redirectable}
}

// showError answers an authorization request, or a consent form, whose
// refusal must not go to the client's redirect URI (RFC 6749 §4.1.2.1: the
// client or the redirect URI is in question, or the form itself is): with
// e's status (400 when it has none), in the RFC 6749 §5.2 error JSON that
// every OAuth endpoint answers with, or — to a browser, whose request
// accepts text/html, and which is the person §4.1.2.1 says to inform — a
// page saying the same (refused.html). Never cached, never framed.
func showError(w http.ResponseWriter, r *http.Request, e *Error) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", httpx.RetryAfter)
	}
	if !acceptsHTML(r) {
		e.Write(w)
		return
	}
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusBadRequest
	}
	var buf bytes.Buffer
	code := errorText(e.Code)
	if code == "" {
		code = CodeServerError
	}
	// Strings only: the template cannot fail on them.
	_ = refusedTemplate.Execute(&buf, struct{ Code, Description string }{code, errorText(e.Description)})
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	noStore(w)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

//go:embed refused.html
var refusedHTML string

var refusedTemplate = template.Must(template.New("refused").Parse(refusedHTML))

// acceptsHTML reports whether r's Accept header names text/html, as every
// browser's navigation and form post does; a client that names none, or
// only JSON, is a program.
func acceptsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/html") {
				return true
			}
		}
	}
	return false
}

// noStore keeps an answer out of every cache.
func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
}

// basePath is the issuer's path ("" at a host's root): the endpoints are
// under it.
func (s *Server) basePath() string {
	return s.metadata.issuerPath()
}

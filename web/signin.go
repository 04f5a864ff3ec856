package web

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// Handler serves the sign-in endpoints; mount it at "/auth/":
//
//	GET  /auth/login?return=/path   starts a sign-in: redirects to the issuer
//	     [&refused=/path]            where to go instead of the refusal page when the account is refused
//	GET  /auth/callback              ends it: sets the session cookie
//	POST /auth/logout                signs this session out, everywhere, and deletes its cookie (CSRF-protected)
//	POST /auth/logout-all            signs out every session of the caller (CSRF-protected): {"revoked": n}
//	GET  /auth/session               {"signedIn", "signInAvailable", "principal": {"id", "name"}, "expiresAt"}
//
// Every answer carries the UI's security headers.
func (s *Sessions) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/login", s.handleLogin)
	mux.HandleFunc("GET /auth/callback", s.handleCallback)
	mux.HandleFunc("POST /auth/logout", s.handleLogout)
	mux.HandleFunc("POST /auth/logout-all", s.handleLogoutAll)
	mux.HandleFunc("GET /auth/session", s.handleSession)
	for _, p := range []string{"/auth/login", "/auth/callback", "/auth/logout", "/auth/logout-all", "/auth/session"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteError(w, r, nil, httpx.ErrMethodNotAllowed)
		})
	}
	mux.HandleFunc("/auth/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, nil, httpx.ErrNotFound)
	})
	return withSecurityHeaders(mux)
}

// loginState is a sign-in in progress, sealed into the login cookie of the
// browser that started it.
type loginState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"` // PKCE code_verifier
	Return   string `json:"r"` // the local path to go back to
	// Refused is the local path to go to, instead of the refusal page,
	// when the identity provider or the allow-list refuses the account:
	// an OAuth authorization request waiting for this sign-in, which
	// tells its client so. "": the page.
	Refused string `json:"f,omitempty"`
}

// handleLogin sends the browser to the issuer with a fresh state, nonce and
// PKCE S256 challenge, which the login cookie remembers for the callback.
func (s *Sessions) handleLogin(w http.ResponseWriter, r *http.Request) {
	if s == nil {
		renderProblem(w, http.StatusServiceUnavailable, problemOff)
		return
	}
	st := loginState{
		State:    rand.Text() + rand.Text(),
		Nonce:    rand.Text() + rand.Text(),
		Verifier: oauth2.GenerateVerifier(),
		Return:   localPath(r.URL.Query().Get("return")),
	}
	if refused := r.URL.Query().Get("refused"); refused != "" && localPath(refused) == refused {
		st.Refused = refused
	}
	now := s.o.Now()
	sealed, err := s.login.Seal(st, now.Add(loginLifetime))
	if err == nil {
		err = s.cookies.set(w, r, loginCookie, sealed, loginLifetime)
	}
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "web: starting a sign-in", slog.String("error", err.Error()))
		renderProblem(w, http.StatusInternalServerError, problemInternal)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, s.oauth.AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)), http.StatusSeeOther)
}

// handleCallback completes a sign-in: the state must be the one this
// browser's login cookie holds (which is deleted whatever happens next, so
// a sign-in is attempted once); the code is redeemed with the PKCE
// verifier; the ID token must be for this client, carry this sign-in's
// nonce and name the same person as the access token; and the access token
// must pass the API's own verification.
func (s *Sessions) handleCallback(w http.ResponseWriter, r *http.Request) {
	if s == nil {
		renderProblem(w, http.StatusServiceUnavailable, problemOff)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	raw := s.cookies.get(r, loginCookie)
	s.cookies.clear(w, r, loginCookie)
	now := s.o.Now()
	var st loginState
	if raw == "" || s.login.Open(raw, now, &st) != nil {
		s.refuse(r, "no sign-in in progress in this browser, or it expired")
		renderProblem(w, http.StatusBadRequest, problemExpired)
		return
	}
	q := r.URL.Query()
	retry := problemRetry(st.Return)
	// The state comes first, for an error too: what the page shows of an
	// error must come from the issuer this browser was sent to, not from
	// a link someone else made.
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(st.State)) != 1 {
		s.refuse(r, "state does not match this browser's sign-in")
		renderProblem(w, http.StatusBadRequest, retry(problemState))
		return
	}
	if e := q.Get("error"); e != "" {
		s.refuse(r, "the issuer answered "+truncate(e, 64)+": "+truncate(q.Get("error_description"), 256))
		s.issuerRefused(w, r, st, e, q.Get("error_description"))
		return
	}
	// RFC 9207: an issuer that names itself must be ours (a template's
	// tenants name their own issuer; the ID token's is checked below).
	if iss := q.Get("iss"); iss != "" && !s.multiTenant && iss != s.o.Issuer {
		s.refuse(r, "the response names another issuer")
		renderProblem(w, http.StatusBadRequest, retry(problemState))
		return
	}
	code := q.Get("code")
	if code == "" {
		s.refuse(r, "no code")
		renderProblem(w, http.StatusBadRequest, retry(problemState))
		return
	}
	p, err := s.redeem(r.Context(), code, st)
	if err != nil {
		s.refuse(r, err.Error())
		switch {
		case errors.Is(err, identity.ErrTooManyGroups):
			if !s.toRefused(w, r, st) {
				renderProblem(w, http.StatusForbidden, problemTooManyGroups)
			}
		case errors.Is(err, identity.ErrForbidden):
			if !s.toRefused(w, r, st) {
				renderProblem(w, http.StatusForbidden, problemForbidden)
			}
		case errors.Is(err, errUnreachable):
			renderProblem(w, http.StatusBadGateway, retry(problemUnreachable))
		default:
			renderProblem(w, http.StatusBadRequest, retry(problemIssuer))
		}
		return
	}
	sess, err := s.startSession(w, r, p, now)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "web: starting a session",
			slog.String("principal", p.ID()), slog.Int("groups", len(p.Groups)), slog.String("error", err.Error()))
		renderProblem(w, http.StatusInternalServerError, problemInternal)
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: signed in",
		slog.String("principal", p.ID()), slog.String("session", sess.logID()), slog.Int64("expires", sess.Expires))
	http.Redirect(w, r, st.Return, http.StatusSeeOther)
}

// issuerRefused answers a callback that carries the issuer's error
// (RFC 6749 §4.1.2.1) instead of a code. access_denied — the account may
// not sign in to this application (Entra: AADSTS50105, a user not
// assigned to it) — goes where the sign-in's refusals go; an issuer that
// is down is worth another try; anything else is the issuer refusing
// this sign-in, usually for a setting of the application, which trying
// again would not change. The issuer's description is shown as text.
func (s *Sessions) issuerRefused(w http.ResponseWriter, r *http.Request, st loginState, code, description string) {
	detail := issuerText(description)
	switch code {
	case "access_denied":
		if !s.toRefused(w, r, st) {
			p := problemForbidden
			p.Message, p.Detail = "The sign-in service refused this account for Usher.", detail
			renderProblem(w, http.StatusForbidden, p)
		}
	case "temporarily_unavailable", "server_error":
		p := problemRetry(st.Return)(problemIssuerDown)
		p.Detail = detail
		renderProblem(w, http.StatusBadGateway, p)
	default:
		p := problemIssuerRefused
		p.Message = "The sign-in service refused the sign-in (" + issuerCode(code) + "). " + p.Message
		p.Detail = detail
		renderProblem(w, http.StatusBadRequest, p)
	}
}

// toRefused sends the browser to the sign-in's Refused path, when it has
// one, and reports whether it did.
func (s *Sessions) toRefused(w http.ResponseWriter, r *http.Request, st loginState) bool {
	if st.Refused == "" {
		return false
	}
	http.Redirect(w, r, st.Refused, http.StatusSeeOther)
	return true
}

// maxIssuerText bounds the issuer's error description a page shows: an
// Entra AADSTS message with its trace and correlation ids fits.
const maxIssuerText = 400

// issuerText is an issuer's error description as a page may show it: one
// line of printable text, at most maxIssuerText bytes.
func issuerText(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(c rune) bool {
		return unicode.IsSpace(c) || !unicode.IsPrint(c)
	}), " ")
	if len(s) <= maxIssuerText {
		return s
	}
	cut := maxIssuerText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// issuerCode is an issuer's error code as a page may show it: RFC 6749's
// error codes are a short run of printable ASCII; anything else is named
// generically.
func issuerCode(code string) string {
	if len(code) > 64 || strings.ContainsFunc(code, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return "an unknown error"
	}
	return code
}

// startSession records a session of p, signed in at now, and sets its
// cookie. The row is written first: a cookie without one signs nobody in.
func (s *Sessions) startSession(w http.ResponseWriter, r *http.Request, p identity.Principal, now time.Time) (session, error) {
	expires := now.Add(s.o.SessionLifetime)
	sess := newSession(p, now, expires)
	sealed, err := s.session.Seal(sess, expires)
	if err != nil {
		return session{}, err
	}
	if len(sealed) > maxChunks*maxChunkChars {
		return session{}, errTooLarge
	}
	if err := s.record(r.Context(), sess); err != nil {
		return session{}, err
	}
	return sess, s.cookies.set(w, r, sessionCookie, sealed, s.o.SessionLifetime)
}

// errUnreachable is a token endpoint that did not answer, or failed
// itself, as opposed to one that refused the code.
var errUnreachable = errors.New("the token endpoint is unavailable")

// exchangeError is the error of a token request that failed with err: a
// refusal when the token endpoint answered 4xx, errUnreachable when it
// did not answer or failed itself (5xx). The detail names the status and
// the OAuth error, never the body, which may be an HTML page.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	detail := "no response"
	if re.Response != nil {
		detail = re.Response.Status
	}
	if re.ErrorCode != "" {
		detail += ": " + truncate(re.ErrorCode, 64)
		if re.ErrorDescription != "" {
			detail += ": " + truncate(re.ErrorDescription, 256)
		}
	}
	if re.Response == nil || re.Response.StatusCode >= 500 {
		return fmt.Errorf("%w: it answered %s", errUnreachable, detail)
	}
	return errors.New("the token endpoint refused the code: " + detail)
}

// idClaims are the ID token claims compared with the access token's.
type idClaims struct {
	Tenant   string `json:"tid"`
	ObjectID string `json:"oid"`
}

// redeem exchanges code and returns the principal of its access token.
func (s *Sessions) redeem(ctx context.Context, code string, st loginState) (identity.Principal, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultHTTPTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, s.o.HTTPClient)
	tok, err := s.oauth.Exchange(ctx, code, oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return identity.Principal{}, fmt.Errorf("token exchange: %w", exchangeError(err))
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		return identity.Principal{}, errors.New("the token response has no id_token")
	}
	idt, err := s.idVerifier.Verify(ctx, rawID)
	if err != nil {
		return identity.Principal{}, fmt.Errorf("id token: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(st.Nonce)) != 1 {
		return identity.Principal{}, errors.New("id token: nonce does not match this sign-in")
	}
	var c idClaims
	if err := idt.Claims(&c); err != nil {
		return identity.Principal{}, fmt.Errorf("id token claims: %w", err)
	}
	if s.multiTenant && (c.Tenant == "" || idt.Issuer != strings.Replace(s.o.Issuer, identity.TenantPlaceholder, c.Tenant, 1)) {
		return identity.Principal{}, fmt.Errorf("id token: issuer %q is not the tenant's", idt.Issuer)
	}
	if idt.AccessTokenHash != "" {
		if err := idt.VerifyAccessToken(tok.AccessToken); err != nil {
			return identity.Principal{}, fmt.Errorf("id token: at_hash: %w", err)
		}
	}
	p, err := s.o.VerifyAccessToken(ctx, tok.AccessToken)
	if err != nil {
		return identity.Principal{}, fmt.Errorf("access token: %w", err)
	}
	// Both tokens must be about one person: by object id when the ID token
	// has one (Entra; "sub" is pairwise per application there), else by
	// subject.
	if cmp.Or(c.ObjectID, idt.Subject) != cmp.Or(p.ObjectID, p.Subject) || (c.Tenant != "" && c.Tenant != p.Tenant) {
		return identity.Principal{}, errors.New("the ID token and the access token name different users")
	}
	return p, nil
}

func (s *Sessions) refuse(r *http.Request, reason string) {
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: sign-in refused", slog.String("reason", reason))
}

// handleLogout signs this browser's session out: in the store, so that a
// copy of the cookie stops working on every replica, and then in the
// browser, by deleting the cookie. Cross-origin browser requests are
// refused, so no other site can sign a person out.
func (s *Sessions) handleLogout(w http.ResponseWriter, r *http.Request) {
	if s == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := s.checkOrigin(r); err != nil {
		httpx.WriteError(w, r, nil, errCrossOrigin)
		return
	}
	if sess, ok := s.current(r); ok {
		idHash := hashSessionID(sess.ID)
		if err := s.o.Store.RevokeBrowserSession(r.Context(), idHash, s.o.Now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.revokeError(w, r, err)
			return
		}
		s.checks.forget(idHash, "")
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: signed out",
			slog.String("principal", sess.principal().ID()), slog.String("session", sess.logID()))
	}
	s.cookies.clear(w, r, sessionCookie)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// handleLogoutAll signs out every session of the caller — this browser's
// and every other — and deletes this browser's cookie. The caller is a
// signed-in browser (CSRF-protected) or, with an Authorization header, a
// bearer token the API accepts, so that a person who lost a device can
// sign it out from another.
func (s *Sessions) handleLogoutAll(w http.ResponseWriter, r *http.Request) {
	if s == nil {
		unauthenticated(w, r)
		return
	}
	var principal string
	if len(r.Header.Values("Authorization")) > 0 {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || len(r.Header.Values("Authorization")) > 1 {
			unauthenticated(w, r)
			return
		}
		p, err := s.o.VerifyAccessToken(r.Context(), strings.TrimSpace(raw))
		if err != nil {
			unauthenticated(w, r)
			return
		}
		principal = p.ID()
	} else {
		sess, ok := s.cookieSession(w, r)
		if !ok {
			return
		}
		principal = sess.principal().ID()
	}
	n, err := s.o.Store.RevokeBrowserSessions(r.Context(), principal, s.o.Now())
	if err != nil {
		s.revokeError(w, r, err)
		return
	}
	s.checks.forget("", principal)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "web: signed out everywhere",
		slog.String("principal", principal), slog.Int("sessions", n))
	if s.cookies.has(r, sessionCookie) {
		s.cookies.clear(w, r, sessionCookie)
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]int{"revoked": n})
}

// sessionView is the body of GET /auth/session.
type sessionView struct {
	SignedIn        bool           `json:"signedIn"`
	SignInAvailable bool           `json:"signInAvailable"`
	Principal       *principalView `json:"principal,omitempty"`
	ExpiresAt       *time.Time     `json:"expiresAt,omitempty"`
}

type principalView struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
}

// handleSession tells the page whether this browser is signed in, and as
// whom.
func (s *Sessions) handleSession(w http.ResponseWriter, r *http.Request) {
	v := sessionView{SignInAvailable: s != nil}
	if s != nil {
		sess, ok, err := s.signedIn(r)
		if err != nil {
			s.log.LogAttrs(r.Context(), slog.LevelError, "web: checking a session failed", slog.String("error", err.Error()))
			httpx.WriteError(w, r, nil, errSessionStore)
			return
		}
		if ok {
			p := sess.principal()
			exp := time.Unix(sess.Expires, 0).UTC()
			v.SignedIn, v.Principal, v.ExpiresAt = true, &principalView{ID: p.ID(), Name: p.Name, Email: p.Email}, &exp
		} else if s.cookies.has(r, sessionCookie) {
			s.cookies.clear(w, r, sessionCookie)
		}
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// MaxReturnPath is the longest path a sign-in returns to (see LoginURL).
// It rides in the login cookie, sealed, which must stay within a browser's
// 4 KiB for a cookie; an authorization request of Usher's OAuth server,
// sealed into its continue path, fits in it.
const MaxReturnPath = 2048

// localPath returns raw when it is a path on this site, and "/" otherwise,
// so that the return address of a sign-in never leads elsewhere.
func localPath(raw string) string {
	if raw == "" || len(raw) > MaxReturnPath || raw[0] != '/' || strings.HasPrefix(raw, "//") ||
		strings.ContainsFunc(raw, func(c rune) bool { return c == '\\' || c < 0x20 || c == 0x7f }) {
		return "/"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "/auth/") {
		return "/"
	}
	return raw
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// problem is a page that says why a sign-in did not complete, with no
// detail an attacker could use: the detail is logged.
type problem struct {
	Title   string
	Message string
	Retry   string // where "Try again" leads; "" for no such link
	// Detail is what the sign-in service said, shown as its words: only
	// from an answer that carried this browser's state.
	Detail string
}

var (
	problemOff = problem{Title: "Browser sign-in is not configured",
		Message: "This Usher server accepts API tokens only. An administrator can turn on browser sign-in by setting web.client_id (see docs/web.md)."}
	problemExpired = problem{Title: "Sign-in did not complete",
		Message: "This sign-in was not started in this browser, or it took longer than 10 minutes.", Retry: "/auth/login"}
	problemState = problem{Title: "Sign-in did not complete",
		Message: "The answer from the sign-in service does not belong to the sign-in this browser started."}
	problemIssuer = problem{Title: "Sign-in did not complete",
		Message: "The sign-in service did not confirm who you are."}
	problemUnreachable = problem{Title: "Sign-in did not complete",
		Message: "The sign-in service could not be reached. Try again in a moment."}
	problemIssuerDown = problem{Title: "Sign-in did not complete",
		Message: "The sign-in service is not available just now. Try again in a moment."}
	problemIssuerRefused = problem{Title: "Sign-in did not complete",
		Message: "This is usually a setting of Usher's app registration with it, which trying again does not change: tell your administrator."}
	problemForbidden = problem{Title: "This account may not use Usher",
		Message: "You are signed in with the identity provider, but this account or its organisation is not allowed here."}
	problemTooManyGroups = problem{Title: "Usher cannot check this account's groups",
		Message: "You are in more groups than the identity provider lists in a sign-in, so Usher cannot tell which of its rules apply to you. " +
			"This is a setting of Usher's app registration, which trying again does not change: tell your administrator."}
	problemInternal = problem{Title: "Sign-in did not complete",
		Message: "Something went wrong on our side. It has been logged.", Retry: "/auth/login"}
)

// problemRetry returns a function that offers a new sign-in that returns
// to ret.
func problemRetry(ret string) func(problem) problem {
	return func(p problem) problem {
		p.Retry = "/auth/login?" + url.Values{"return": {ret}}.Encode()
		return p
	}
}

var problemPage = template.Must(template.New("problem").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · Usher</title>
<link rel="stylesheet" href="/static/app.css">
</head>
<body class="standalone">
<main class="standalone-card">
<h1>{{.Title}}</h1>
<p>{{.Message}}</p>
{{if .Detail}}<p>The sign-in service said: <q>{{.Detail}}</q></p>
{{end}}<p class="actions">{{if .Retry}}<a class="button primary" href="{{.Retry}}">Try again</a> {{end}}<a class="button" href="/">Back to Usher</a></p>
</main>
</body>
</html>
`))

func renderProblem(w http.ResponseWriter, status int, p problem) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = problemPage.Execute(w, p)
}

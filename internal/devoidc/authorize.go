package devoidc

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Parameters of an authorization request, in the order the form carries
// them. Each may appear at most once (RFC 6749 section 3.1).
var authParams = []string{
	"client_id", "redirect_uri", "response_type", "response_mode", "scope",
	"state", "nonce", "code_challenge", "code_challenge_method", "username", "groups",
}

// maxFormGroups bounds the groups a sign-in may name.
const maxFormGroups = 16

var (
	// codeChallenge is an S256 challenge: 32 bytes, base64url.
	codeChallenge = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	// opaque bounds state and nonce: printable ASCII (RFC 6749 VSCHAR).
	opaque = regexp.MustCompile(`^[\x20-\x7E]{0,512}$`)
)

// authRequest is a validated authorization request.
type authRequest struct {
	ClientID      string
	RedirectURI   string
	Scope         string // granted scopes, space-separated
	State         string
	Nonce         string
	CodeChallenge string
}

// parseAuthRequest validates an authorization request. Until client_id and
// redirect_uri are known good, errors are answered to the browser; after,
// they go to the redirect URI (RFC 6749 section 4.1.2.1).
func (p *Provider) parseAuthRequest(v url.Values) (authRequest, *oauthError) {
	bad := func(desc string) *oauthError {
		return &oauthError{status: http.StatusBadRequest, code: "invalid_request", desc: desc}
	}
	for _, name := range authParams {
		if len(v[name]) > 1 {
			return authRequest{}, bad("parameter " + name + " is repeated")
		}
	}
	req := authRequest{ClientID: v.Get("client_id"), RedirectURI: v.Get("redirect_uri")}
	if req.ClientID != p.o.ClientID {
		return authRequest{}, bad("unknown client_id")
	}
	if !p.redirectAllowed(req.RedirectURI) {
		return authRequest{}, bad("redirect_uri is not registered for this client")
	}
	redirect := func(code, desc string) *oauthError {
		return &oauthError{status: http.StatusBadRequest, code: code, desc: desc, redirect: true}
	}
	if !opaque.MatchString(v.Get("state")) {
		return req, redirect("invalid_request", "state must be printable ASCII, at most 512 characters")
	}
	req.State = v.Get("state") // from here on, errors carry the state
	if !opaque.MatchString(v.Get("nonce")) {
		return req, redirect("invalid_request", "nonce must be printable ASCII, at most 512 characters")
	}
	req.Nonce = v.Get("nonce")
	if v.Get("response_type") != "code" {
		return req, redirect("unsupported_response_type", "only response_type=code is supported")
	}
	if m := v.Get("response_mode"); m != "" && m != "query" {
		return req, redirect("invalid_request", "only response_mode=query is supported")
	}
	if v.Get("code_challenge_method") != "S256" || !codeChallenge.MatchString(v.Get("code_challenge")) {
		return req, redirect("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256")
	}
	req.CodeChallenge = v.Get("code_challenge")
	var scopes []string
	for _, s := range strings.Fields(v.Get("scope")) {
		if !slices.Contains(oidcScopes, s) && !slices.Contains(p.o.Scopes, s) {
			return req, redirect("invalid_scope", "unknown scope")
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	for _, s := range p.o.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s) // the API scopes are always granted
		}
	}
	req.Scope = strings.Join(scopes, " ")
	return req, nil
}

// authorizeForm shows the sign-in form for a valid authorization request.
func (p *Provider) authorizeForm(w http.ResponseWriter, r *http.Request) {
	req, e := p.parseAuthRequest(r.URL.Query())
	if e != nil {
		p.fail(w, r, req, e)
		return
	}
	p.renderForm(w, r, http.StatusOK, r.URL.Query(), "", "", "")
}

// authorize signs the user in and redirects with a one-time code bound to
// the client, redirect URI, PKCE challenge, nonce and scope. The request
// must come from the form itself: cross-origin posts are refused.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	if err := p.csrf.Check(r); err != nil {
		p.fail(w, r, authRequest{}, &oauthError{status: http.StatusForbidden, code: "access_denied", desc: "cross-origin sign-in refused"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.fail(w, r, authRequest{}, &oauthError{status: http.StatusBadRequest, code: "invalid_request", desc: "malformed or too large form"})
		return
	}
	req, e := p.parseAuthRequest(r.PostForm)
	if e != nil {
		p.fail(w, r, req, e)
		return
	}
	name, groupsText := r.PostForm.Get("username"), r.PostForm.Get("groups")
	user, ok := canonicalUser(name)
	if !ok {
		p.renderForm(w, r, http.StatusBadRequest, r.PostForm, name, groupsText,
			"Use 1 to 64 letters, digits, dots, underscores or hyphens, starting with a letter or digit.")
		return
	}
	groups, ok := parseGroups(groupsText)
	if !ok {
		p.renderForm(w, r, http.StatusBadRequest, r.PostForm, name, groupsText,
			"Groups: at most 16, separated by commas or spaces, each 1 to 64 letters, digits, dots, underscores or hyphens, starting with a letter or digit.")
		return
	}
	now := p.o.Now()
	code, err := p.codes.put(now, grant{
		clientID:    req.ClientID,
		redirectURI: req.RedirectURI,
		challenge:   req.CodeChallenge,
		nonce:       req.Nonce,
		scope:       req.Scope,
		user:        user,
		groups:      groups,
		authTime:    now,
		expires:     now.Add(codeLifetime),
	})
	if err != nil {
		p.fail(w, r, req, &oauthError{status: http.StatusServiceUnavailable, code: "temporarily_unavailable", desc: "too many sign-ins in progress; try again shortly", redirect: true})
		return
	}
	p.o.Logger.LogAttrs(r.Context(), slog.LevelInfo, "devoidc: development sign-in",
		slog.String("user", user), slog.Any("groups", groups), slog.String("client_id", req.ClientID))
	p.redirect(w, r, req, url.Values{"code": {code}})
}

// parseGroups reads the groups a person typed on the form: names as
// userName allows, separated by commas or spaces, each once; none is fine.
func parseGroups(text string) ([]string, bool) {
	var groups []string
	for _, g := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !userName.MatchString(g) {
			return nil, false
		}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups, len(groups) <= maxFormGroups
}

// fail answers e to the browser, or sends it to the client's redirect URI.
func (p *Provider) fail(w http.ResponseWriter, r *http.Request, req authRequest, e *oauthError) {
	p.logRefusal(r, e)
	if !e.redirect {
		writeOAuthError(w, e)
		return
	}
	p.redirect(w, r, req, url.Values{"error": {e.code}, "error_description": {e.desc}})
}

// redirect sends the browser to the validated redirect URI with params,
// the state and the issuer (RFC 9207).
func (p *Provider) redirect(w http.ResponseWriter, r *http.Request, req authRequest, params url.Values) {
	u, err := url.Parse(req.RedirectURI)
	if err != nil { // validated before; never expected
		writeOAuthError(w, errServer)
		return
	}
	q := u.Query()
	for k, v := range params {
		q[k] = v
	}
	if req.State != "" {
		q.Set("state", req.State)
	}
	q.Set("iss", p.o.Issuer)
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

type hiddenField struct{ Name, Value string }

// renderForm writes the sign-in page. Every value is escaped by
// html/template; the page runs no script and cannot be framed.
func (p *Provider) renderForm(w http.ResponseWriter, r *http.Request, status int, params url.Values, username, groups, problem string) {
	var hidden []hiddenField
	for _, name := range authParams {
		if v := params.Get(name); v != "" && name != "username" && name != "groups" {
			hidden = append(hidden, hiddenField{name, v})
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src '"+formStyleHash+"'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	err := signInPage.Execute(w, map[string]any{
		"Hidden":      hidden,
		"Username":    username,
		"Groups":      groups,
		"Error":       problem,
		"RedirectURI": params.Get("redirect_uri"),
	})
	if err != nil {
		p.o.Logger.LogAttrs(r.Context(), slog.LevelError, "devoidc: rendering the sign-in page", slog.String("error", err.Error()))
	}
}

const formStyle = `
body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f4f4f5; color: #18181b; }
main { max-width: 28rem; margin: 4rem auto; padding: 2rem; background: #fff; border-radius: .5rem; }
h1 { font-size: 1.5rem; margin-top: 0; }
.notice { border: 2px solid #b45309; background: #fef3c7; padding: .75rem 1rem; border-radius: .375rem; }
label { display: block; font-weight: 600; margin-top: 1.5rem; }
input[type=text] { width: 100%; box-sizing: border-box; font: inherit; padding: .5rem; border: 1px solid #52525b; border-radius: .25rem; }
input:focus, button:focus { outline: 3px solid #2563eb; outline-offset: 2px; }
.hint { color: #3f3f46; font-size: .875rem; }
.error { color: #b91c1c; font-weight: 600; }
button { margin-top: 1rem; font: inherit; padding: .5rem 1.25rem; background: #1d4ed8; color: #fff; border: 0; border-radius: .25rem; cursor: pointer; }
`

// formStyleHash allows exactly the page's own style sheet under its CSP.
var formStyleHash = func() string {
	sum := sha256.Sum256([]byte(formStyle))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}()

var signInPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in (development) · Usher</title>
<style>` + formStyle + `</style>
</head>
<body>
<main>
<h1>Sign in to Usher</h1>
<p class="notice" role="note"><strong>Development sign-in — not for production.</strong>
This built-in provider lets anyone sign in under any user name. Configure an OpenID Connect
issuer, such as Microsoft Entra ID, for real use.</p>
<form method="post" action="authorize">
{{range .Hidden}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">
{{end}}<label for="username">User name</label>
<input id="username" name="username" type="text" value="{{.Username}}" required maxlength="64"
 autocomplete="username" autocapitalize="none" spellcheck="false" autofocus
 aria-describedby="username-hint{{if .Error}} username-error{{end}}"{{if .Error}} aria-invalid="true"{{end}}>
<p id="username-hint" class="hint">Letters, digits, dots, underscores and hyphens, up to 64 characters.
The same name always signs in as the same user.</p>
<label for="groups">Groups <span class="hint">(optional)</span></label>
<input id="groups" name="groups" type="text" value="{{.Groups}}" maxlength="1100"
 autocapitalize="none" spellcheck="false" aria-describedby="groups-hint">
<p id="groups-hint" class="hint">The groups your organisation's provider would put in your token, separated
by commas: an approver group the policy names, or a reviewers' group (review.groups).</p>
{{if .Error}}<p id="username-error" class="error" role="alert">{{.Error}}</p>
{{end}}<button type="submit">Sign in</button>
</form>
<p class="hint">After signing in you return to {{.RedirectURI}}.</p>
</main>
</body>
</html>
`))

package oauthtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
)

// The consent page's hidden fields, which its form posts back.
var (
	ConsentCSRF    = regexp.MustCompile(`name="csrf_token" value="([^"]*)"`)
	ConsentRequest = regexp.MustCompile(`name="request" value="([^"]*)"`)
)

// App is a client registered with the server at Base, as the tests use it.
type App struct {
	Base        string // the server's URL
	ClientID    string
	RedirectURI string
}

// Register registers a public client named name, sending its sign-ins
// to redirectURI.
func Register(t testing.TB, base, name, redirectURI string) *App {
	t.Helper()
	md, _ := json.Marshal(map[string]any{
		"client_name": name, "redirect_uris": []string{redirectURI},
		"grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none",
	})
	resp, err := http.Post(base+oauth.PathRegister, "application/json", bytes.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		ClientID string `json:"client_id"`
	}
	if err := json.Unmarshal(body, &out); resp.StatusCode != http.StatusCreated || err != nil || out.ClientID == "" {
		t.Fatalf("register: %d %s", resp.StatusCode, body)
	}
	return &App{Base: base, ClientID: out.ClientID, RedirectURI: redirectURI}
}

// AuthorizeURL is an authorization request of the app for Usher's MCP
// endpoint, with a new PKCE pair; it returns the verifier too.
func (a *App) AuthorizeURL() (u, verifier string) {
	verifier = oauth.NewSecret()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {a.ClientID}, "redirect_uri": {a.RedirectURI},
		"state": {"apps-test"}, "scope": {broker.ScopeInvoke}, "resource": {a.Base + "/mcp"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	return a.Base + oauth.PathAuthorize + "?" + q.Encode(), verifier
}

// SessionRequest sends a request with the session cookie, from Usher's
// own origin as its pages do.
func SessionRequest(t testing.TB, method, u, cookie, contentType string, body io.Reader, extra ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, body)
	req.Header.Set("Cookie", (&http.Cookie{Name: "usher_session", Value: cookie}).String())
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Connect takes the app through the authorization request and the consent
// page as the person signed in with cookie, and returns its first tokens.
func (a *App) Connect(t testing.TB, cookie string) Tokens {
	t.Helper()
	code, verifier := a.Code(t, cookie)
	return a.Redeem(t, code, verifier)
}

// Code takes the app through the authorization request and the consent
// page as the person signed in with cookie, and returns the code and its
// PKCE verifier, not redeemed.
func (a *App) Code(t testing.TB, cookie string) (code, verifier string) {
	t.Helper()
	u, verifier := a.AuthorizeURL()
	resp, page := SessionRequest(t, http.MethodGet, u, cookie, "", nil)
	csrf, request := ConsentCSRF.FindStringSubmatch(page), ConsentRequest.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || csrf == nil || request == nil {
		t.Fatalf("authorize: %d %s", resp.StatusCode, page)
	}
	form := url.Values{"csrf_token": {html.UnescapeString(csrf[1])}, "request": {html.UnescapeString(request[1])}, "decision": {"approve"}}
	resp, body := SessionRequest(t, http.MethodPost, a.Base+oauth.PathAuthorize, cookie,
		"application/x-www-form-urlencoded", strings.NewReader(form.Encode()), "Origin", a.Base)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("consent: %d %s (Location %q)", resp.StatusCode, body, resp.Header.Get("Location"))
	}
	return loc.Query().Get("code"), verifier
}

// Tokens is what the token endpoint answered.
type Tokens struct {
	Status       int
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
}

func (a *App) Token(t testing.TB, form url.Values) Tokens {
	t.Helper()
	form.Set("client_id", a.ClientID)
	resp, err := http.PostForm(a.Base+oauth.PathToken, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p Tokens
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("token answer %d %s", resp.StatusCode, body)
	}
	p.Status = resp.StatusCode
	return p
}

// Redeem exchanges a code; it must succeed.
func (a *App) Redeem(t testing.TB, code, verifier string) Tokens {
	t.Helper()
	p := a.Token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {a.RedirectURI},
		"code_verifier": {verifier}, "resource": {a.Base + "/mcp"}})
	if p.Status != http.StatusOK || p.AccessToken == "" || p.RefreshToken == "" {
		t.Fatalf("redeem: %+v", p)
	}
	return p
}

// Refresh rotates a refresh token.
func (a *App) Refresh(t testing.TB, refresh string) Tokens {
	t.Helper()
	return a.Token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}})
}

// The development provider's sign-in form.
var (
	devHiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	devFormAction  = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
)

// SignIn signs user in to the server at base through the development provider as
// a browser does — /auth/login, the provider's form, the callback — and
// returns the session cookie's value.
func SignIn(t testing.TB, base, user string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	step := func(resp *http.Response, err error) (*http.Response, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	login, _ := step(c.Get(base + "/auth/login"))
	page, body := step(c.Get(login.Header.Get("Location")))
	action := devFormAction.FindStringSubmatch(body)
	if page.StatusCode != http.StatusOK || action == nil {
		t.Fatalf("the provider's sign-in page: %d %s", page.StatusCode, body)
	}
	form := url.Values{"username": {user}}
	for _, m := range devHiddenInput.FindAllStringSubmatch(body, -1) {
		form.Set(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	target, _ := page.Request.URL.Parse(html.UnescapeString(action[1]))
	posted, _ := step(c.PostForm(target.String(), form))
	cb, body := step(c.Get(posted.Header.Get("Location")))
	if cb.StatusCode != http.StatusSeeOther {
		t.Fatalf("callback: %d %s", cb.StatusCode, body)
	}
	for _, ck := range cb.Cookies() {
		if ck.Name == "usher_session" {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

package web

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// staticKeys is a devoidc.KeySource with one fixed RSA key.
type staticKeys struct {
	kid string
	key *rsa.PrivateKey
}

func (s staticKeys) Signer(context.Context) (string, *rsa.PrivateKey, error) {
	return s.kid, s.key, nil
}

func (s staticKeys) PublicKeys(context.Context) (jose.JSONWebKeySet, error) {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: s.key.Public(), KeyID: s.kid, Algorithm: string(jose.RS256), Use: "sig"},
	}}, nil
}

// testKey is generated once: RSA key generation is the slow part.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one Usher-like server on loopback, as serve wires it: the
// development provider at /dev/oidc, the API's verifier, the sign-in and
// the UI, and a protected API route /api/whoami that answers the
// principal's id.
type env struct {
	url      string
	mux      *http.ServeMux
	clock    *testenv.Clock // shared by the provider, the API's verifier and the sessions
	provider *devoidc.Provider
	verifier *identity.Verifier
	sessions *Sessions
	opts     Options // the options of sessions, for another replica's
	store    store.Store
}

// newEnv is newEnvOn a SQLite file of its own.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, storetest.NewSQLite(t))
}

// newEnvOn is a server whose sessions are kept in st.
func newEnvOn(t *testing.T, st store.Store) *env {
	t.Helper()
	return newEnvWith(t, st, nil)
}

// newEnvWith is newEnvOn whose sessions' options edit may change.
func newEnvWith(t *testing.T, st store.Store, edit func(*Options)) *env {
	t.Helper()
	e := &env{clock: testenv.NewClock(time.Now().Truncate(time.Second)), store: st}
	mux := http.NewServeMux()
	e.mux = mux
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	issuer := srv.URL + "/dev/oidc"

	p, err := devoidc.New(&devoidc.Options{
		Issuer:       issuer,
		Keys:         staticKeys{kid: "dev-1", key: testKey()},
		RedirectURIs: []string{srv.URL + "/auth/callback"},
		Now:          e.clock.Now,
		Logger:       quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.provider = p
	mux.Handle("/dev/oidc/", http.StripPrefix("/dev/oidc", p.Handler()))

	e.verifier, err = identity.New(t.Context(), &identity.Options{
		Issuer:         issuer,
		Audiences:      []string{devoidc.DefaultAudience},
		RequiredScopes: []string{devoidc.DefaultScope},
		JWKSURL:        issuer + "/jwks",
		Now:            e.clock.Now,
		Logger:         quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.opts = Options{
		PublicURL:         srv.URL,
		Issuer:            issuer,
		Endpoints:         &Endpoints{AuthURL: issuer + "/authorize", TokenURL: issuer + "/token", JWKSURL: issuer + "/jwks"},
		ClientID:          devoidc.DefaultClientID,
		Scopes:            []string{devoidc.DefaultScope},
		VerifyAccessToken: e.verifier.Verify,
		Secret:            []byte("0123456789abcdef0123456789abcdef"),
		Store:             st,
		Now:               e.clock.Now,
		Logger:            quiet,
	}
	if edit != nil {
		edit(&e.opts)
	}
	e.sessions, err = New(t.Context(), &e.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := Mount(mux, e.sessions); err != nil {
		t.Fatal(err)
	}
	whoami := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.FromContext(r.Context())
		if !ok {
			t.Error("a request reached the API without a principal")
		}
		io.WriteString(w, p.ID())
	})
	mux.Handle("/api/whoami", e.sessions.Authenticate(whoami, e.verifier.Middleware))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return e
}

// browser is an HTTP client with a cookie jar that stops at redirects, so
// each step of a sign-in can be looked at.
type browser struct {
	t      *testing.T
	client *http.Client
	jar    *cookiejar.Jar
}

func (e *env) browser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, jar: jar, client: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// response is what a request answered.
type response struct {
	status     int
	header     http.Header
	body       string
	setCookies []*http.Cookie
}

func (r response) location() string { return r.header.Get("Location") }

// cookie returns the Set-Cookie named name, or nil.
func (r response) cookie(name string) *http.Cookie {
	for _, c := range r.setCookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (b *browser) do(method, u string, header http.Header, body io.Reader) response {
	b.t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(raw), setCookies: resp.Cookies()}
}

func (b *browser) get(u string) response { return b.do(http.MethodGet, u, nil, nil) }

var (
	hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	formAction  = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
)

// authorize signs user in at the provider the way a person does — open
// the page the login redirect names, submit its form — and returns the
// callback URL the provider redirects to.
func (b *browser) authorize(authURL, user string) string {
	b.t.Helper()
	page := b.get(authURL)
	if page.status != http.StatusOK {
		b.t.Fatalf("GET authorize: %d %s", page.status, page.body)
	}
	action := formAction.FindStringSubmatch(page.body)
	if action == nil {
		b.t.Fatalf("no sign-in form in %s", page.body)
	}
	form := url.Values{"username": {user}}
	for _, m := range hiddenInput.FindAllStringSubmatch(page.body, -1) {
		form.Set(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	base, _ := url.Parse(authURL)
	target, _ := base.Parse(html.UnescapeString(action[1]))
	resp := b.do(http.MethodPost, target.String(), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
		strings.NewReader(form.Encode()))
	if resp.status != http.StatusSeeOther {
		b.t.Fatalf("POST authorize: %d %s", resp.status, resp.body)
	}
	return resp.location()
}

// signIn runs a whole sign-in as user and returns the callback's answer.
func (b *browser) signIn(e *env, user, returnTo string) response {
	b.t.Helper()
	login := b.get(e.url + "/auth/login?" + url.Values{"return": {returnTo}}.Encode())
	if login.status != http.StatusSeeOther {
		b.t.Fatalf("GET /auth/login: %d %s", login.status, login.body)
	}
	cb := b.get(b.authorize(login.location(), user))
	if cb.status != http.StatusSeeOther {
		b.t.Fatalf("callback: %d %s", cb.status, cb.body)
	}
	return cb
}

// noSession fails t when r set a session cookie.
func noSession(t *testing.T, r response) {
	t.Helper()
	if c := r.cookie("usher_session"); c != nil && c.MaxAge >= 0 {
		t.Fatal("a refused sign-in set a session cookie")
	}
}

// apiError decodes the API's error shape and returns its code.
func apiError(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Code == "" || v.Error.Message == "" {
		t.Fatalf("not the API error shape: %q", body)
	}
	return v.Error.Code
}

// principalOf is the id the API's verifier gives user's access token.
func (e *env) principalOf(t *testing.T, user string) string {
	t.Helper()
	tok, err := e.provider.IssueAccessToken(t.Context(), user)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.verifier.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	return p.ID()
}

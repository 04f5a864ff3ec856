package devoidc_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/testenv"
)

// staticKeys is a KeySource with one fixed RSA key.
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

var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// env is a provider mounted at /dev/oidc on a loopback server, and a
// client callback on another loopback server.
type env struct {
	provider *devoidc.Provider
	issuer   string
	callback string // the registered redirect URI
	clock    *testenv.Clock
	client   *http.Client // follows redirects, like a browser
	noFollow *http.Client // stops at the first redirect

	mu       sync.Mutex
	received url.Values // the last callback query
}

func newEnv(t *testing.T, edit func(*devoidc.Options)) *env {
	t.Helper()
	e := &env{clock: testenv.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))}
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.received = r.URL.Query()
		e.mu.Unlock()
		io.WriteString(w, "signed in")
	}))
	t.Cleanup(cb.Close)
	e.callback = cb.URL + "/callback"

	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.issuer = srv.URL + "/dev/oidc"
	opts := &devoidc.Options{
		Issuer:       e.issuer,
		Keys:         staticKeys{kid: "dev-1", key: testKey()},
		RedirectURIs: []string{e.callback},
		Now:          e.clock.Now,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if edit != nil {
		edit(opts)
	}
	p, err := devoidc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.provider = p
	mux.Handle("/dev/oidc/", http.StripPrefix("/dev/oidc", p.Handler()))
	e.client = &http.Client{}
	e.noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// pkce returns a code verifier and its S256 challenge.
func pkce() (verifier, challenge string) {
	verifier = rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// authParams are the parameters of a good authorization request.
func (e *env) authParams(challenge string) url.Values {
	return url.Values{
		"client_id":             {devoidc.DefaultClientID},
		"redirect_uri":          {e.callback},
		"response_type":         {"code"},
		"scope":                 {"openid profile usher.api"},
		"state":                 {"state-" + rand.Text()},
		"nonce":                 {"nonce-" + rand.Text()},
		"code_challenge":        {challenge},
		"code_challenge_method": {"S256"},
	}
}

var (
	hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	formAction  = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
)

// signIn does what a person does in a browser: open the authorization URL,
// fill in the form and submit it, landing on the client's callback. It
// returns the callback's query.
func (e *env) signIn(t *testing.T, user string, params url.Values) url.Values {
	t.Helper()
	page := e.issuer + "/authorize?" + params.Encode()
	status, body, _ := e.get(t, e.client, page)
	if status != http.StatusOK {
		t.Fatalf("GET authorize: %d %s", status, body)
	}
	action := formAction.FindStringSubmatch(body)
	if action == nil {
		t.Fatalf("no form in %s", body)
	}
	form := url.Values{"username": {user}}
	for _, m := range hiddenInput.FindAllStringSubmatch(body, -1) {
		form.Set(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	base, _ := url.Parse(page)
	target, _ := base.Parse(html.UnescapeString(action[1]))
	e.mu.Lock()
	e.received = nil
	e.mu.Unlock()
	resp, err := e.client.PostForm(target.String(), form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/callback" {
		t.Fatalf("sign-in ended at %s with %d %s", resp.Request.URL, resp.StatusCode, b)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.received
}

// code signs user in with a fresh PKCE pair and returns the code and the
// verifier.
func (e *env) code(t *testing.T, user string) (code, verifier string) {
	t.Helper()
	verifier, challenge := pkce()
	q := e.signIn(t, user, e.authParams(challenge))
	if q.Get("code") == "" {
		t.Fatalf("callback without code: %v", q)
	}
	return q.Get("code"), verifier
}

// redeemForm is a good token request for code.
func (e *env) redeemForm(code, verifier string) url.Values {
	return url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {e.callback},
		"client_id":     {devoidc.DefaultClientID},
		"code_verifier": {verifier},
	}
}

// redeem posts form to the token endpoint and decodes the JSON answer.
func (e *env) redeem(t *testing.T, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := e.client.PostForm(e.issuer+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("token endpoint answered no JSON (%d): %v", resp.StatusCode, err)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("token response Cache-Control %q", cc)
	}
	return resp.StatusCode, body
}

func (e *env) get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// oauthErr extracts "error" of a JSON body, failing on internal text.
func oauthErr(t *testing.T, body map[string]any) string {
	t.Helper()
	desc, _ := body["error_description"].(string)
	for _, internal := range []string{"goroutine", "panic", ".go:", "runtime"} {
		if strings.Contains(desc, internal) {
			t.Errorf("error_description leaks internals: %q", desc)
		}
	}
	code, _ := body["error"].(string)
	return code
}

// leakyKeys publishes its private key, as a faulty KeySource might.
type leakyKeys struct{ staticKeys }

func (l leakyKeys) PublicKeys(context.Context) (jose.JSONWebKeySet, error) {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: l.key, KeyID: l.kid, Algorithm: string(jose.RS256), Use: "sig"},
	}}, nil
}

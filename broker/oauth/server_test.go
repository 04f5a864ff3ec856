package oauth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// engines runs test on a fresh store of each engine, in parallel: SQLite,
// and PostgreSQL when TEST_DATABASE_URL is set.
func engines(t *testing.T, test func(t *testing.T, st store.Store)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, storetest.NewSQLite(t))
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		test(t, storetest.NewPostgres(t))
	})
}

// testWriter sends the server's log to the test's, shown when it fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// userCookie names the test's sign-in: its value is the signed-in user's
// subject.
const userCookie = "test_user"

// principal is the principal a test user signs in as.
func principal(user string) identity.Principal {
	p := identity.Principal{Issuer: "https://idp.example.com", Tenant: "tenant-1", Subject: user, Name: user, Groups: []string{"staff"}}
	if user == crowdUser {
		for i := range broker.MaxGroups + 1 {
			p.Groups = append(p.Groups, "group-"+strconv.Itoa(i))
		}
	}
	return p
}

// admitting is the identity configuration of the test people's issuer
// (principal's) that lets in the tenants named: a real API verifier, whose
// Admits a server asks at each code and refresh token. It makes no
// request: its keys would be fetched at a first Verify, which none does.
func admitting(t testing.TB, tenants ...string) func(string) error {
	t.Helper()
	v, err := identity.New(context.Background(), &identity.Options{
		Issuer: "https://idp.example.com", JWKSURL: "https://idp.example.com/keys",
		Audiences: []string{"api://usher"}, RequiredScopes: []string{"access_as_user"}, Tenants: tenants,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v.Admits
}

// crowdUser is a test user in more groups than a broker token carries.
const crowdUser = "crowd"

// sessionCookie names the test's browser session, when a test gives one
// person several; without it, a user's session is "session of <user>".
const sessionCookie = "test_session"

// signedIn is the test's ServerOptions.SignedIn: the user named by the
// test cookie, in the session of the session cookie.
func signedIn(r *http.Request) (identity.Principal, string, bool, error) {
	c, err := r.Cookie(userCookie)
	if err != nil || c.Value == "" {
		return identity.Principal{}, "", false, nil
	}
	session := "session of " + c.Value
	if sc, err := r.Cookie(sessionCookie); err == nil {
		session = sc.Value
	}
	return principal(c.Value), session, true, nil
}

// env is a running authorization server over a real store, broker and
// keyring, served by httptest.
type env struct {
	t        *testing.T
	st       store.Store
	srv      *httptest.Server
	server   *oauth.Server
	issuer   string
	resource string
	keys     *broker.Keyring
	clock    *testenv.Clock // from the real time: the flow test's verifier checks the tokens against it
	http     *http.Client
	opts     oauth.ServerOptions           // the server's, as newEnv's edit left them
	handler  *atomic.Pointer[http.Handler] // the server's, which replace swaps; shared by copies (another browser)
}

// newEnv starts a server on st; edit may change its options.
func newEnv(t *testing.T, st store.Store, edit func(*oauth.ServerOptions)) *env {
	t.Helper()
	e := &env{t: t, st: st, clock: testenv.NewClock(time.Now().UTC().Truncate(time.Second)), handler: new(atomic.Pointer[http.Handler])}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*e.handler.Load()).ServeHTTP(w, r) }))
	t.Cleanup(e.srv.Close)
	e.issuer = e.srv.URL
	e.resource = e.issuer + "/mcp"
	keys, err := broker.NewKeyring(st, "broker", bytes.Repeat([]byte{7}, broker.SealKeySize),
		&broker.KeyringOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.keys = keys
	b, err := broker.New(keys, &broker.Options{Issuer: e.issuer, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &oauth.ServerOptions{
		Issuer:    e.issuer,
		Resources: []string{e.resource},
		Store:     st,
		Broker:    b,
		Audit:     log,
		SignedIn:  signedIn,
		LoginURL: func(returnTo, refusedTo string) string {
			return "/login?" + url.Values{"return_to": {returnTo}, "refused_to": {refusedTo}}.Encode()
		},
		Admits:       admitting(t, "tenant-1"),
		Secret:       bytes.Repeat([]byte{9}, 32),
		Registration: true,
		Now:          e.clock.Now,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	if edit != nil {
		edit(opts)
	}
	e.opts = *opts
	e.replace(nil)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The jar is the browser's: it carries the pending request's cookie
	// from the authorization request to its continuation.
	e.http = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// replace serves the issuer's address with a new server of the env's
// options, as edit changes them (nil: as they are): a replica rolled
// with other settings.
func (e *env) replace(edit func(*oauth.ServerOptions)) {
	e.t.Helper()
	opts := e.opts
	if edit != nil {
		edit(&opts)
	}
	s, err := oauth.NewServer(&opts)
	if err != nil {
		e.t.Fatal(err)
	}
	h := s.Handler()
	e.server = s
	e.handler.Store(&h)
}

// do sends req as user (none: "") and returns the answer and its body.
func (e *env) do(req *http.Request, user string) (*http.Response, string) {
	e.t.Helper()
	if user != "" {
		req.AddCookie(&http.Cookie{Name: userCookie, Value: user})
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(body)
}

// get GETs path (from the issuer) as user.
func (e *env) get(path, user string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.issuer+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.do(req, user)
}

// getAccept GETs path as user, as a client that accepts accept.
func (e *env) getAccept(path, user, accept string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.issuer+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	return e.do(req, user)
}

// metadata reads the server's RFC 8414 metadata as clients do.
func (e *env) metadata() oauth.Metadata {
	e.t.Helper()
	resp, body := e.get("/.well-known/oauth-authorization-server", "")
	var m oauth.Metadata
	if err := json.Unmarshal([]byte(body), &m); resp.StatusCode != http.StatusOK || err != nil {
		e.t.Fatalf("metadata: %d %s %v", resp.StatusCode, body, err)
	}
	return m
}

// postForm POSTs form to path as user, with extra headers (name, value
// pairs).
func (e *env) postForm(path string, form url.Values, user string, headers ...string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.issuer+path, strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return e.do(req, user)
}

// client is a registered client of a test.
type client struct {
	ID, Secret  string
	RedirectURI string
}

// register registers a client by Dynamic Client Registration; edit may
// change its metadata.
func (e *env) register(edit func(map[string]any)) client {
	e.t.Helper()
	md := map[string]any{
		"client_name":                "Test Client",
		"redirect_uris":              []string{"http://127.0.0.1:33418/callback"},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"token_endpoint_auth_method": "none",
	}
	if edit != nil {
		edit(md)
	}
	resp, body := e.registerRaw(md)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("register: %d %s", resp.StatusCode, body)
	}
	var out struct {
		ClientID     string   `json:"client_id"`
		ClientSecret string   `json:"client_secret"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		e.t.Fatal(err)
	}
	return client{ID: out.ClientID, Secret: out.ClientSecret, RedirectURI: out.RedirectURIs[0]}
}

// registerRaw posts md to the registration endpoint.
func (e *env) registerRaw(md any) (*http.Response, string) {
	e.t.Helper()
	b, err := json.Marshal(md)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.issuer+oauth.PathRegister, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return e.do(req, "")
}

// pkce returns a verifier and its S256 challenge.
func pkce() (verifier, challenge string) {
	verifier = oauth.NewSecret()
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// authQuery is the query of an authorization request of c, with the
// challenge, changed by edit.
func (e *env) authQuery(c client, challenge string, edit func(url.Values)) url.Values {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {c.ID},
		"redirect_uri":          {c.RedirectURI},
		"state":                 {"xyz-state"},
		"scope":                 {"mcp:invoke"},
		"code_challenge":        {challenge},
		"code_challenge_method": {"S256"},
		"resource":              {e.resource},
	}
	if edit != nil {
		edit(q)
	}
	return q
}

var (
	csrfField    = regexp.MustCompile(`name="csrf_token" value="([^"]*)"`)
	requestField = regexp.MustCompile(`name="request" value="([^"]*)"`)
)

// consentFields reads the consent page's hidden fields.
func consentFields(t *testing.T, page string) (csrf, request string) {
	t.Helper()
	m1, m2 := csrfField.FindStringSubmatch(page), requestField.FindStringSubmatch(page)
	if m1 == nil || m2 == nil {
		t.Fatalf("no consent form in %q", page)
	}
	return html.UnescapeString(m1[1]), html.UnescapeString(m2[1])
}

// consentPage starts an authorization request as user, who has not
// consented yet, and returns the consent form's fields.
func (e *env) consentPage(q url.Values, user string) (csrf, request string) {
	e.t.Helper()
	resp, body := e.get(oauth.PathAuthorize+"?"+q.Encode(), user)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("authorize: %d %s (Location %s)", resp.StatusCode, body, resp.Header.Get("Location"))
	}
	return consentFields(e.t, body)
}

// approve posts the consent form as user, from Usher's origin.
func (e *env) approve(csrf, request, user, decision string) *http.Response {
	e.t.Helper()
	resp, _ := e.postForm(oauth.PathAuthorize, url.Values{
		"csrf_token": {csrf}, "request": {request}, "decision": {decision},
	}, user, "Origin", e.issuer)
	return resp
}

// redirectQuery checks that resp redirects to the client's redirect URI
// and returns the redirect's query.
func redirectQuery(t *testing.T, resp *http.Response, redirectURI string) url.Values {
	t.Helper()
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || !strings.HasPrefix(loc, redirectURI+"?") {
		t.Fatalf("answer %d to %q, want a redirect to %s", resp.StatusCode, loc, redirectURI)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

// code runs an authorization request of c as user through consent and
// returns the code and the verifier.
func (e *env) code(c client, user string, edit func(url.Values)) (code, verifier string) {
	e.t.Helper()
	verifier, challenge := pkce()
	q := e.authQuery(c, challenge, edit)
	resp, body := e.get(oauth.PathAuthorize+"?"+q.Encode(), user)
	if resp.StatusCode == http.StatusOK {
		csrf, request := consentFields(e.t, body)
		resp = e.approve(csrf, request, user, oauth.DecisionApprove)
	}
	rq := redirectQuery(e.t, resp, q.Get("redirect_uri"))
	if rq.Get("code") == "" {
		e.t.Fatalf("no code in %v", rq)
	}
	return rq.Get("code"), verifier
}

// tokenAnswer is a token endpoint's answer, success or error.
type tokenAnswer struct {
	Status       int
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
	Error        string `json:"error"`
	Description  string `json:"error_description"`
	header       http.Header
}

// token posts form to the token endpoint as c (Basic when c has a secret,
// else client_id in the form).
func (e *env) token(c client, form url.Values) tokenAnswer {
	e.t.Helper()
	form = cloneValues(form)
	var headers []string
	if c.Secret != "" {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
		headers = []string{"Authorization", req.Header.Get("Authorization")}
	} else if c.ID != "" {
		form.Set("client_id", c.ID)
	}
	resp, body := e.postForm(oauth.PathToken, form, "", headers...)
	var a tokenAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		e.t.Fatalf("token answer %d %q: %v", resp.StatusCode, body, err)
	}
	a.Status, a.header = resp.StatusCode, resp.Header
	return a
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// redeem exchanges a code for tokens.
func (e *env) redeem(c client, code, verifier string) tokenAnswer {
	e.t.Helper()
	return e.token(c, url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.RedirectURI},
		"code_verifier": {verifier}, "resource": {e.resource},
	})
}

// connect takes c through a code grant as user, and requires its tokens.
func (e *env) connect(c client, user string) tokenAnswer {
	e.t.Helper()
	code, verifier := e.code(c, user, nil)
	tok := e.redeem(c, code, verifier)
	if tok.Status != http.StatusOK {
		e.t.Fatalf("redeem: %+v", tok)
	}
	return tok
}

// refresh rotates a refresh token.
func (e *env) refresh(c client, refresh string) tokenAnswer {
	e.t.Helper()
	return e.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}})
}

// auditKinds returns the kinds of the audit log's records, in order.
func (e *env) auditKinds() []string {
	e.t.Helper()
	recs, err := e.st.AuditRecords(context.Background(), 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	return kinds
}

// docServer is a TLS server serving one client metadata document, and the
// Fetcher that trusts it and resolves example.com to it.
func docServer(t *testing.T, doc func(clientID string) map[string]any) (clientID string, f *clientmeta.Fetcher) {
	t.Helper()
	var id string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc(id))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	id = "https://example.com:" + u.Port() + "/client.json"
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	f, err := clientmeta.New(&clientmeta.Options{
		AllowLoopbackHTTP: true, // the document server is on loopback
		RootCAs:           pool,
		Resolver: func(_ context.Context, _, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, f
}

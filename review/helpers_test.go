package review_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

var quiet = slog.New(slog.DiscardHandler)

// staticKeys is a devoidc.KeySource with one fixed RSA key.
type staticKeys struct{ key *rsa.PrivateKey }

func (s staticKeys) Signer(context.Context) (string, *rsa.PrivateKey, error) {
	return "test-1", s.key, nil
}

func (s staticKeys) PublicKeys(context.Context) (jose.JSONWebKeySet, error) {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: s.key.Public(), KeyID: "test-1", Algorithm: string(jose.RS256), Use: "sig"},
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

// site is an issuer of its own (a tenant apart) and the reviewers' API
// behind a verifier of its tokens, served over loopback.
type site struct {
	url      string
	provider *devoidc.Provider
	verifier *identity.Verifier
}

// newSite serves h behind a verifier of a development provider that
// grants scopes in its tokens; the verifier requires the API's scope.
func newSite(t *testing.T, h http.Handler, scopes []string) *site {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	issuer := srv.URL + "/dev/oidc"
	p, err := devoidc.New(&devoidc.Options{
		Issuer: issuer, Keys: staticKeys{testKey()}, Scopes: scopes,
		RedirectURIs: []string{srv.URL + "/callback"}, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := identity.New(t.Context(), &identity.Options{
		Issuer: issuer, Audiences: []string{devoidc.DefaultAudience}, RequiredScopes: []string{devoidc.DefaultScope},
		JWKSURL: issuer + "/jwks", Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/dev/oidc/", http.StripPrefix("/dev/oidc", p.Handler()))
	for _, p := range review.Paths {
		mux.Handle(p, v.Middleware(h))
		mux.Handle(p+"/", v.Middleware(h))
	}
	return &site{url: srv.URL, provider: p, verifier: v}
}

// token is an access token of user with groups.
func (s *site) token(t *testing.T, user string, groups ...string) string {
	t.Helper()
	tok, err := s.provider.IssueAccessToken(t.Context(), user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// id is the principal id of user on this site.
func (s *site) id(t *testing.T, user string) string {
	t.Helper()
	p, err := s.verifier.Verify(t.Context(), s.token(t, user))
	if err != nil {
		t.Fatal(err)
	}
	return p.ID()
}

// env is the reviewers' API on a real store, served by two sites (two
// tenants) and a third whose tokens lack the API's scope, as an
// application's own tokens do.
type env struct {
	st      store.Store
	log     *audit.Log
	a, b    *site
	appOnly *site
	// principals are alice and bob of a, carol of b, and no one.
	principals []string
}

// forEachEngine runs test on each engine.
func forEachEngine(t *testing.T, opts *review.Options, test func(t *testing.T, e *env)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, newEnv(t, storetest.NewSQLite(t), opts))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		test(t, newEnv(t, storetest.NewPostgres(t), opts))
	})
}

func newEnv(t *testing.T, st store.Store, opts *review.Options) *env {
	t.Helper()
	cat := newCatalog(t, st)
	o := review.Options{Groups: []string{"security"}, Logger: quiet, Checkpoints: audit.CheckpointsHandler(st, quiet),
		Policy: policy.Default(), Lock: cat.BuiltinLock(), Catalog: cat}
	if opts != nil {
		o = *opts
	}
	api, err := review.New(st, &o)
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler()
	e := &env{st: st, log: log, a: newSite(t, h, nil), b: newSite(t, h, nil),
		appOnly: newSite(t, h, []string{"app.other"})}
	e.principals = []string{e.a.id(t, "alice"), e.a.id(t, "bob"), e.b.id(t, "carol"), ""}
	return e
}

// newCatalog is a catalog of the built-in and demo tools and of
// upstreams, on st.
func newCatalog(t *testing.T, st store.Store, upstreams ...mcpserver.Upstream) *mcpserver.Catalog {
	t.Helper()
	cat, err := mcpserver.NewCatalog(&mcpserver.CatalogOptions{
		Runs: st, Approvals: st, DemoTools: true, Notes: st, Upstreams: upstreams, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// entry is the i-th record the tests append: it cycles through alice and
// bob of site a, carol of site b and no principal, with varied kinds,
// tools, servers and outcomes, one minute apart from start.
func (e *env) entry(i int, start time.Time) audit.Entry {
	kinds := []audit.Kind{audit.KindDecision, audit.KindExecuted, audit.KindAuthFailed}
	tools := []string{"notes_write", "notes_list", ""}
	servers := []string{"demo", "other<&>"}
	outcomes := []string{"succeeded", "failed", ""}
	return audit.Entry{
		Kind: kinds[i%len(kinds)], At: start.Add(time.Duration(i) * time.Minute),
		Principal: e.principals[i%len(e.principals)], Tool: tools[i%len(tools)], Outcome: outcomes[i%len(outcomes)],
		Details: json.RawMessage(fmt.Sprintf(`{"server":%q,"i":%d}`, servers[i%len(servers)], i)),
	}
}

// seed appends entries from to from+n-1.
func (e *env) seed(t *testing.T, from, n int, start time.Time) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := e.log.Append(t.Context(), e.entry(i, start)); err != nil {
			t.Fatal(err)
		}
	}
}

// exported is the log as `usher audit export` writes it, line by line
// (no newline), with each line's record decoded.
type exported struct {
	line string
	rec  struct {
		Seq       int64
		Kind      string
		Principal string
		Tool      string
		Outcome   string
		At        time.Time
		Details   struct{ Server string }
	}
}

func (e *env) export(t *testing.T) []exported {
	t.Helper()
	var b bytes.Buffer
	if err := audit.Export(t.Context(), e.st, &b, 0); err != nil {
		t.Fatal(err)
	}
	var out []exported
	for line := range strings.Lines(b.String()) {
		var x exported
		x.line = strings.TrimSuffix(line, "\n")
		if err := json.Unmarshal([]byte(line), &x.rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

// inScope reports whether the record is one a reviewer of site s reads.
func (x exported) inScope(s *site) bool {
	return x.rec.Principal == "" || strings.HasPrefix(x.rec.Principal, s.url+"/dev/oidc|")
}

// call sends a request with a bearer token (none for "") and returns the
// status and body.
func call(t *testing.T, method, url, token string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(`{"decision":"approve"}`))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// page is an answer of GET /api/audit.
type page struct {
	Records []json.RawMessage `json:"records"`
	Next    *string           `json:"next"`
}

// list GETs a page and fails the test on anything but 200.
func list(t *testing.T, s *site, token, query string) page {
	t.Helper()
	code, body, _ := call(t, "GET", s.url+"/api/audit?"+query, token)
	if code != 200 {
		t.Fatalf("GET /api/audit?%s = %d %s", query, code, body)
	}
	var p page
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("GET /api/audit?%s: %v\n%s", query, err, body)
	}
	return p
}

// errorCode is the code of an error answer.
func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

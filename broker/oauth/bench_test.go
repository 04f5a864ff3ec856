//go:build unix

package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// BenchmarkTokenEndpoint measures the token endpoint's three grants
// against what the goal is stated in: each grant at most 2× a bare
// broker mint plus one database round trip. In one run and on one store it
// times, b.N times each and interleaved (the order rotates every step, so
// that a change in the machine's load falls on all five alike):
//
//	A  code:     POST /oauth/token grant_type=authorization_code, with the PKCE verifier
//	B  refresh:  POST /oauth/token grant_type=refresh_token, with the last refresh token issued
//	E  exchange: POST /oauth/token grant_type=urn:ietf:params:oauth:grant-type:token-exchange,
//	             a confidential client's exchange of a person's API token (RS256, from an
//	             httptest OIDC issuer) for an MCP token (RFC 8693)
//	C  mint:     broker.Mint of the grant A and B mint, on the server's own broker
//	D  db:       one database round trip, a GetOAuthClient through the same store
//
// and reports p50 and p99 of each, the process's CPU per operation
// (getrusage: client and server, not the database's), and the ratios
// code/(2×mint+db), refresh/(2×mint+db) and exchange/(2×mint+db) at p50
// and at p99 (goal: ≤ 1).
// It logs the p50 of each store call a grant makes, timed through a
// wrapper of the store, which says where a grant's time goes.
//
// The store is PostgreSQL when TEST_DATABASE_URL is set (the figure that
// matters: every store call is a round trip, most of them a commit), else
// SQLite; the sub-benchmark's name says which. The code and refresh
// grants are each a read of the code or token, the mint, and one store
// transaction.
//
// The client runs in the test process and calls the Server over loopback
// HTTP (httptest, one kept-alive connection), not from a separate process.
// That is acceptable for the ratio: the mint and the database round trip
// are measured in the same process, under the same scheduler and
// collector; the client's share of a grant (encoding a form, decoding a
// JSON answer, the loopback hop) is counted against the grant, so the
// ratio errs against the endpoint, not for it.
//
// The codes go through the real endpoints: the first through the
// authorization request, the consent page and its approval, the others by
// an authorization request that the remembered consent answers with a code
// at once. An authorization code lives at most a minute, so they are made
// in batches of codeBatch, untimed, just before the steps that redeem them.
//
//	TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
//	  go test -run '^$' -bench TokenEndpoint -benchtime 500x -cpu 2 ./broker/oauth
func BenchmarkTokenEndpoint(b *testing.B) {
	if os.Getenv(storetest.DatabaseURLEnv) != "" {
		b.Run("Postgres", func(b *testing.B) { benchTokenEndpoint(b, storetest.NewPostgres(b)) })
		return
	}
	b.Run("SQLite", func(b *testing.B) { benchTokenEndpoint(b, storetest.NewSQLite(b)) })
}

// codeBatch is how many codes are made ahead of the steps that redeem
// them: few enough to be redeemed well within a code's lifetime.
const codeBatch = 20

// benchWarmup is the steps run before the measured ones.
const benchWarmup = 20

func benchTokenEndpoint(b *testing.B, st store.Store) {
	ctx := context.Background()
	ts := &timedStore{Store: st, calls: map[string][]time.Duration{}}
	e := newBenchEnv(b, ts)
	c := e.register()
	p := principal(benchUser)
	grant := broker.Grant{Subject: p.ID(), Audience: e.resource, ClientID: c.ID, Tenant: p.Tenant, Groups: p.Groups}

	var codes []benchCode
	refresh := e.redeem(c, e.firstCode(c)).RefreshToken
	exchanger, subject := e.exchangeClient(), e.api.token(b, nil)

	ops := []benchOp{
		{name: "code", run: func() { refresh = e.redeem(c, e.takeCode(c, &codes)).RefreshToken }},
		{name: "refresh", run: func() { refresh = e.refresh(c, refresh).RefreshToken }},
		{name: "exchange", run: func() { e.exchange(exchanger, subject) }},
		{name: "mint", run: func() {
			if _, err := e.broker.Mint(ctx, grant); err != nil {
				b.Fatal(err)
			}
		}},
		{name: "db", run: func() {
			if _, err := st.GetOAuthClient(ctx, c.ID); err != nil {
				b.Fatal(err)
			}
		}},
	}
	step := func(i int, measure bool) {
		if len(codes) == 0 {
			codes = e.codes(c, codeBatch) // untimed, before the step's code grant
		}
		for k := range ops {
			op := &ops[(i+k)%len(ops)]
			ts.label(op.name, measure)
			cpu0, t0 := processCPU(), time.Now()
			op.run()
			d, cpu := time.Since(t0), processCPU()-cpu0
			ts.label("", false)
			if measure {
				op.lat = append(op.lat, d)
				op.cpu += cpu
			}
		}
	}
	for i := range benchWarmup {
		step(i, false)
	}
	b.ResetTimer()
	load := loadAverage()
	for i := range b.N {
		step(i, true)
	}
	b.StopTimer()

	b.Logf("store %s; %d steps; load average %s at the start, %s at the end", b.Name()[strings.LastIndexByte(b.Name(), '/')+1:], b.N, load, loadAverage())
	p50, p99 := map[string]time.Duration{}, map[string]time.Duration{}
	for _, op := range ops {
		p50[op.name], p99[op.name] = percentile(op.lat, 0.50), percentile(op.lat, 0.99)
		b.ReportMetric(micros(p50[op.name]), op.name+"-p50-µs")
		b.ReportMetric(micros(p99[op.name]), op.name+"-p99-µs")
		b.ReportMetric(micros(op.cpu)/float64(b.N), op.name+"-cpu-µs/op")
	}
	for _, g := range []string{"code", "refresh", "exchange"} {
		b.ReportMetric(float64(p50[g])/float64(2*p50["mint"]+p50["db"]), g+"/goal-p50")
		b.ReportMetric(float64(p99[g])/float64(2*p99["mint"]+p99["db"]), g+"/goal-p99")
	}
	b.ReportMetric(0, "ns/op")
	for _, g := range []string{"code", "refresh", "exchange"} {
		var parts []string
		for _, name := range ts.names(g) {
			parts = append(parts, fmt.Sprintf("%s %.0f", name, micros(percentile(ts.calls[g+"/"+name], 0.50))))
		}
		b.Logf("%s grant: store calls, p50 µs each: %s", g, strings.Join(parts, ", "))
	}
}

// benchOp is one of the measured operations and what it measured.
type benchOp struct {
	name string
	run  func()
	lat  []time.Duration
	cpu  time.Duration
}

// benchEnv is a running authorization server over a real store, served by
// httptest on loopback, and the client that calls it.
type benchEnv struct {
	tb       testing.TB
	server   *oauth.Server
	srv      *httptest.Server
	broker   *broker.Broker
	issuer   string
	resource string
	http     *http.Client
	api      *apiIssuer // of the subject tokens of the token exchange
}

// newBenchEnv starts a server on st, as newEnv does, for a benchmark.
func newBenchEnv(tb testing.TB, st store.Store) *benchEnv {
	tb.Helper()
	e := &benchEnv{tb: tb, api: newAPIIssuer(tb)}
	var h http.Handler = http.NotFoundHandler()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	tb.Cleanup(e.srv.Close)
	e.issuer = e.srv.URL
	e.resource = e.issuer + "/mcp"
	keys, err := broker.NewKeyring(st, "broker", bytes.Repeat([]byte{7}, broker.SealKeySize),
		&broker.KeyringOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if e.broker, err = broker.New(keys, &broker.Options{Issuer: e.issuer}); err != nil {
		tb.Fatal(err)
	}
	log, err := audit.New(st, nil)
	if err != nil {
		tb.Fatal(err)
	}
	server, err := oauth.NewServer(&oauth.ServerOptions{
		Issuer:    e.issuer,
		Resources: []string{e.resource},
		Store:     st,
		Broker:    e.broker,
		Audit:     log,
		SignedIn:  signedIn,
		LoginURL: func(returnTo, refusedTo string) string {
			return "/login?" + url.Values{"return_to": {returnTo}, "refused_to": {refusedTo}}.Encode()
		},
		Admits:       admitting(tb, "tenant-1"),
		Secret:       bytes.Repeat([]byte{9}, 32),
		Registration: true,
		Logger:       slog.New(slog.NewTextHandler(tbWriter{tb}, nil)),
		// The token exchange, for benchExchanger (exchangeClient).
		VerifySubjectToken: e.api.verifier(tb).Verify,
		ExchangeClients:    []string{benchExchanger},
		ConfiguredClients: []oauth.ConfiguredClient{{
			ID: benchExchanger, Name: "Bench Exchanger", RedirectURIs: []string{"https://app.example.com/cb"},
			GrantTypes: []string{oauth.GrantAuthorizationCode}, AuthMethod: oauth.AuthClientSecretBasic,
			SecretHash: oauth.HashSecret(benchExchangerSecret),
		}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	e.server = server
	h = server.Handler()
	// One client, one kept-alive connection: the redirects of the
	// authorization endpoint are read, not followed.
	e.http = &http.Client{
		Transport:     &http.Transport{MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	tb.Cleanup(e.http.CloseIdleConnections)
	return e
}

// tbWriter sends the server's log to the benchmark's.
type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(b []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// do sends req as user (none: "") and returns the answer and its body.
func (e *benchEnv) do(method, path string, form url.Values, user string, headers ...string) (*http.Response, []byte) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.issuer+path, body)
	if err != nil {
		e.tb.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if user != "" {
		req.AddCookie(&http.Cookie{Name: userCookie, Value: user})
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.tb.Fatal(err)
	}
	return resp, b
}

// register registers a public client for both grants by Dynamic Client
// Registration.
func (e *benchEnv) register() client {
	md, _ := json.Marshal(map[string]any{
		"client_name":                "Bench Client",
		"redirect_uris":              []string{"http://127.0.0.1:33418/callback"},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"token_endpoint_auth_method": "none",
	})
	req, err := http.NewRequest(http.MethodPost, e.issuer+oauth.PathRegister, bytes.NewReader(md))
	if err != nil {
		e.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID     string   `json:"client_id"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		e.tb.Fatalf("register: %d %v", resp.StatusCode, err)
	}
	return client{ID: out.ClientID, RedirectURI: out.RedirectURIs[0]}
}

// benchCode is an authorization code and its PKCE verifier.
type benchCode struct{ code, verifier string }

const benchUser = "bench-user"

// authorize sends an authorization request of c as the bench user and
// returns its answer, and the verifier of its challenge.
func (e *benchEnv) authorize(c client) (*http.Response, []byte, string) {
	verifier, challenge := pkce()
	q := url.Values{
		"response_type": {"code"}, "client_id": {c.ID}, "redirect_uri": {c.RedirectURI}, "state": {"bench"},
		"scope": {"mcp:invoke"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "resource": {e.resource},
	}
	resp, body := e.do(http.MethodGet, oauth.PathAuthorize+"?"+q.Encode(), nil, benchUser)
	return resp, body, verifier
}

// redirectCode reads the code off the redirect to c.
func (e *benchEnv) redirectCode(c client, resp *http.Response) string {
	loc := resp.Header.Get("Location")
	u, err := url.Parse(loc)
	if resp.StatusCode/100 != 3 || err != nil || !strings.HasPrefix(loc, c.RedirectURI+"?") || u.Query().Get("code") == "" {
		e.tb.Fatalf("authorization answer %d to %q, want a redirect with a code", resp.StatusCode, loc)
	}
	return u.Query().Get("code")
}

// firstCode is the first code: the authorization request, its consent
// page and the approval.
func (e *benchEnv) firstCode(c client) benchCode {
	resp, body, verifier := e.authorize(c)
	if resp.StatusCode != http.StatusOK {
		e.tb.Fatalf("authorize: %d %s", resp.StatusCode, body)
	}
	m1, m2 := csrfField.FindSubmatch(body), requestField.FindSubmatch(body)
	if m1 == nil || m2 == nil {
		e.tb.Fatalf("no consent form in %q", body)
	}
	csrf, request := html.UnescapeString(string(m1[1])), html.UnescapeString(string(m2[1]))
	resp, _ = e.do(http.MethodPost, oauth.PathAuthorize, url.Values{
		"csrf_token": {csrf}, "request": {request}, "decision": {oauth.DecisionApprove},
	}, benchUser, "Origin", e.issuer)
	return benchCode{e.redirectCode(c, resp), verifier}
}

// codes makes n codes by authorization requests the remembered consent
// answers at once.
func (e *benchEnv) codes(c client, n int) []benchCode {
	out := make([]benchCode, 0, n)
	for range n {
		resp, _, verifier := e.authorize(c)
		out = append(out, benchCode{e.redirectCode(c, resp), verifier})
	}
	return out
}

// takeCode takes the next code of *codes, making a batch when it is empty.
func (e *benchEnv) takeCode(c client, codes *[]benchCode) benchCode {
	if len(*codes) == 0 {
		*codes = e.codes(c, codeBatch)
	}
	next := (*codes)[0]
	*codes = (*codes)[1:]
	return next
}

// token posts form to the token endpoint as the public client c and
// checks that it answers tokens.
func (e *benchEnv) token(c client, form url.Values) tokenAnswer {
	form.Set("client_id", c.ID)
	resp, body := e.do(http.MethodPost, oauth.PathToken, form, "")
	var a tokenAnswer
	if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != http.StatusOK || a.AccessToken == "" || a.RefreshToken == "" {
		e.tb.Fatalf("token answer %d %s (%v)", resp.StatusCode, body, err)
	}
	return a
}

func (e *benchEnv) redeem(c client, code benchCode) tokenAnswer {
	return e.token(c, url.Values{
		"grant_type": {"authorization_code"}, "code": {code.code}, "redirect_uri": {c.RedirectURI},
		"code_verifier": {code.verifier}, "resource": {e.resource},
	})
}

func (e *benchEnv) refresh(c client, refresh string) tokenAnswer {
	return e.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}})
}

// timedStore times the store calls of the token endpoint's grants, by the
// operation being measured (label), to tell where a grant's time goes.
type timedStore struct {
	store.Store
	mu      sync.Mutex
	current string
	calls   map[string][]time.Duration // "op/method"
	order   []string                   // "op/method", in their first call's order
}

// label sets the operation whose calls are recorded; "" or !measure
// records none.
func (s *timedStore) label(op string, measure bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = ""
	if measure {
		s.current = op
	}
}

// since records a call of method that started at t0.
func (s *timedStore) since(method string, t0 time.Time) {
	d := time.Since(t0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == "" {
		return
	}
	k := s.current + "/" + method
	if _, ok := s.calls[k]; !ok {
		s.order = append(s.order, k)
	}
	s.calls[k] = append(s.calls[k], d)
}

// names returns the methods op called, in their first call's order.
func (s *timedStore) names(op string) []string {
	var out []string
	for _, k := range s.order {
		if name, ok := strings.CutPrefix(k, op+"/"); ok {
			out = append(out, name)
		}
	}
	return out
}

func (s *timedStore) GetOAuthClient(ctx context.Context, id string) (store.OAuthClient, error) {
	defer s.since("GetOAuthClient", time.Now())
	return s.Store.GetOAuthClient(ctx, id)
}

func (s *timedStore) GetAuthorizationCode(ctx context.Context, codeHash string) (store.AuthorizationCode, error) {
	defer s.since("GetAuthorizationCode", time.Now())
	return s.Store.GetAuthorizationCode(ctx, codeHash)
}

func (s *timedStore) RedeemAuthorizationCode(ctx context.Context, codeHash, family string, now time.Time, g *store.TokenGrant) (store.AuthorizationCode, error) {
	defer s.since("RedeemAuthorizationCode", time.Now())
	return s.Store.RedeemAuthorizationCode(ctx, codeHash, family, now, g)
}

func (s *timedStore) GetRefreshToken(ctx context.Context, tokenHash string) (store.RefreshToken, error) {
	defer s.since("GetRefreshToken", time.Now())
	return s.Store.GetRefreshToken(ctx, tokenHash)
}

func (s *timedStore) RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, g store.TokenGrant) (store.RefreshToken, error) {
	defer s.since("RotateRefreshToken", time.Now())
	return s.Store.RotateRefreshToken(ctx, oldHash, now, g)
}

func (s *timedStore) AppendAudit(ctx context.Context, build func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	defer s.since("AppendAudit", time.Now())
	return s.Store.AppendAudit(ctx, build)
}

// percentile is the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's 1-minute load average ("?" where
// /proc/loadavg is not).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

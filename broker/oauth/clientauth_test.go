package oauth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// testKeys are the keys of the private_key_jwt tests, made once: RSA key
// generation is slow.
var testKeys = sync.OnceValue(func() (k struct{ rsa, rsa2, other *rsa.PrivateKey }) {
	for _, p := range []**rsa.PrivateKey{&k.rsa, &k.rsa2, &k.other} {
		var err error
		if *p, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	}
	return k
})

// testECKey is the ES256 key of the tests.
var testECKey = sync.OnceValue(func() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
})

// jwksOf is the public JWKS of keys, by kid.
func jwksOf(t *testing.T, keys map[string]crypto.PublicKey) json.RawMessage {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, kid := range slices.Sorted(maps.Keys(keys)) { // the same set, the same JSON
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: keys[kid], KeyID: kid, Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The configured clients of the tests.
const (
	jwtClient    = "ci-bot"
	basicClient  = "ops-basic"
	publicClient = "desk-public"
	jwtRedirect  = "https://ci.example.com/callback"
	basicSecret  = "a-secret-of-the-basic-client-0123456789"
)

// configuredClients are jwtClient (private_key_jwt, RSA kid rsa-1 and EC
// kid ec-1, inline), basicClient and publicClient.
func configuredClients(t *testing.T) []oauth.ConfiguredClient {
	k := testKeys()
	return []oauth.ConfiguredClient{{
		ID: jwtClient, Name: "CI bot", RedirectURIs: []string{jwtRedirect}, AuthMethod: oauth.AuthPrivateKeyJWT,
		JWKS: jwksOf(t, map[string]crypto.PublicKey{"rsa-1": &k.rsa.PublicKey, "ec-1": &testECKey().PublicKey}),
	}, {
		ID: basicClient, Name: "Ops", RedirectURIs: []string{"https://ops.example.com/cb"}, AuthMethod: oauth.AuthClientSecretBasic,
		SecretHash: oauth.HashSecret(basicSecret),
	}, {
		ID: publicClient, Name: "Desk", RedirectURIs: []string{"http://127.0.0.1/cb"}, AuthMethod: oauth.AuthNone,
	}}
}

// newJWTEnv is a server with configuredClients put in st; edit may change
// its options further.
func newJWTEnv(t *testing.T, st store.Store, edit func(*oauth.ServerOptions)) *env {
	t.Helper()
	e := newEnv(t, st, func(o *oauth.ServerOptions) {
		o.ConfiguredClients = configuredClients(t)
		if edit != nil {
			edit(o)
		}
	})
	if err := e.server.PutConfiguredClients(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// assertion signs claims with key by method, kid in the header (none:
// "").
func assertion(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// goodClaims are the claims of a valid assertion of jwtClient to e.
func (e *env) goodClaims() jwt.MapClaims {
	now := e.clock.Now()
	return jwt.MapClaims{
		"iss": jwtClient, "sub": jwtClient, "aud": e.issuer + oauth.PathToken,
		"exp": now.Add(time.Minute).Unix(), "iat": now.Unix(), "jti": oauth.NewSecret(),
	}
}

// goodAssertion is a valid RS256 assertion of jwtClient to e.
func (e *env) goodAssertion() string {
	return assertion(e.t, jwt.SigningMethodRS256, testKeys().rsa, "rsa-1", e.goodClaims())
}

// jwtToken posts form to the token endpoint with the client assertion
// raw, and extra headers.
func (e *env) jwtToken(raw string, form url.Values, headers ...string) tokenAnswer {
	e.t.Helper()
	form = cloneValues(form)
	form.Set("client_assertion_type", oauth.ClientAssertionType)
	form.Set("client_assertion", raw)
	return e.postToken(oauth.PathToken, form, headers...)
}

// postToken posts form to path (the token or revocation endpoint) and
// reads the answer.
func (e *env) postToken(path string, form url.Values, headers ...string) tokenAnswer {
	e.t.Helper()
	resp, body := e.postForm(path, form, "", headers...)
	var a tokenAnswer
	if body != "" {
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			e.t.Fatalf("answer %d %q: %v", resp.StatusCode, body, err)
		}
	}
	a.Status, a.header = resp.StatusCode, resp.Header
	return a
}

// redeemForm is the form of a code's redemption by c.
func (e *env) redeemForm(c client, code, verifier string) url.Values {
	return url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.RedirectURI},
		"code_verifier": {verifier}, "resource": {e.resource},
	}
}

// Every refusal of a client assertion is 401 invalid_client and issues
// nothing: the code each case presents is still good afterwards.
func TestClientAssertionRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newJWTEnv(t, st, nil)
		k := testKeys()
		c := client{ID: jwtClient, RedirectURI: jwtRedirect}
		code, verifier := e.code(c, "alice", nil)
		form := e.redeemForm(c, code, verifier)
		now := e.clock.Now()
		pem := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&k.rsa.PublicKey))})
		with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
			cl := e.goodClaims()
			edit(cl)
			return cl
		}
		rs := func(claims jwt.MapClaims) string { return assertion(t, jwt.SigningMethodRS256, k.rsa, "rsa-1", claims) }
		replayed := e.goodAssertion()
		if tok := e.jwtToken(replayed, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nothing"}}); tok.Error != oauth.CodeInvalidGrant {
			t.Fatalf("a good assertion with a bogus refresh token: %+v, want it authenticated (invalid_grant)", tok)
		}
		basic := httptest.NewRequest(http.MethodPost, "/", nil)
		basic.SetBasicAuth(basicClient, basicSecret)
		for _, tc := range []struct {
			name    string
			raw     string
			form    url.Values // changes of the form
			headers []string
			want    string // in the error_description
		}{
			{name: "signed by another key", want: "signature is not valid", raw: assertion(t, jwt.SigningMethodRS256, k.other, "rsa-1", e.goodClaims())},
			{name: "tampered", want: "signature is not valid", raw: func() string {
				p := strings.Split(e.goodAssertion(), ".")
				other := strings.Split(rs(with(func(c jwt.MapClaims) { c["exp"] = now.Add(4 * time.Minute).Unix() })), ".")
				return p[0] + "." + other[1] + "." + p[2]
			}()},
			{name: "alg none", want: "signature is not valid", raw: assertion(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa-1", e.goodClaims())},
			{name: "HS256 keyed with the public key", want: "signature is not valid", raw: assertion(t, jwt.SigningMethodHS256, pem, "rsa-1", e.goodClaims())},
			{name: "PS256", want: "signature is not valid", raw: assertion(t, jwt.SigningMethodPS256, k.rsa, "rsa-1", e.goodClaims())},
			{name: "RS256 header on the EC key's kid", want: "No key", raw: assertion(t, jwt.SigningMethodRS256, k.rsa, "ec-1", e.goodClaims())},
			{name: "unknown kid", want: "No key", raw: assertion(t, jwt.SigningMethodRS256, k.rsa, "rsa-9", e.goodClaims())},
			{name: "wrong iss", want: "iss and sub", raw: rs(with(func(c jwt.MapClaims) { c["iss"] = "someone" }))},
			{name: "wrong sub", want: "iss and sub", raw: rs(with(func(c jwt.MapClaims) { c["sub"] = "someone" }))},
			{name: "no iss nor sub", want: "iss and sub", raw: rs(with(func(c jwt.MapClaims) { delete(c, "iss"); delete(c, "sub") }))},
			{name: "client_id differs", want: "client_id differs", raw: e.goodAssertion(), form: url.Values{"client_id": {basicClient}}},
			{name: "wrong aud", want: "aud must name this server", raw: rs(with(func(c jwt.MapClaims) { c["aud"] = "https://elsewhere.example.com/oauth/token" }))},
			{name: "revocation endpoint as aud", want: "aud must name this server", raw: rs(with(func(c jwt.MapClaims) { c["aud"] = e.issuer + oauth.PathRevoke }))},
			{name: "no aud", want: "aud", raw: rs(with(func(c jwt.MapClaims) { delete(c, "aud") }))},
			{name: "expired", want: "expired", raw: rs(with(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }))},
			{name: "no exp", want: "exp", raw: rs(with(func(c jwt.MapClaims) { delete(c, "exp") }))},
			{name: "exp too far", want: "more than 5 minutes", raw: rs(with(func(c jwt.MapClaims) { c["exp"] = now.Add(6 * time.Minute).Unix() }))},
			{name: "iat in the future", want: "in the future", raw: rs(with(func(c jwt.MapClaims) { c["iat"] = now.Add(2 * time.Minute).Unix() }))},
			{name: "nbf in the future", want: "in the future", raw: rs(with(func(c jwt.MapClaims) { c["nbf"] = now.Add(2 * time.Minute).Unix() }))},
			{name: "no jti", want: "no jti", raw: rs(with(func(c jwt.MapClaims) { delete(c, "jti") }))},
			{name: "replayed jti", want: "already used", raw: replayed},
			{name: "wrong assertion type", want: "client_assertion_type must be", raw: e.goodAssertion(), form: url.Values{"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:saml2-bearer"}}},
			{name: "empty assertion", want: "client_assertion is required", raw: ""},
			{name: "too large", want: "too large", raw: rs(with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", 9<<10) }))},
			{name: "not a JWT", want: "not a JWT", raw: "not-a-jwt"},
			{name: "assertion and Basic", want: "one client authentication method", raw: e.goodAssertion(), headers: []string{"Authorization", basic.Header.Get("Authorization")}},
			{name: "a client_secret_basic client's assertion", want: "HTTP Basic", raw: assertion(t, jwt.SigningMethodRS256, k.rsa, "rsa-1",
				with(func(c jwt.MapClaims) { c["iss"], c["sub"] = basicClient, basicClient }))},
			{name: "a public client's assertion", want: "public", raw: assertion(t, jwt.SigningMethodRS256, k.rsa, "rsa-1",
				with(func(c jwt.MapClaims) { c["iss"], c["sub"] = publicClient, publicClient }))},
			{name: "an unknown client's assertion", want: "Unknown client", raw: assertion(t, jwt.SigningMethodRS256, k.rsa, "rsa-1",
				with(func(c jwt.MapClaims) { c["iss"], c["sub"] = "nobody", "nobody" }))},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := cloneValues(form)
				for name, v := range tc.form {
					f[name] = v
				}
				f.Set("client_assertion", tc.raw)
				if !f.Has("client_assertion_type") {
					f.Set("client_assertion_type", oauth.ClientAssertionType)
				}
				tok := e.postToken(oauth.PathToken, f, tc.headers...)
				if tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient || tok.AccessToken != "" || tok.Description == "" {
					t.Errorf("answer %+v, want 401 invalid_client and no token", tok)
				}
				if !strings.Contains(tok.Description, tc.want) {
					t.Errorf("error_description %q, want it to say %q", tok.Description, tc.want)
				}
				// The revocation endpoint authenticates alike.
				rf := url.Values{"token": {"nothing"}}
				for name, v := range f {
					if strings.HasPrefix(name, "client_") {
						rf[name] = v
					}
				}
				if tc.name != "replayed jti" && !strings.Contains(tc.name, "client's assertion") {
					if rev := e.postToken(oauth.PathRevoke, rf, tc.headers...); rev.Status != http.StatusUnauthorized || rev.Error != oauth.CodeInvalidClient {
						t.Errorf("revocation endpoint: %+v, want 401 invalid_client", rev)
					}
				}
			})
		}
		// The basic and public clients still authenticate as they do, and
		// jwtClient may not use the other methods.
		jwtBasic := httptest.NewRequest(http.MethodPost, "/", nil)
		jwtBasic.SetBasicAuth(jwtClient, basicSecret)
		for name, headers := range map[string][]string{"no credential": nil, "Basic": {"Authorization", jwtBasic.Header.Get("Authorization")}} {
			tok := e.postToken(oauth.PathToken, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {jwtClient}}, headers...)
			if tok.Error != oauth.CodeInvalidClient || !strings.Contains(tok.Description, "must authenticate with a client assertion") {
				t.Errorf("jwtClient with %s: %+v", name, tok)
			}
		}
		// The code was not used by any refusal: it redeems now, with an
		// ES256 assertion and no kid (the set has one EC key).
		es := assertion(t, jwt.SigningMethodES256, testECKey(), "", e.goodClaims())
		if tok := e.jwtToken(es, form); tok.Status != http.StatusOK || tok.AccessToken == "" {
			t.Fatalf("redeem after the refusals: %+v", tok)
		}
		if n := strings.Count(strings.Join(e.auditKinds(), " "), "oauth_token_issued"); n != 1 {
			t.Errorf("%d tokens issued, want 1", n)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A client assertion is single use across replicas: two servers of one
// issuer over one store.
func TestClientAssertionReplayAcrossReplicas(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		var opts oauth.ServerOptions
		e := newJWTEnv(t, st, func(o *oauth.ServerOptions) { opts = *o })
		replica, err := oauth.NewServer(&opts)
		if err != nil {
			t.Fatal(err)
		}
		h := replica.Handler()
		post := func(raw string) tokenAnswer {
			form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nothing"},
				"client_assertion_type": {oauth.ClientAssertionType}, "client_assertion": {raw}}
			req := httptest.NewRequest(http.MethodPost, e.issuer+oauth.PathToken, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var a tokenAnswer
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			a.Status = rec.Code
			return a
		}
		raw := e.goodAssertion()
		if tok := e.jwtToken(raw, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nothing"}}); tok.Error != oauth.CodeInvalidGrant {
			t.Fatalf("first use: %+v, want authenticated (invalid_grant for the bogus token)", tok)
		}
		if tok := post(raw); tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient {
			t.Errorf("replayed on the other replica: %+v, want 401 invalid_client", tok)
		}
		if tok := post(e.goodAssertion()); tok.Error != oauth.CodeInvalidGrant {
			t.Errorf("a fresh assertion on the other replica: %+v, want authenticated", tok)
		}

		// Of concurrent uses of one assertion, one authenticates.
		raw = e.goodAssertion()
		var wg sync.WaitGroup
		answers := make([]tokenAnswer, 6)
		for i := range answers {
			wg.Go(func() { answers[i] = post(raw) })
		}
		wg.Wait()
		n := 0
		for _, a := range answers {
			if a.Error == oauth.CodeInvalidGrant {
				n++
			} else if a.Error != oauth.CodeInvalidClient {
				t.Errorf("concurrent use: %+v", a)
			}
		}
		if n != 1 {
			t.Errorf("%d concurrent uses of one assertion authenticated, want 1", n)
		}
	})
}

// A configured private_key_jwt client through the whole authorization
// code flow: consent, code, token, refresh and revocation, each
// authenticated by an assertion; the issuer is as good an aud as the token
// endpoint.
func TestPrivateKeyJWTFlow(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newJWTEnv(t, st, nil)
		c := client{ID: jwtClient, RedirectURI: jwtRedirect}
		verifier, challenge := pkce()
		q := e.authQuery(c, challenge, nil)
		csrf, request := e.consentPage(q, "alice")
		rq := redirectQuery(t, e.approve(csrf, request, "alice", oauth.DecisionApprove), jwtRedirect)
		tok := e.jwtToken(e.goodAssertion(), e.redeemForm(c, rq.Get("code"), verifier))
		if tok.Status != http.StatusOK || tok.AccessToken == "" || tok.RefreshToken == "" {
			t.Fatalf("token: %+v", tok)
		}
		issuerAud := e.goodClaims()
		issuerAud["aud"] = []string{"https://other.example.com", e.issuer}
		next := e.jwtToken(assertion(t, jwt.SigningMethodRS256, testKeys().rsa, "rsa-1", issuerAud),
			url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {jwtClient}})
		if next.Status != http.StatusOK || next.RefreshToken == "" {
			t.Fatalf("refresh: %+v", next)
		}
		rev := e.postToken(oauth.PathRevoke, url.Values{"token": {next.RefreshToken},
			"client_assertion_type": {oauth.ClientAssertionType}, "client_assertion": {e.goodAssertion()}})
		if rev.Status != http.StatusOK {
			t.Fatalf("revoke: %+v", rev)
		}
		if again := e.jwtToken(e.goodAssertion(), url.Values{"grant_type": {"refresh_token"}, "refresh_token": {next.RefreshToken}}); again.Error != oauth.CodeInvalidGrant {
			t.Errorf("refresh after the revocation: %+v", again)
		}
		// A private_key_jwt client is confidential: its loopback redirect
		// URIs, had it any, would get no port leniency, and the consent
		// page names it as configured.
		cl, err := st.GetOAuthClient(context.Background(), jwtClient)
		if err != nil || cl.Kind != store.OAuthClientConfigured || cl.LastUsedAt.IsZero() {
			t.Errorf("stored client %+v, %v", cl, err)
		}
	})
}

// A jwks_uri key set is fetched through the SSRF-guarded Fetcher, cached,
// and fetched again for a kid not in it: a client rotates its key.
func TestPrivateKeyJWTKeySetURI(t *testing.T) {
	t.Parallel()
	k := testKeys()
	var mu sync.Mutex
	keys := map[string]crypto.PublicKey{"rsa-1": &k.rsa.PublicKey}
	fetches := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fetches++
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(jwksOf(t, keys))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	f, err := clientmeta.New(&clientmeta.Options{AllowLoopbackHTTP: true, RootCAs: pool,
		Resolver: func(context.Context, string, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, storetest.NewSQLite(t), func(o *oauth.ServerOptions) {
		o.KeySets = f
		o.ConfiguredClients = []oauth.ConfiguredClient{{ID: jwtClient, RedirectURIs: []string{jwtRedirect},
			AuthMethod: oauth.AuthPrivateKeyJWT, JWKSURI: "https://keys.example.com:" + u.Port() + "/jwks.json"}}
	})
	if err := e.server.PutConfiguredClients(context.Background()); err != nil {
		t.Fatal(err)
	}
	bogus := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nothing"}}
	for range 2 {
		if tok := e.jwtToken(e.goodAssertion(), bogus); tok.Error != oauth.CodeInvalidGrant {
			t.Fatalf("assertion by the jwks_uri's key: %+v, want authenticated", tok)
		}
	}
	// The client rotates to a new key: the first assertion by it makes
	// the set be fetched again, once the minimum interval has passed.
	mu.Lock()
	keys = map[string]crypto.PublicKey{"rsa-2": &k.rsa2.PublicKey}
	mu.Unlock()
	e.clock.Advance(11 * time.Second)
	rotated := func() string {
		return assertion(t, jwt.SigningMethodRS256, k.rsa2, "rsa-2", e.goodClaims())
	}
	if tok := e.jwtToken(rotated(), bogus); tok.Error != oauth.CodeInvalidGrant {
		t.Fatalf("assertion by the rotated key: %+v, want authenticated", tok)
	}
	// A flood of unknown kids fetches no more.
	for range 5 {
		if tok := e.jwtToken(assertion(t, jwt.SigningMethodRS256, k.other, "made-up", e.goodClaims()), bogus); tok.Error != oauth.CodeInvalidClient {
			t.Fatalf("unknown kid: %+v", tok)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fetches != 2 {
		t.Errorf("%d fetches of the key set, want 2 (the first, and the rotation)", fetches)
	}
}

// A configured client the server's configuration lacks (removed, or not
// yet on this replica) is unknown to it, at the token and authorization
// endpoints, though the store keeps it.
func TestRetiredConfiguredClient(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	newJWTEnv(t, st, nil)
	e := newEnv(t, st, nil) // configured with no client
	if tok := e.postToken(oauth.PathToken, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {publicClient}}); tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient {
		t.Errorf("token endpoint: %+v, want 401 invalid_client", tok)
	}
	_, challenge := pkce()
	q := e.authQuery(client{ID: publicClient, RedirectURI: "http://127.0.0.1/cb"}, challenge, nil)
	if resp, body := e.get(oauth.PathAuthorize+"?"+q.Encode(), "alice"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Unknown client_id") {
		t.Errorf("authorization endpoint: %d %s, want 400 Unknown client_id", resp.StatusCode, body)
	}
	if _, err := st.GetOAuthClient(context.Background(), publicClient); err != nil {
		t.Errorf("the store lost the client: %v", err)
	}
}

// NewServer refuses bad configured clients, saying which and why.
func TestConfiguredClientsRefused(t *testing.T) {
	t.Parallel()
	k := testKeys()
	private, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.rsa, KeyID: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	good := oauth.ConfiguredClient{ID: "ok", RedirectURIs: []string{jwtRedirect}, AuthMethod: oauth.AuthNone}
	for _, tc := range []struct {
		name string
		edit func(*oauth.ConfiguredClient)
		want string
	}{
		{"an https id", func(c *oauth.ConfiguredClient) { c.ID = "https://app.example.com/client.json" }, "letters, digits"},
		{"a registered id", func(c *oauth.ConfiguredClient) { c.ID = "usher-dcr-abc" }, "usher-dcr-"},
		{"no id", func(c *oauth.ConfiguredClient) { c.ID = "" }, "empty"},
		{"a javascript redirect", func(c *oauth.ConfiguredClient) { c.RedirectURIs = []string{"javascript:alert(1)"} }, "redirect URI"},
		{"no redirect", func(c *oauth.ConfiguredClient) { c.RedirectURIs = nil }, "redirect_uris is required"},
		{"an unknown grant", func(c *oauth.ConfiguredClient) { c.GrantTypes = []string{"password"} }, "grant_types"},
		{"refresh alone", func(c *oauth.ConfiguredClient) { c.GrantTypes = []string{"refresh_token"} }, "needs authorization_code"},
		{"an unknown method", func(c *oauth.ConfiguredClient) { c.AuthMethod = "client_secret_post" }, "auth must be"},
		{"a plain secret", func(c *oauth.ConfiguredClient) { c.AuthMethod, c.SecretHash = oauth.AuthClientSecretBasic, "hunter2" }, "SHA-256"},
		{"a short hash", func(c *oauth.ConfiguredClient) { c.AuthMethod, c.SecretHash = oauth.AuthClientSecretBasic, "abcd" }, "SHA-256"},
		{"a secret for none", func(c *oauth.ConfiguredClient) { c.SecretHash = oauth.HashSecret("x") }, "only for client_secret_basic"},
		{"jwt without keys", func(c *oauth.ConfiguredClient) { c.AuthMethod = oauth.AuthPrivateKeyJWT }, "jwks_uri or jwks"},
		{"an http jwks_uri", func(c *oauth.ConfiguredClient) {
			c.AuthMethod, c.JWKSURI = oauth.AuthPrivateKeyJWT, "http://keys.example.com/jwks.json"
		}, "https"},
		{"a private key", func(c *oauth.ConfiguredClient) { c.AuthMethod, c.JWKS = oauth.AuthPrivateKeyJWT, private }, "private key"},
		{"a short RSA key", func(c *oauth.ConfiguredClient) {
			small, _ := rsa.GenerateKey(rand.Reader, 1024)
			c.AuthMethod, c.JWKS = oauth.AuthPrivateKeyJWT, jwksOf(t, map[string]crypto.PublicKey{"s": &small.PublicKey})
		}, "no public RS256"},
		{"keys for none", func(c *oauth.ConfiguredClient) { c.JWKSURI = "https://keys.example.com/jwks.json" }, "only for private_key_jwt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			var opts oauth.ServerOptions
			newEnv(t, storetest.NewSQLite(t), func(o *oauth.ServerOptions) { opts = *o })
			opts.ConfiguredClients = []oauth.ConfiguredClient{c}
			_, err := oauth.NewServer(&opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewServer = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	var opts oauth.ServerOptions
	newEnv(t, storetest.NewSQLite(t), func(o *oauth.ServerOptions) { opts = *o })
	opts.ConfiguredClients = []oauth.ConfiguredClient{good, good}
	if _, err := oauth.NewServer(&opts); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a client twice: %v", err)
	}
}

// An id a client of another kind holds is refused at start.
func TestConfiguredClientIDTaken(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	if _, err := st.CreateOAuthClient(context.Background(), store.OAuthClient{ID: jwtClient, Kind: store.OAuthClientRegistered, AuthMethod: "none"}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, func(o *oauth.ServerOptions) { o.ConfiguredClients = configuredClients(t) })
	if err := e.server.PutConfiguredClients(context.Background()); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Errorf("PutConfiguredClients = %v, want the id taken", err)
	}
}

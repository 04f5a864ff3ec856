package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The API's issuer in the token exchange tests: Entra-shaped identifiers.
const (
	apiAudience = "api://usher"
	apiScope    = "access_as_user"
	apiTenant   = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	otherTenant = "f8cdef31-a31e-4b4a-93e4-5f571e91255a"
	apiUserOID  = "00000000-0000-0000-66f3-3332eca7ea81"
	apiKID      = "api-key-1"
)

// apiKeys are generated once: RSA key generation is the slow part.
var apiKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
	var keys [2]*rsa.PrivateKey
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// apiIssuer is a real OIDC issuer of access tokens for Usher's API over
// loopback HTTP, as Entra is for a deployment: discovery, a key set, and
// RS256 tokens signed with a real key.
type apiIssuer struct {
	srv   *httptest.Server
	key   *rsa.PrivateKey // published under apiKID
	other *rsa.PrivateKey // never published
}

func newAPIIssuer(tb testing.TB) *apiIssuer {
	tb.Helper()
	keys := apiKeys()
	ai := &apiIssuer{key: keys[0], other: keys[1]}
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"issuer": ai.srv.URL, "jwks_uri": ai.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: ai.key.Public(), KeyID: apiKID, Use: "sig", Algorithm: "RS256"}}})
	})
	ai.srv = httptest.NewServer(mux)
	tb.Cleanup(ai.srv.Close)
	return ai
}

// verifier is the API's verifier of the issuer's tokens, as cmd/usher
// builds it: the API's audience and scope, one allowed tenant.
func (ai *apiIssuer) verifier(tb testing.TB) *identity.Verifier {
	tb.Helper()
	v, err := identity.New(context.Background(), &identity.Options{
		Issuer: ai.srv.URL, Audiences: []string{apiAudience}, RequiredScopes: []string{apiScope},
		Tenants: []string{apiTenant}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// claims are the claims of a person's access token for the API, as
// Entra v2 issues them, valid for an hour.
func (ai *apiIssuer) claims() map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": ai.srv.URL, "aud": apiAudience, "tid": apiTenant, "oid": apiUserOID,
		"sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", "azp": "0d4c8a43-42b7-4b50-a1c3-6f7fba7b8e6e",
		"scp": apiScope + " Sessions.Read", "ver": "2.0", "name": "Ada Lovelace",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"groups": []string{"b1f4a0c5-4c7e-4a0e-9a2b-2c4f0f5d3e11", "staff"},
	}
}

// principal is the person the claims speak for, as the API sees them.
func (ai *apiIssuer) principal() identity.Principal {
	return identity.Principal{Issuer: ai.srv.URL, Tenant: apiTenant, ObjectID: apiUserOID}
}

// sign signs claims with RS256 under kid.
func sign(tb testing.TB, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	tb.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		tb.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		tb.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := obj.CompactSerialize()
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// token is a person's access token for the API, its claims changed by
// edit.
func (ai *apiIssuer) token(tb testing.TB, edit func(map[string]any)) string {
	tb.Helper()
	c := ai.claims()
	if edit != nil {
		edit(c)
	}
	return sign(tb, ai.key, apiKID, c)
}

// The clients of the exchange tests, stored as an operator's
// configuration or a registration would store them.
const (
	exchanger       = "usher-test-exchanger" // listed, confidential
	unlisted        = "usher-test-unlisted"  // confidential, not listed
	publicExchanger = "usher-test-public"    // listed, public
	revokedListed   = "usher-test-revoked"   // listed, confidential, revoked
	exchangerSecret = "exchanger-secret-0123456789abcdef"
)

// exchangeEnv is an authorization server whose token exchange takes the
// tokens of ai, for the clients above.
func exchangeEnv(t *testing.T, st store.Store, ai *apiIssuer) *env {
	t.Helper()
	v := ai.verifier(t)
	var configured []oauth.ConfiguredClient
	for _, c := range []oauth.ConfiguredClient{
		{ID: exchanger, AuthMethod: oauth.AuthClientSecretBasic, SecretHash: oauth.HashSecret(exchangerSecret)},
		{ID: unlisted, AuthMethod: oauth.AuthClientSecretBasic, SecretHash: oauth.HashSecret(exchangerSecret)},
		{ID: publicExchanger, AuthMethod: oauth.AuthNone},
		{ID: revokedListed, AuthMethod: oauth.AuthClientSecretBasic, SecretHash: oauth.HashSecret(exchangerSecret)},
	} {
		c.Name = c.ID
		c.RedirectURIs, c.GrantTypes = []string{"https://app.example.com/cb"}, []string{oauth.GrantAuthorizationCode}
		configured = append(configured, c)
	}
	e := newEnv(t, st, func(o *oauth.ServerOptions) {
		o.VerifySubjectToken = v.Verify
		o.ExchangeClients = []string{exchanger, publicExchanger, revokedListed}
		o.ConfiguredClients = configured
	})
	ctx := context.Background()
	if err := e.server.PutConfiguredClients(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeOAuthClient(ctx, revokedListed, time.Now()); err != nil {
		t.Fatal(err)
	}
	return e
}

// exchangeForm is a token exchange request of subject for the MCP
// resource, changed by edit.
func (e *env) exchangeForm(subject string, edit func(url.Values)) url.Values {
	f := url.Values{
		"grant_type":         {oauth.GrantTokenExchange},
		"subject_token":      {subject},
		"subject_token_type": {oauth.TokenTypeAccessToken},
		"resource":           {e.resource},
	}
	if edit != nil {
		edit(f)
	}
	return f
}

// exchangeAnswer is the token endpoint's answer to an exchange.
type exchangeAnswer struct {
	tokenAnswer
	IssuedTokenType string `json:"issued_token_type"`
}

// exchange posts form to the token endpoint as the client id (with the
// exchangers' secret, by HTTP Basic, unless id is the public client).
func (e *env) exchange(id string, form url.Values) exchangeAnswer {
	e.t.Helper()
	var headers []string
	if id == publicExchanger {
		form = cloneValues(form)
		form.Set("client_id", id)
	} else {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(exchangerSecret))
		headers = []string{"Authorization", req.Header.Get("Authorization")}
	}
	resp, body := e.postForm(oauth.PathToken, form, "", headers...)
	var a exchangeAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		e.t.Fatalf("token answer %d %q: %v", resp.StatusCode, body, err)
	}
	a.Status, a.header = resp.StatusCode, resp.Header
	return a
}

// exchangedRecords are the audit records of exchanged tokens.
func (e *env) exchangedRecords() []store.AuditRecord {
	e.t.Helper()
	recs, err := e.st.AuditRecords(context.Background(), 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.AuditRecord
	for _, r := range recs {
		if r.Kind == "oauth_token_exchanged" {
			out = append(out, r)
		}
	}
	return out
}

// A person's access token for the API, exchanged by a listed confidential
// client, becomes a broker token for the MCP resource that the MCP
// server's verifier accepts: the person as sub with tenant and groups, the
// client as client_id and act; no refresh token; audited by jti, without
// a token in the record.
func TestTokenExchange(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		ai := newAPIIssuer(t)
		e := exchangeEnv(t, st, ai)
		subject := ai.token(t, nil)

		a := e.exchange(exchanger, e.exchangeForm(subject, func(f url.Values) { f.Set("scope", "mcp:invoke") }))
		if a.Status != http.StatusOK || a.IssuedTokenType != oauth.TokenTypeAccessToken || a.TokenType != "Bearer" ||
			a.Scope != "mcp:invoke" || a.ExpiresIn <= 0 || a.ExpiresIn > 300 || a.RefreshToken != "" {
			t.Fatalf("exchange: %+v", a)
		}
		if a.header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q", a.header.Get("Cache-Control"))
		}
		v, err := broker.NewVerifier(e.keys, &broker.VerifierOptions{Issuer: e.issuer, Audience: e.resource, Now: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		claims, err := v.Verify(context.Background(), a.AccessToken)
		if err != nil {
			t.Fatalf("the exchanged token does not verify at the MCP server: %v", err)
		}
		p := ai.principal()
		if claims.Subject != p.ID() || claims.ClientID != exchanger || claims.Actor != exchanger || claims.Tenant != apiTenant ||
			!slices.Equal(claims.Groups, []string{"b1f4a0c5-4c7e-4a0e-9a2b-2c4f0f5d3e11", "staff"}) ||
			!slices.Equal(claims.Scopes, []string{broker.ScopeInvoke}) || claims.RunID != "" {
			t.Errorf("claims %+v, want sub %s, client_id and act %s, the tenant and the groups", claims, p.ID(), exchanger)
		}
		if got := claims.ExpiresAt.Sub(claims.IssuedAt); got != broker.DefaultTokenLifetime {
			t.Errorf("lifetime %s, want %s", got, broker.DefaultTokenLifetime)
		}

		recs := e.exchangedRecords()
		if len(recs) != 1 || recs[0].TokenJTI != claims.ID || recs[0].ClientID != exchanger || recs[0].Principal != p.ID() {
			t.Fatalf("audit records %+v, want one for jti %s", recs, claims.ID)
		}
		var details map[string]string
		if err := json.Unmarshal(recs[0].Details, &details); err != nil || details["resource"] != e.resource ||
			details["subject_token_type"] != oauth.TokenTypeAccessToken {
			t.Errorf("audit details %s", recs[0].Details)
		}

		// A JWT-labelled subject token is the same access token; the scope
		// may be left out; audience may repeat the resource.
		b := e.exchange(exchanger, e.exchangeForm(subject, func(f url.Values) {
			f.Set("subject_token_type", oauth.TokenTypeJWT)
			f.Set("audience", e.resource)
			f.Set("requested_token_type", oauth.TokenTypeAccessToken)
		}))
		if b.Status != http.StatusOK || b.Scope != "mcp:invoke" {
			t.Fatalf("exchange of a JWT-labelled token: %+v", b)
		}
		if c, err := v.Verify(context.Background(), b.AccessToken); err != nil || c.ID == claims.ID {
			t.Errorf("second exchange: %v, jti %s", err, c.ID)
		}
		if n := len(e.exchangedRecords()); n != 2 {
			t.Errorf("%d exchange records, want 2", n)
		}
		assertNoSecretsAudited(t, st, subject, a.AccessToken, b.AccessToken, exchangerSecret)

		// The metadata announces the grant.
		resp, body := e.get("/.well-known/oauth-authorization-server", "")
		var m oauth.Metadata
		if err := json.Unmarshal([]byte(body), &m); resp.StatusCode != http.StatusOK || err != nil ||
			!slices.Contains(m.GrantTypesSupported, oauth.GrantTokenExchange) {
			t.Errorf("metadata %d %s: want the token exchange grant", resp.StatusCode, body)
		}
	})
}

// Refused exchanges: each a clear OAuth error, no token, nothing audited
// as issued or exchanged.
func TestTokenExchangeRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		ai := newAPIIssuer(t)
		e := exchangeEnv(t, st, ai)
		good := ai.token(t, nil)
		claim := func(k string, v any) string {
			return ai.token(t, func(c map[string]any) { c[k] = v })
		}
		manyGroups := make([]string, broker.MaxGroups+1)
		for i := range manyGroups {
			manyGroups[i] = fmt.Sprintf("group-%d", i)
		}
		expired := ai.token(t, func(c map[string]any) {
			past := time.Now().Add(-2 * time.Hour)
			c["iat"], c["nbf"], c["exp"] = past.Unix(), past.Unix(), past.Add(time.Hour).Unix()
		})
		appOnly := ai.token(t, func(c map[string]any) { c["idtyp"] = "app"; c["roles"] = []string{"Usher.Admin"} })
		rolesOnly := ai.token(t, func(c map[string]any) { delete(c, "scp"); c["roles"] = []string{"Usher.Admin"} })
		groupsOverage := ai.token(t, func(c map[string]any) {
			delete(c, "groups")
			c["_claim_names"] = map[string]string{"groups": "src1"}
			c["_claim_sources"] = map[string]any{"src1": map[string]string{"endpoint": "https://graph.windows.net/t/users/u/getMemberObjects"}}
		})
		badSignature := sign(t, ai.other, apiKID, ai.claims())
		setParam := func(k, v string) func(url.Values) { return func(f url.Values) { f.Set(k, v) } }
		for _, tc := range []struct {
			name    string
			client  string
			subject string
			edit    func(url.Values)
			status  int
			code    string
			says    string // in the description
		}{
			// The subject token: what the API refuses (RFC 8693 §2.2.2:
			// invalid_request).
			{"wrong audience", exchanger, claim("aud", "api://another-api"), nil, 400, oauth.CodeInvalidRequest, "not a valid access token"},
			{"expired", exchanger, expired, nil, 400, oauth.CodeInvalidRequest, "not a valid access token"},
			{"other tenant", exchanger, claim("tid", otherTenant), nil, 400, oauth.CodeInvalidRequest, "tenant is not allowed"},
			{"app-only: idtyp app", exchanger, appOnly, nil, 400, oauth.CodeInvalidRequest, "an application, not a person"},
			{"app-only: roles, no scope", exchanger, rolesOnly, nil, 400, oauth.CodeInvalidRequest, "an application, not a person"},
			{"without the API's scope", exchanger, claim("scp", "Sessions.Read"), nil, 400, oauth.CodeInvalidRequest, "lacks the API's scope"},
			{"wrong issuer", exchanger, claim("iss", "https://login.example.com/other/v2.0"), nil, 400, oauth.CodeInvalidRequest, "not a valid access token"},
			{"bad signature", exchanger, badSignature, nil, 400, oauth.CodeInvalidRequest, "not a valid access token"},
			{"garbage", exchanger, "not-a-token", nil, 400, oauth.CodeInvalidRequest, "not a valid access token"},
			{"oversized", exchanger, good + strings.Repeat("A", 20<<10), nil, 400, oauth.CodeInvalidRequest, "larger than"},
			{"groups overage: too many groups to list", exchanger, groupsOverage, nil, 400, oauth.CodeInvalidRequest, "does not list its person's groups"},
			{"more groups than a broker token carries", exchanger, claim("groups", manyGroups), nil, 400, oauth.CodeInvalidRequest, "at most 64 groups"},
			// The parameters.
			{"no subject_token", exchanger, "", nil, 400, oauth.CodeInvalidRequest, "subject_token is required"},
			{"no subject_token_type", exchanger, good, func(f url.Values) { f.Del("subject_token_type") }, 400, oauth.CodeInvalidRequest, "subject_token_type is required"},
			{"an ID token type", exchanger, good, setParam("subject_token_type", "urn:ietf:params:oauth:token-type:id_token"), 400, oauth.CodeInvalidRequest, "subject_token_type must be"},
			{"a refresh token type", exchanger, good, setParam("subject_token_type", "urn:ietf:params:oauth:token-type:refresh_token"), 400, oauth.CodeInvalidRequest, "subject_token_type must be"},
			{"actor_token given", exchanger, good, setParam("actor_token", good), 400, oauth.CodeInvalidRequest, "actor_token is not supported"},
			{"actor_token_type given", exchanger, good, setParam("actor_token_type", oauth.TokenTypeAccessToken), 400, oauth.CodeInvalidRequest, "actor_token is not supported"},
			{"a refresh token requested", exchanger, good, setParam("requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token"), 400, oauth.CodeInvalidRequest, "requested_token_type may only be"},
			{"a resource not Usher's", exchanger, good, setParam("resource", "https://elsewhere.example.com/mcp"), 400, oauth.CodeInvalidTarget, "not this server's MCP endpoint"},
			{"another path of Usher's", exchanger, good, setParam("resource", e.issuer+"/api"), 400, oauth.CodeInvalidTarget, "not this server's MCP endpoint"},
			{"no resource", exchanger, good, func(f url.Values) { f.Del("resource") }, 400, oauth.CodeInvalidTarget, "resource is required"},
			{"an audience other than the resource", exchanger, good, setParam("audience", apiAudience), 400, oauth.CodeInvalidTarget, "audience, if given"},
			{"another scope", exchanger, good, setParam("scope", "mcp:invoke admin"), 400, oauth.CodeInvalidScope, "only scope is mcp:invoke"},
			// The client.
			{"a client not listed", unlisted, good, nil, 400, oauth.CodeUnauthorizedClient, "may not exchange"},
			{"a listed public client", publicExchanger, good, nil, 400, oauth.CodeUnauthorizedClient, "Only a confidential client"},
			{"a revoked client", revokedListed, good, nil, 401, oauth.CodeInvalidClient, "revoked"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				form := e.exchangeForm(tc.subject, tc.edit)
				if tc.subject == "" {
					form.Del("subject_token")
				}
				a := e.exchange(tc.client, form)
				if a.Status != tc.status || a.Error != tc.code || !strings.Contains(a.Description, tc.says) || a.AccessToken != "" {
					t.Fatalf("answer %d %+v, want %d %s saying %q and no token", a.Status, a, tc.status, tc.code, tc.says)
				}
			})
		}
		if recs := e.exchangedRecords(); len(recs) != 0 {
			t.Errorf("refused exchanges were audited as exchanged: %+v", recs)
		}
		if kinds := e.auditKinds(); slices.Contains(kinds, "oauth_token_issued") {
			t.Errorf("audit kinds %v: a token was issued", kinds)
		}
		// The good token itself is fine: the refusals were the cases'.
		if a := e.exchange(exchanger, e.exchangeForm(good, nil)); a.Status != http.StatusOK {
			t.Errorf("the good token: %+v", a)
		}
	})
}

// The exchange is off unless some client may exchange: then the grant is
// unsupported and the metadata does not announce it; and a list of
// clients without a verifier of subject tokens is a configuration error.
func TestTokenExchangeOff(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	ai := newAPIIssuer(t)
	v := ai.verifier(t)
	e := newEnv(t, st, func(o *oauth.ServerOptions) { o.VerifySubjectToken = v.Verify })
	c := e.register(func(md map[string]any) { md["token_endpoint_auth_method"] = "client_secret_basic" })
	a := e.token(c, e.exchangeForm(ai.token(t, nil), nil))
	if a.Status != http.StatusBadRequest || a.Error != oauth.CodeUnsupportedGrantType || a.AccessToken != "" {
		t.Errorf("exchange with none listed: %+v, want unsupported_grant_type", a)
	}
	if slices.Contains(e.metadata().GrantTypesSupported, oauth.GrantTokenExchange) {
		t.Error("the metadata announces the token exchange with no client listed")
	}
	opts := func(edit func(*oauth.ServerOptions)) error {
		o := &oauth.ServerOptions{
			Issuer: "https://usher.example.com", Resources: []string{"https://usher.example.com/mcp"}, Store: st,
			Broker: &broker.Broker{}, SignedIn: signedIn, LoginURL: func(string, string) string { return "/login" },
			Secret: make([]byte, oauth.MinSecretLen),
		}
		edit(o)
		_, err := oauth.NewServer(o)
		return err
	}
	if err := opts(func(o *oauth.ServerOptions) { o.ExchangeClients = []string{"c"} }); err == nil || !strings.Contains(err.Error(), "ExchangeClients need VerifySubjectToken") {
		t.Errorf("clients without a verifier: %v", err)
	}
	if err := opts(func(o *oauth.ServerOptions) { o.VerifySubjectToken = v.Verify; o.ExchangeClients = []string{""} }); err == nil || !strings.Contains(err.Error(), "empty client_id") {
		t.Errorf("an empty client id: %v", err)
	}
}

package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
)

// TestAuthentication covers the resource server: each refusal has its
// exact status and challenge, a generic body, and its reason in the log
// only.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	metadata := `resource_metadata="` + e.url + `/.well-known/oauth-protected-resource/mcp", scope="mcp:invoke"`
	now := time.Now()

	expiredBroker, err := broker.New(keyring, &broker.Options{Issuer: e.url, Now: func() time.Time { return now.Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := expiredBroker.Mint(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	otherAudience, err := e.broker.Mint(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/other"})
	if err != nil {
		t.Fatal(err)
	}
	kid, key, err := keyring.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	claims := func(scope string) map[string]any {
		return map[string]any{
			"iss": e.url, "sub": alice, "aud": e.url + "/mcp", "iat": now.Unix(), "nbf": now.Unix(),
			"exp": now.Add(5 * time.Minute).Unix(), "jti": "hand-made", "scope": scope, "client_id": "usher-assistant",
			"act": map[string]any{"sub": "usher-assistant"},
		}
	}
	wrongScope := signJWT(t, key, map[string]any{"alg": "RS256", "kid": kid, "typ": "at+jwt"}, claims("notes:read"))
	// The user's own token from their identity provider: RS256 too, but
	// another issuer, key and audience.
	idpKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	idpToken := signJWT(t, idpKey, map[string]any{"alg": "RS256", "kid": "idp-key-1", "typ": "JWT"}, map[string]any{
		"iss": "https://login.example.com/tenant/v2.0", "sub": "alice", "aud": "api://usher", "iat": now.Unix(),
		"nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "scp": "mcp:invoke", "oid": "alice", "tid": "tenant",
	})
	// The same user token presented with the broker's typ and our
	// audience, signed by a key the broker never published.
	idpLookalike := signJWT(t, idpKey, map[string]any{"alg": "RS256", "kid": kid, "typ": "at+jwt"}, claims("mcp:invoke"))
	valid := e.token(alice, "")

	for _, tc := range []struct {
		name      string
		path      string
		header    http.Header
		status    int
		challenge string
		logged    string // a detail that must be logged and not sent
	}{
		{"no token", "/mcp", nil, 401, "Bearer " + metadata, ""},
		{"not a bearer token", "/mcp", http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, 401, "Bearer " + metadata, ""},
		{"token only in the query", "/mcp?access_token=" + valid, nil, 400, "Bearer " + metadata + `, error="invalid_request"`, ""},
		{"token in the query and the header", "/mcp?access_token=" + valid, bearer(valid), 400, "Bearer " + metadata + `, error="invalid_request"`, ""},
		{"two Authorization headers", "/mcp", http.Header{"Authorization": {"Bearer " + valid, "Bearer " + valid}}, 401, "Bearer " + metadata + `, error="invalid_token"`, "more than one"},
		{"wrong audience", "/mcp", bearer(otherAudience.Raw), 401, "Bearer " + metadata + `, error="invalid_token"`, "is not exactly"},
		{"expired", "/mcp", bearer(expired.Raw), 401, "Bearer " + metadata + `, error="invalid_token"`, "expired at"},
		{"missing scope", "/mcp", bearer(wrongScope), 403, "Bearer " + metadata + `, error="insufficient_scope"`, "not among the token's scopes"},
		{"the user's identity-provider token", "/mcp", bearer(idpToken), 401, "Bearer " + metadata + `, error="invalid_token"`, "is not at+jwt"},
		{"an identity-provider key under the broker's kid", "/mcp", bearer(idpLookalike), 401, "Bearer " + metadata + `, error="invalid_token"`, "bad signature"},
		{"garbage", "/mcp", bearer("not.a.token"), 401, "Bearer " + metadata + `, error="invalid_token"`, "header"},
		{"valid", "/mcp", bearer(valid), 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+tc.path, strings.NewReader(initialize))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("challenge = %q\nwant        %q", got, tc.challenge)
			}
			if tc.status == 200 {
				return
			}
			var b struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || b.Error.Code == "" {
				t.Errorf("body is not the generic JSON error: %s", body)
			}
			if tc.logged != "" {
				if strings.Contains(body, tc.logged) {
					t.Errorf("the body tells the verifier's reason: %s", body)
				}
				if !strings.Contains(e.logs.String(), tc.logged) {
					t.Errorf("the log lacks the reason %q", tc.logged)
				}
			}
			if strings.Contains(e.logs.String(), valid) {
				t.Error("a token was logged")
			}
		})
	}
	if got := e.auditKinds(""); len(got) == 0 || got[0] != KindAuthFailed {
		t.Errorf("refused tokens were not audited: %v", got)
	}
}

// TestMetadata checks the RFC 9728 document at both well-known paths.
func TestMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		t.Run(path, func(t *testing.T) {
			resp, err := http.Get(e.url + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			var m struct {
				Resource               string   `json:"resource"`
				AuthorizationServers   []string `json:"authorization_servers"`
				ScopesSupported        []string `json:"scopes_supported"`
				BearerMethodsSupported []string `json:"bearer_methods_supported"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			if m.Resource != e.url+"/mcp" || strings.Join(m.AuthorizationServers, ",") != e.url ||
				strings.Join(m.ScopesSupported, ",") != "mcp:invoke" || strings.Join(m.BearerMethodsSupported, ",") != "header" {
				t.Errorf("metadata = %+v", m)
			}
		})
	}
}

// TestCallerReachesToolsNotToken checks that a tool learns the caller from
// the verified token (here, whose notes it reads), and that nothing of the
// token reaches an upstream.
func TestCallerReachesToolsNotToken(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"notes_list": Allow, "fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url, Headers: map[string]string{"X-Api-Key": "upstream-secret"}}},
	})
	if _, err := e.store.PutNote(t.Context(), storeNote(alice, "mine", "alice's")); err != nil {
		t.Fatal(err)
	}
	cs := e.connect(bob, "", nil, "")
	if got := text(call(t, cs, "notes_list", map[string]any{}, nil)); strings.Contains(got, "mine") {
		t.Errorf("bob sees alice's notes: %s", got)
	}
	cs = e.connect(alice, "", nil, "")
	if got := text(call(t, cs, "notes_list", map[string]any{}, nil)); !strings.Contains(got, `"name":"mine"`) {
		t.Errorf("alice does not see her note: %s", got)
	}
	if res := call(t, cs, "fx__echo", map[string]any{"text": "hi"}, nil); res.IsError || text(res) != "echo: hi" {
		t.Fatalf("echo = %+v", res)
	}
	if got := up.authorizations(); len(got) != 0 {
		t.Errorf("the upstream received Authorization headers: %q", got)
	}
	if got := up.headerValues("X-Api-Key"); len(got) != 1 || got[0] != "upstream-secret" {
		t.Errorf("the upstream's own credential = %q", got)
	}
	calls := e.policy.calls()
	if len(calls) == 0 || calls[len(calls)-1].Principal != alice || calls[len(calls)-1].TokenID == "" || calls[len(calls)-1].ClientID != broker.DefaultClientID {
		t.Errorf("the decider did not see the caller: %+v", calls)
	}
}

// TestUpstreamBrokerToken checks that an upstream configured for broker
// tokens gets one for its own audience and the caller's subject, never the
// caller's token.
func TestUpstreamBrokerToken(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	var e *env
	var mu sync.Mutex
	var minted []string
	e = newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url, BrokerToken: true}},
		catalog: func(o *CatalogOptions) {
			o.UpstreamTokens = tokenFunc(func(ctx context.Context, sub, audience string) (string, error) {
				tok, err := e.broker.Mint(ctx, broker.Grant{Subject: sub, Audience: audience})
				mu.Lock()
				minted = append(minted, sub+" "+audience)
				mu.Unlock()
				return tok.Raw, err
			})
		},
	})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "fx__echo", map[string]any{"text": "hi"}, nil); res.IsError {
		t.Fatalf("echo = %s", text(res))
	}
	inbound := e.token(alice, "")
	verifier, err := broker.NewVerifier(keyring, &broker.VerifierOptions{Issuer: e.url, Audience: up.url})
	if err != nil {
		t.Fatal(err)
	}
	subjects := map[string]bool{}
	for _, h := range up.authorizations() {
		raw := strings.TrimPrefix(h, "Bearer ")
		if raw == inbound {
			t.Fatal("the caller's token reached the upstream")
		}
		c, err := verifier.Verify(t.Context(), raw)
		if err != nil {
			t.Fatalf("the upstream got a token not for its audience: %v", err)
		}
		subjects[c.Subject] = true
	}
	if !subjects[alice] || !subjects[CatalogSubject] {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("token subjects = %v (minted %q), want alice's for the call and the catalog's for listing", subjects, minted)
	}
}

// tokenFunc is a TokenSource made of a function.
type tokenFunc func(ctx context.Context, subject, audience string) (string, error)

func (f tokenFunc) Token(ctx context.Context, subject, audience string) (string, error) {
	return f(ctx, subject, audience)
}

// TestAuthFailureAuditsSampled checks that a flood of bad tokens is
// answered in full but recorded only as the bucket allows, and that the
// records left out are counted in the next record.
func TestAuthFailureAuditsSampled(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	e := newEnv(t, envConfig{server: func(o *Options) { o.Now = clock }})
	bad := func(n int) {
		t.Helper()
		for range n {
			resp := e.post(t, "/mcp", bearer("not-a-token"), initialize)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a bad token got %d, want 401", resp.StatusCode)
			}
		}
	}
	records := func() []Event {
		e.audit.mu.Lock()
		defer e.audit.mu.Unlock()
		var out []Event
		for _, ev := range e.audit.events {
			if ev.Kind == KindAuthFailed || ev.Kind == KindAuthFailuresSuppressed {
				out = append(out, ev)
			}
		}
		return out
	}

	bad(authAuditBurst + 5)
	got := records()
	if len(got) != authAuditBurst || got[0].Outcome != "invalid_token" || got[0].Suppressed != 0 {
		t.Fatalf("after %d bad tokens, %d records (first %+v); want %d", authAuditBurst+5, len(got), got[0], authAuditBurst)
	}
	// Once the bucket refills, an authenticated request sums up the rest.
	advance(authAuditInterval)
	resp := e.post(t, "/mcp", bearer(e.token(alice, "")), initialize)
	resp.Body.Close()
	got = records()
	if last := got[len(got)-1]; len(got) != authAuditBurst+1 || last.Kind != KindAuthFailuresSuppressed || last.Suppressed != 5 {
		t.Fatalf("after an authenticated request the last record is %+v; want 5 suppressed", last)
	}
	// The bucket is empty again: these are counted, then carried by the
	// next refusal that is recorded.
	bad(3)
	advance(2 * authAuditInterval)
	bad(1)
	got = records()
	if last := got[len(got)-1]; len(got) != authAuditBurst+2 || last.Kind != KindAuthFailed || last.Suppressed != 3 {
		t.Fatalf("the last record is %+v (%d records); want an auth failure carrying 3 suppressed", last, len(got))
	}
}

// TestCallerTenantAndGroups checks that the tenant and groups of a broker
// token reach tool handlers as the Caller and the Decider as the Call, for
// listing and for calling.
func TestCallerTenantAndGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	tok, err := e.broker.Mint(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp", Tenant: "contoso", Groups: []string{"finance", "staff"}})
	if err != nil {
		t.Fatal(err)
	}
	resp := e.post(t, "/mcp", bearer(tok.Raw), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list","arguments":{}}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call: %d", resp.StatusCode)
	}
	calls := e.policy.calls()
	if len(calls) != 1 || calls[0].Tenant != "contoso" || strings.Join(calls[0].Groups, ",") != "finance,staff" {
		t.Errorf("the Decider saw %+v, want tenant contoso and groups finance, staff", calls)
	}
}

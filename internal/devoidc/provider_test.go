package devoidc_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/uuid"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
)

func TestDiscovery(t *testing.T) {
	e := newEnv(t, nil)
	status, body, h := e.get(t, e.client, e.issuer+"/.well-known/openid-configuration")
	if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("discovery: %d %s", status, h.Get("Content-Type"))
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"issuer":                                e.issuer,
		"authorization_endpoint":                e.issuer + "/authorize",
		"token_endpoint":                        e.issuer + "/token",
		"jwks_uri":                              e.issuer + "/jwks",
		"userinfo_endpoint":                     e.issuer + "/userinfo",
		"response_types_supported":              []any{"code"},
		"grant_types_supported":                 []any{"authorization_code"},
		"code_challenge_methods_supported":      []any{"S256"},
		"id_token_signing_alg_values_supported": []any{"RS256"},
		"subject_types_supported":               []any{"public"},
		"token_endpoint_auth_methods_supported": []any{"none"},
		"scopes_supported":                      []any{"openid", "profile", "email", "usher.api"},
	}
	for k, v := range want {
		got, _ := json.Marshal(d[k])
		w, _ := json.Marshal(v)
		if string(got) != string(w) {
			t.Errorf("%s = %s, want %s", k, got, w)
		}
	}

	// go-oidc's own discovery accepts the document.
	p, err := oidc.NewProvider(t.Context(), e.issuer)
	if err != nil {
		t.Fatal(err)
	}
	if p.Endpoint().TokenURL != e.issuer+"/token" {
		t.Errorf("go-oidc token URL %q", p.Endpoint().TokenURL)
	}
}

func TestJWKSPublishesOnlyPublicKeys(t *testing.T) {
	e := newEnv(t, func(o *devoidc.Options) { o.Keys = leakyKeys{staticKeys{kid: "dev-1", key: testKey()}} })
	status, body, _ := e.get(t, e.client, e.issuer+"/jwks")
	if status != http.StatusOK {
		t.Fatalf("jwks: %d", status)
	}
	var set struct{ Keys []map[string]any }
	if err := json.Unmarshal([]byte(body), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 || set.Keys[0]["kid"] != "dev-1" || set.Keys[0]["kty"] != "RSA" {
		t.Fatalf("jwks %s", body)
	}
	for _, private := range []string{"d", "p", "q", "dp", "dq", "qi"} {
		if _, ok := set.Keys[0][private]; ok {
			t.Errorf("jwks publishes the private member %q", private)
		}
	}
}

// TestAuthorizationCodeFlow is the end-to-end proof: a browser-like client
// signs in through the form, redeems the code with PKCE, and Usher's API
// verifier accepts the access token through the real OIDC code path.
func TestAuthorizationCodeFlow(t *testing.T) {
	e := newEnv(t, nil)
	verifier, challenge := pkce()
	params := e.authParams(challenge)
	q := e.signIn(t, "Ada.Lovelace", params)
	if q.Get("state") != params.Get("state") || q.Get("iss") != e.issuer || q.Get("code") == "" {
		t.Fatalf("callback query %v", q)
	}

	status, tok := e.redeem(t, e.redeemForm(q.Get("code"), verifier))
	if status != http.StatusOK {
		t.Fatalf("token: %d %v", status, tok)
	}
	if tok["token_type"] != "Bearer" || tok["expires_in"] != float64(3600) || tok["scope"] != "openid profile usher.api" {
		t.Errorf("token response %v", tok)
	}
	access, _ := tok["access_token"].(string)
	idToken, _ := tok["id_token"].(string)

	for _, opts := range []*identity.Options{
		{JWKSURL: e.issuer + "/jwks"}, // as the embedded default wires it
		{},                            // through discovery
	} {
		opts.Issuer = e.issuer
		opts.Audiences = []string{devoidc.DefaultAudience}
		opts.RequiredScopes = []string{devoidc.DefaultScope}
		opts.Now = e.clock.Now
		v, err := identity.New(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		p, err := v.Verify(t.Context(), access)
		if err != nil {
			t.Fatalf("identity verifier refused the access token: %v", err)
		}
		oid := uuid.NewSHA1(uuid.NameSpaceURL, []byte(e.issuer+"/users/ada.lovelace")).String()
		if p.ID() != e.issuer+"||"+oid || p.Name != "ada.lovelace" || !slices.Equal(p.Scopes, []string{"usher.api"}) {
			t.Errorf("principal %+v (ID %q)", p, p.ID())
		}
		if _, err := v.Verify(t.Context(), idToken); err == nil {
			t.Error("identity verifier accepted the ID token as an access token")
		}
	}

	// The ID token is for the client, carries the nonce and the at_hash.
	idv := oidc.NewVerifier(e.issuer, oidc.NewRemoteKeySet(t.Context(), e.issuer+"/jwks"),
		&oidc.Config{ClientID: devoidc.DefaultClientID, Now: e.clock.Now})
	id, err := idv.Verify(t.Context(), idToken)
	if err != nil {
		t.Fatal(err)
	}
	if id.Nonce != params.Get("nonce") {
		t.Errorf("nonce %q, want %q", id.Nonce, params.Get("nonce"))
	}
	if err := id.VerifyAccessToken(access); err != nil {
		t.Errorf("at_hash: %v", err)
	}

	// The access token opens userinfo; the ID token does not.
	for _, c := range []struct {
		token  string
		status int
	}{{access, http.StatusOK}, {idToken, http.StatusUnauthorized}, {"junk", http.StatusUnauthorized}} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.issuer+"/userinfo", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var info map[string]any
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if resp.StatusCode != c.status || c.status == http.StatusOK && info["preferred_username"] != "ada.lovelace" {
			t.Errorf("userinfo: %d %v, want %d", resp.StatusCode, info, c.status)
		}
	}

	// The code is spent.
	status, body := e.redeem(t, e.redeemForm(q.Get("code"), verifier))
	if status != http.StatusBadRequest || oauthErr(t, body) != "invalid_grant" {
		t.Errorf("reused code: %d %v", status, body)
	}
}

func TestTokenRefusals(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(e *env, f url.Values)
		status int
		code   string
		spent  bool // the request reached the code and spent it
	}{
		{name: "wrong verifier", edit: func(_ *env, f url.Values) {
			v, _ := pkce()
			f.Set("code_verifier", v)
		}, status: 400, code: "invalid_grant", spent: true},
		{name: "no verifier", edit: func(_ *env, f url.Values) { f.Del("code_verifier") }, status: 400, code: "invalid_request"},
		{name: "verifier too short", edit: func(_ *env, f url.Values) { f.Set("code_verifier", "short") }, status: 400, code: "invalid_request"},
		{name: "wrong redirect_uri", edit: func(e *env, f url.Values) { f.Set("redirect_uri", e.callback+"/other") }, status: 400, code: "invalid_grant", spent: true},
		{name: "no redirect_uri", edit: func(_ *env, f url.Values) { f.Del("redirect_uri") }, status: 400, code: "invalid_request"},
		{name: "unknown client", edit: func(_ *env, f url.Values) { f.Set("client_id", "intruder") }, status: 401, code: "invalid_client"},
		{name: "unknown code", edit: func(_ *env, f url.Values) { f.Set("code", "not-a-code") }, status: 400, code: "invalid_grant"},
		{name: "other grant type", edit: func(_ *env, f url.Values) { f.Set("grant_type", "password") }, status: 400, code: "unsupported_grant_type"},
		{name: "repeated parameter", edit: func(_ *env, f url.Values) { f.Add("code_verifier", f.Get("code_verifier")) }, status: 400, code: "invalid_request"},
		{name: "expired code", edit: func(e *env, _ url.Values) { e.clock.Advance(61 * time.Second) }, status: 400, code: "invalid_grant", spent: true},
		{name: "code just before expiry", edit: func(e *env, _ url.Values) { e.clock.Advance(59 * time.Second) }, status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			code, verifier := e.code(t, "alice")
			f := e.redeemForm(code, verifier)
			tt.edit(e, f)
			status, body := e.redeem(t, f)
			if status != tt.status || tt.code != "" && oauthErr(t, body) != tt.code {
				t.Fatalf("token: %d %s, want %d %s", status, body["error"], tt.status, tt.code)
			}
			if status == http.StatusOK {
				return
			}
			// A request that reached the code spent it; one refused before
			// leaves it to its rightful owner.
			wantStatus := http.StatusOK
			if tt.spent {
				wantStatus = http.StatusBadRequest
			}
			if status, body = e.redeem(t, e.redeemForm(code, verifier)); status != wantStatus {
				t.Errorf("the right request after a failed one: %d %s, want %d", status, body["error"], wantStatus)
			}
		})
	}
}

func TestTokenRequestNotAForm(t *testing.T) {
	e := newEnv(t, nil)
	resp, err := e.client.Post(e.issuer+"/token", "application/json", strings.NewReader(`{"grant_type":"authorization_code"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || oauthErr(t, body) != "invalid_request" {
		t.Fatalf("JSON token request: %d %v", resp.StatusCode, body)
	}

	big := url.Values{"grant_type": {"authorization_code"}, "code": {strings.Repeat("a", 32<<10)}}
	resp, err = e.client.PostForm(e.issuer+"/token", big)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || oauthErr(t, body) != "invalid_request" {
		t.Fatalf("oversized token request: %d %v", resp.StatusCode, body)
	}
}

func TestAuthorizeRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(e *env, q url.Values)
		// Either answered to the browser with status and code, or, with
		// redirect set, sent to the callback with code.
		status   int
		code     string
		redirect bool
	}{
		{name: "good request shows the form", edit: func(*env, url.Values) {}, status: 200},
		{name: "unknown client", edit: func(_ *env, q url.Values) { q.Set("client_id", "intruder") }, status: 400, code: "invalid_request"},
		{name: "no client", edit: func(_ *env, q url.Values) { q.Del("client_id") }, status: 400, code: "invalid_request"},
		{name: "unregistered redirect_uri", edit: func(_ *env, q url.Values) { q.Set("redirect_uri", "https://attacker.example/cb") }, status: 400, code: "invalid_request"},
		{name: "redirect_uri with another path", edit: func(e *env, q url.Values) { q.Set("redirect_uri", e.callback+"/x") }, status: 400, code: "invalid_request"},
		{name: "no redirect_uri", edit: func(_ *env, q url.Values) { q.Del("redirect_uri") }, status: 400, code: "invalid_request"},
		{name: "repeated redirect_uri", edit: func(_ *env, q url.Values) { q.Add("redirect_uri", "https://attacker.example/cb") }, status: 400, code: "invalid_request"},
		{name: "no PKCE", edit: func(_ *env, q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, redirect: true, code: "invalid_request"},
		{name: "PKCE without method", edit: func(_ *env, q url.Values) { q.Del("code_challenge_method") }, redirect: true, code: "invalid_request"},
		{name: "PKCE plain", edit: func(_ *env, q url.Values) { q.Set("code_challenge_method", "plain") }, redirect: true, code: "invalid_request"},
		{name: "malformed challenge", edit: func(_ *env, q url.Values) { q.Set("code_challenge", "short") }, redirect: true, code: "invalid_request"},
		{name: "implicit flow", edit: func(_ *env, q url.Values) { q.Set("response_type", "token") }, redirect: true, code: "unsupported_response_type"},
		{name: "form_post response mode", edit: func(_ *env, q url.Values) { q.Set("response_mode", "form_post") }, redirect: true, code: "invalid_request"},
		{name: "unknown scope", edit: func(_ *env, q url.Values) { q.Set("scope", "openid admin") }, redirect: true, code: "invalid_scope"},
		{name: "state too long", edit: func(_ *env, q url.Values) { q.Set("state", strings.Repeat("s", 513)) }, redirect: true, code: "invalid_request"},
		{name: "nonce with a control character", edit: func(_ *env, q url.Values) { q.Set("nonce", "n\x00") }, redirect: true, code: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			_, challenge := pkce()
			q := e.authParams(challenge)
			tt.edit(e, q)
			resp, err := e.noFollow.Get(e.issuer + "/authorize?" + q.Encode())
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if tt.redirect {
				loc, err := url.Parse(resp.Header.Get("Location"))
				if resp.StatusCode != http.StatusSeeOther || err != nil {
					t.Fatalf("status %d, Location %q: want a redirect", resp.StatusCode, resp.Header.Get("Location"))
				}
				got := loc.Query()
				if !strings.HasPrefix(loc.String(), e.callback+"?") || got.Get("error") != tt.code ||
					got.Get("state") != q.Get("state") && len(q.Get("state")) <= 512 || got.Get("code") != "" {
					t.Fatalf("redirected to %s, want %s with error=%s", loc, e.callback, tt.code)
				}
				return
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Fatalf("redirected to %q; an unverified client or redirect URI must never be redirected to", loc)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.code != "" {
				var body map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || oauthErr(t, body) != tt.code {
					t.Fatalf("body %v, want error %s", body, tt.code)
				}
			}
		})
	}
}

// The web client's redirect URI is compared exactly: on loopback, another
// port is another program of the machine, which must not receive codes.
func TestRedirectURIMustBeExact(t *testing.T) {
	e := newEnv(t, nil)
	reg, err := url.Parse(e.callback) // http://127.0.0.1:<port>/callback
	if err != nil {
		t.Fatal(err)
	}
	otherPort := "49152"
	if reg.Port() == otherPort {
		otherPort = "49153"
	}
	tests := []struct {
		redirect string
		allowed  bool
	}{
		{e.callback, true},
		{"http://127.0.0.1:" + otherPort + reg.Path, false},
		{"http://127.0.0.1" + reg.Path, false},
		{"http://[::1]:" + reg.Port() + reg.Path, false},
		{"http://localhost:" + reg.Port() + reg.Path, false},
		{"https://" + reg.Host + reg.Path, false},
		{e.callback + "/other", false},
		{e.callback + "?x=1", false},
		{e.callback + "/", false},
		{"http://" + reg.Host + "@attacker.example" + reg.Path, false},
	}
	for _, tt := range tests {
		t.Run(tt.redirect, func(t *testing.T) {
			_, challenge := pkce()
			q := e.authParams(challenge)
			q.Set("redirect_uri", tt.redirect)
			status, _, _ := e.get(t, e.noFollow, e.issuer+"/authorize?"+q.Encode())
			if got := status == http.StatusOK; got != tt.allowed {
				t.Fatalf("status %d, allowed %v", status, tt.allowed)
			}
		})
	}
}

func TestHostileUserNames(t *testing.T) {
	for _, name := range []string{
		"", " ", "a b", "<script>alert(1)</script>", `alice"`, "../admin", ".hidden", "-rf",
		"alice\n", "alice\x00", "ålice", "alice@example.com", strings.Repeat("a", 65),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			_, challenge := pkce()
			form := e.authParams(challenge)
			form.Set("username", name)
			resp, err := e.noFollow.PostForm(e.issuer+"/authorize", form)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			page := string(b)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			if !strings.Contains(page, `role="alert"`) || strings.Contains(page, "<script>alert") {
				t.Fatalf("page does not explain the refusal, or reflects the name unescaped:\n%s", page)
			}
			if _, err := e.provider.IssueAccessToken(t.Context(), name); err == nil {
				t.Error("IssueAccessToken accepted the name")
			}
		})
	}
}

func TestSignInPageEscapesReflectedParameters(t *testing.T) {
	e := newEnv(t, nil)
	_, challenge := pkce()
	q := e.authParams(challenge)
	q.Set("state", `"><script>alert(1)</script>`)
	q.Set("nonce", `' onmouseover='alert(1)`)
	status, body, h := e.get(t, e.client, e.issuer+"/authorize?"+q.Encode())
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "' onmouseover") {
		t.Fatalf("a parameter is reflected unescaped:\n%s", body)
	}
	if !strings.Contains(body, `value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`) {
		t.Errorf("state is not carried, escaped, in the form:\n%s", body)
	}
	if !strings.Contains(body, "Development sign-in — not for production") {
		t.Error("the page lacks the development notice")
	}
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("security headers: CSP %q, XFO %q, Referrer-Policy %q", csp, h.Get("X-Frame-Options"), h.Get("Referrer-Policy"))
	}

	// The escaped state still round-trips exactly to the client.
	verifier, challenge := pkce()
	q2 := e.authParams(challenge)
	q2.Set("state", `"><script>alert(1)</script>`)
	got := e.signIn(t, "bob", q2)
	if got.Get("state") != q2.Get("state") {
		t.Errorf("state %q, want %q", got.Get("state"), q2.Get("state"))
	}
	if status, body := e.redeem(t, e.redeemForm(got.Get("code"), verifier)); status != http.StatusOK {
		t.Errorf("token: %d %v", status, body)
	}
}

func TestSignInFormTooLarge(t *testing.T) {
	e := newEnv(t, nil)
	_, challenge := pkce()
	form := e.authParams(challenge)
	form.Set("username", "alice")
	form.Set("padding", strings.Repeat("p", 32<<10))
	resp, err := e.noFollow.PostForm(e.issuer+"/authorize", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || oauthErr(t, body) != "invalid_request" {
		t.Fatalf("oversized sign-in: %d %v", resp.StatusCode, body)
	}
}

func TestCrossOriginSignInRefused(t *testing.T) {
	for _, h := range []http.Header{
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Origin": {"https://attacker.example"}},
	} {
		e := newEnv(t, nil)
		_, challenge := pkce()
		form := e.authParams(challenge)
		form.Set("username", "alice")
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.issuer+"/authorize", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := e.noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("%v: status %d, Location %q", h, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

func TestIssueAccessToken(t *testing.T) {
	e := newEnv(t, nil)
	raw, err := e.provider.IssueAccessToken(t.Context(), "Alice")
	if err != nil {
		t.Fatal(err)
	}
	v, err := identity.New(t.Context(), &identity.Options{
		Issuer:         e.issuer,
		Audiences:      []string{devoidc.DefaultAudience},
		RequiredScopes: []string{devoidc.DefaultScope},
		JWKSURL:        e.issuer + "/jwks",
		Now:            e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	fromCLI, err := v.Verify(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}

	// Signing in as "alice" in the browser is the same user.
	code, verifier := e.code(t, "alice")
	_, tok := e.redeem(t, e.redeemForm(code, verifier))
	fromBrowser, err := v.Verify(t.Context(), tok["access_token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if fromCLI.ID() != fromBrowser.ID() || fromCLI.ObjectID == "" {
		t.Errorf("CLI principal %q, browser principal %q", fromCLI.ID(), fromBrowser.ID())
	}

	e.clock.Advance(devoidc.DefaultTokenLifetime + time.Second)
	if _, err := v.Verify(t.Context(), raw); err == nil {
		t.Error("token accepted after its lifetime")
	}
}

func TestNewOptions(t *testing.T) {
	keys := staticKeys{kid: "k", key: testKey()}
	tests := []struct {
		name string
		opts *devoidc.Options
		want []string
	}{
		{name: "minimal", opts: &devoidc.Options{
			Issuer: "http://127.0.0.1:8080/dev/oidc", Keys: keys, RedirectURIs: []string{"http://127.0.0.1:8080/callback"},
		}},
		{name: "nil", opts: nil, want: []string{"issuer is required", "keys are required", "redirect uris"}},
		{name: "everything wrong at once", opts: &devoidc.Options{
			Issuer:        "http://dev.example.com/oidc/",
			Keys:          keys,
			Audience:      "same",
			ClientID:      "same",
			Scopes:        []string{"openid", "two words"},
			RedirectURIs:  []string{"http://app.example.com/cb", "https://app.example.com/cb#frag"},
			TokenLifetime: 48 * time.Hour,
		}, want: []string{
			"issuer: must be https", "audience and client id must differ", `"openid" is not an API scope`,
			`"two words" is not an API scope`, `redirect uri "http://app.example.com/cb"`, "fragment", "token lifetime",
		}},
		{name: "trailing slash", opts: &devoidc.Options{
			Issuer: "https://dev.example.com/oidc/", Keys: keys, RedirectURIs: []string{"https://dev.example.com/cb"},
		}, want: []string{"must not end with a slash"}},
		{name: "audience equal to the default client id", opts: &devoidc.Options{
			Issuer: "https://dev.example.com/oidc", Keys: keys, RedirectURIs: []string{"https://dev.example.com/cb"},
			Audience: devoidc.DefaultClientID,
		}, want: []string{"audience and client id must differ"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := devoidc.New(tt.opts)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("New accepted invalid options")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUnknownEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	for _, u := range []string{"/nowhere", "/token"} { // GET /token is not an endpoint
		status, body, _ := e.get(t, e.client, e.issuer+u)
		var b map[string]any
		if status != http.StatusNotFound || json.Unmarshal([]byte(body), &b) != nil || oauthErr(t, b) != "invalid_request" {
			t.Errorf("GET %s: %d %s", u, status, body)
		}
	}
}

// TestSignInWithGroups: the groups typed on the form are in the access
// token, as the organisation's provider would put them; bad ones are
// refused on the form, and none is fine.
func TestSignInWithGroups(t *testing.T) {
	e := newEnv(t, nil)
	v, err := identity.New(t.Context(), &identity.Options{
		Issuer: e.issuer, Audiences: []string{devoidc.DefaultAudience}, RequiredScopes: []string{devoidc.DefaultScope},
		JWKSURL: e.issuer + "/jwks", Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func(groups string) *http.Response {
		t.Helper()
		verifier, challenge := pkce()
		form := e.authParams(challenge)
		form.Set("username", "rita")
		form.Set("groups", groups)
		resp, err := e.noFollow.PostForm(e.issuer+"/authorize", form)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		resp.Header.Set("X-Verifier", verifier)
		return resp
	}
	for _, c := range []struct {
		typed string
		want  []string
	}{
		{"security, approvers security", []string{"security", "approvers"}},
		{"", nil},
	} {
		resp := post(c.typed)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Query().Get("code") == "" {
			t.Fatalf("groups %q: %d, Location %q", c.typed, resp.StatusCode, resp.Header.Get("Location"))
		}
		_, tok := e.redeem(t, e.redeemForm(loc.Query().Get("code"), resp.Header.Get("X-Verifier")))
		p, err := v.Verify(t.Context(), tok["access_token"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Groups, c.want) {
			t.Errorf("groups %q: the token carries %v, want %v", c.typed, p.Groups, c.want)
		}
	}
	for _, bad := range []string{"<script>", "a b c d e f g h i j k l m n o p q", "-rf", "ålice", strings.Repeat("g", 65)} {
		resp := post(bad)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(string(b), `role="alert"`) {
			t.Errorf("groups %q: %d, Location %q", bad, resp.StatusCode, resp.Header.Get("Location"))
		}
		if strings.Contains(string(b), "<script>") {
			t.Errorf("groups %q reflected unescaped", bad)
		}
	}
}

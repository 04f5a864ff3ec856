package oauth_test

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
)

// authorizeQuery is a valid authorization request's query, with changes:
// a value "" removes the parameter, and a key ending in "+" adds a second
// value.
func authorizeQuery(changes map[string]string) url.Values {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {"https://client.example/client.json"},
		"redirect_uri":          {"http://127.0.0.1:5000/cb"},
		"state":                 {"xyz"},
		"scope":                 {"mcp:invoke"},
		"code_challenge":        {rfcChallenge},
		"code_challenge_method": {"S256"},
		"resource":              {"https://usher.example/mcp"},
	}
	for _, k := range slices.Sorted(maps.Keys(changes)) { // "x" before "x+"
		v := changes[k]
		switch {
		case strings.HasSuffix(k, "+"):
			k = strings.TrimSuffix(k, "+")
			q[k] = append(q[k], v)
		case v == "":
			delete(q, k)
		default:
			q.Set(k, v)
		}
	}
	return q
}

func TestParseAuthorize(t *testing.T) {
	t.Parallel()
	got, err := oauth.ParseAuthorize(authorizeQuery(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := oauth.AuthorizeRequest{
		ClientID: "https://client.example/client.json", RedirectURI: "http://127.0.0.1:5000/cb", State: "xyz",
		Scope: "mcp:invoke", CodeChallenge: rfcChallenge, CodeChallengeMethod: "S256", Resource: "https://usher.example/mcp",
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	for _, tt := range []struct {
		name    string
		changes map[string]string
		check   func(oauth.AuthorizeRequest) bool
	}{
		{"no state", map[string]string{"state": ""}, func(a oauth.AuthorizeRequest) bool { return a.State == "" }},
		{"no scope means mcp:invoke", map[string]string{"scope": ""}, func(a oauth.AuthorizeRequest) bool { return a.Scope == "mcp:invoke" }},
		{"repeated scope token", map[string]string{"scope": "mcp:invoke mcp:invoke"}, func(a oauth.AuthorizeRequest) bool { return a.Scope == "mcp:invoke" }},
		{"offline_access is ignored", map[string]string{"scope": "mcp:invoke offline_access"}, func(a oauth.AuthorizeRequest) bool { return a.Scope == "mcp:invoke" }},
		{"offline_access first", map[string]string{"scope": "offline_access mcp:invoke"}, func(a oauth.AuthorizeRequest) bool { return a.Scope == "mcp:invoke" }},
		{"offline_access alone", map[string]string{"scope": "offline_access"}, func(a oauth.AuthorizeRequest) bool { return a.Scope == "mcp:invoke" }},
		{"longest state", map[string]string{"state": strings.Repeat("s", 1000)}, func(a oauth.AuthorizeRequest) bool { return len(a.State) == 1000 }},
		{"state with spaces and symbols", map[string]string{"state": `a b&c=d"'<>`}, func(a oauth.AuthorizeRequest) bool { return a.State == `a b&c=d"'<>` }},
		{"response_mode query", map[string]string{"response_mode": "query"}, func(a oauth.AuthorizeRequest) bool { return true }},
		{"unknown parameters ignored", map[string]string{"prompt": "consent", "nonce": "n"}, func(a oauth.AuthorizeRequest) bool { return true }},
		{"resource with port and path", map[string]string{"resource": "https://usher.example:8443/a/mcp"}, func(a oauth.AuthorizeRequest) bool { return a.Resource == "https://usher.example:8443/a/mcp" }},
		{"registered client id", map[string]string{"client_id": "usher-dcr-abc"}, func(a oauth.AuthorizeRequest) bool { return a.ClientID == "usher-dcr-abc" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := oauth.ParseAuthorize(authorizeQuery(tt.changes))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(a) {
				t.Errorf("got %+v", a)
			}
		})
	}
}

func TestParseAuthorizeRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		changes      map[string]string
		code         string
		redirectable bool
		state        string // the state the returned request keeps
	}{
		{"no client_id", map[string]string{"client_id": ""}, "invalid_request", false, ""},
		{"two client_ids", map[string]string{"client_id+": "other"}, "invalid_request", false, ""},
		{"client_id with a newline", map[string]string{"client_id": "abc\ndef"}, "invalid_request", false, ""},
		{"client_id with non-ASCII", map[string]string{"client_id": "clіent"}, "invalid_request", false, ""},
		{"client_id too long", map[string]string{"client_id": "https://client.example/" + strings.Repeat("a", 2000)}, "invalid_request", false, ""},
		{"no redirect_uri", map[string]string{"redirect_uri": ""}, "invalid_request", false, ""},
		{"two redirect_uris", map[string]string{"redirect_uri+": "http://127.0.0.1/other"}, "invalid_request", false, ""},
		{"javascript redirect_uri", map[string]string{"redirect_uri": "javascript:alert(1)"}, "invalid_request", false, ""},
		{"redirect_uri with fragment", map[string]string{"redirect_uri": "https://client.example/cb#x"}, "invalid_request", false, ""},
		{"relative redirect_uri", map[string]string{"redirect_uri": "/cb"}, "invalid_request", false, ""},
		{"http redirect_uri off loopback", map[string]string{"redirect_uri": "http://client.example/cb"}, "invalid_request", false, ""},

		{"state too long", map[string]string{"state": strings.Repeat("s", 1001)}, "invalid_request", true, ""},
		{"state with a newline", map[string]string{"state": "a\nb"}, "invalid_request", true, ""},
		{"state with non-ASCII", map[string]string{"state": "é"}, "invalid_request", true, ""},
		{"two states", map[string]string{"state+": "abc"}, "invalid_request", true, ""},
		{"repeated parameter", map[string]string{"scope+": "mcp:invoke"}, "invalid_request", true, "xyz"},
		{"repeated unknown parameter", map[string]string{"prompt": "a", "prompt+": "b"}, "invalid_request", true, "xyz"},
		{"no response_type", map[string]string{"response_type": ""}, "invalid_request", true, "xyz"},
		{"token response_type", map[string]string{"response_type": "token"}, "unsupported_response_type", true, "xyz"},
		{"hybrid response_type", map[string]string{"response_type": "code id_token"}, "unsupported_response_type", true, "xyz"},
		{"fragment response_mode", map[string]string{"response_mode": "fragment"}, "invalid_request", true, "xyz"},
		{"form_post response_mode", map[string]string{"response_mode": "form_post"}, "invalid_request", true, "xyz"},
		{"unknown scope", map[string]string{"scope": "mcp:invoke admin"}, "invalid_scope", true, "xyz"},
		{"openid scope", map[string]string{"scope": "openid"}, "invalid_scope", true, "xyz"},
		{"offline_access with another", map[string]string{"scope": "mcp:invoke offline_access openid"}, "invalid_scope", true, "xyz"},
		{"offline_access in another case", map[string]string{"scope": "mcp:invoke Offline_Access"}, "invalid_scope", true, "xyz"},
		{"malformed scope", map[string]string{"scope": "mcp:invoke  "}, "invalid_scope", true, "xyz"},
		{"scope with a quote", map[string]string{"scope": `mcp:"invoke`}, "invalid_scope", true, "xyz"},
		{"no PKCE", map[string]string{"code_challenge": "", "code_challenge_method": ""}, "invalid_request", true, "xyz"},
		{"plain PKCE", map[string]string{"code_challenge": rfcVerifier, "code_challenge_method": "plain"}, "invalid_request", true, "xyz"},
		{"PKCE without method", map[string]string{"code_challenge_method": ""}, "invalid_request", true, "xyz"},
		{"malformed challenge", map[string]string{"code_challenge": "short"}, "invalid_request", true, "xyz"},
		{"no resource", map[string]string{"resource": ""}, "invalid_target", true, "xyz"},
		{"empty resource", map[string]string{"resource": "", "resource+": ""}, "invalid_target", true, "xyz"},
		{"two resources", map[string]string{"resource+": "https://other.example/mcp"}, "invalid_target", true, "xyz"},
		{"relative resource", map[string]string{"resource": "/mcp"}, "invalid_target", true, "xyz"},
		{"resource without scheme", map[string]string{"resource": "usher.example/mcp"}, "invalid_target", true, "xyz"},
		{"resource with fragment", map[string]string{"resource": "https://usher.example/mcp#x"}, "invalid_target", true, "xyz"},
		{"resource with user info", map[string]string{"resource": "https://a@usher.example/mcp"}, "invalid_target", true, "xyz"},
		{"resource with a space", map[string]string{"resource": "https://usher.example/m cp"}, "invalid_target", true, "xyz"},
		{"resource too long", map[string]string{"resource": "https://usher.example/" + strings.Repeat("a", 2000)}, "invalid_target", true, "xyz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := oauth.ParseAuthorize(authorizeQuery(tt.changes))
			var e *oauth.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %+v, %v; want an *oauth.Error", a, err)
			}
			if e.Code != tt.code || e.Redirectable != tt.redirectable || e.Status != 400 || e.Description == "" {
				t.Errorf("got %+v, want %s (redirectable %v)", e, tt.code, tt.redirectable)
			}
			if tt.redirectable && (a.ClientID == "" || a.RedirectURI == "") {
				t.Errorf("a redirectable error without the client and redirect URI: %+v", a)
			}
			if a.State != tt.state {
				t.Errorf("state %q, want %q", a.State, tt.state)
			}
		})
	}
}

func TestCheckResource(t *testing.T) {
	t.Parallel()
	if r, err := oauth.CheckResource([]string{"https://usher.example/mcp"}); err != nil || r != "https://usher.example/mcp" {
		t.Errorf("%q, %v", r, err)
	}
	for _, values := range [][]string{nil, {""}, {"a", "b"}, {"mcp"}, {"https://usher.example/mcp#f"}, {"https:///mcp"}} {
		_, err := oauth.CheckResource(values)
		var e *oauth.Error
		if !errors.As(err, &e) || e.Code != oauth.CodeInvalidTarget {
			t.Errorf("CheckResource(%q) = %v, want invalid_target", values, err)
		}
	}
}

func TestAuthorizeRedirect(t *testing.T) {
	t.Parallel()
	const iss = "https://usher.example"
	tests := []struct {
		name        string
		redirectURI string
		state       string
		want        string
	}{
		{"plain", "http://127.0.0.1:5000/cb", "xyz", "http://127.0.0.1:5000/cb?code=c0de&iss=https%3A%2F%2Fusher.example&state=xyz"},
		{"no state", "https://client.example/cb", "", "https://client.example/cb?code=c0de&iss=https%3A%2F%2Fusher.example"},
		{"query kept byte for byte", "https://client.example/cb?b=2&a=%41", "s", "https://client.example/cb?b=2&a=%41&code=c0de&iss=https%3A%2F%2Fusher.example&state=s"},
		{"empty query", "https://client.example/cb?", "s", "https://client.example/cb?code=c0de&iss=https%3A%2F%2Fusher.example&state=s"},
		{"state escaped", "com.example.app:/cb", "a b&code=evil#x", "com.example.app:/cb?code=c0de&iss=https%3A%2F%2Fusher.example&state=a+b%26code%3Devil%23x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := oauth.AuthorizeRequest{RedirectURI: tt.redirectURI, State: tt.state}
			got := a.Redirect("c0de", iss)
			if got != tt.want {
				t.Errorf("Redirect = %s\nwant       %s", got, tt.want)
			}
			u, err := url.Parse(got)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if q.Get("code") != "c0de" || q.Get("iss") != iss || q.Get("state") != tt.state || len(q["code"]) != 1 {
				t.Errorf("query %v", q)
			}
		})
	}

	a := oauth.AuthorizeRequest{RedirectURI: "https://client.example/cb?x=1", State: "s t"}
	got := a.ErrorRedirect(&oauth.Error{Code: oauth.CodeAccessDenied, Description: "The user denied access.", URI: "https://usher.example/docs"}, iss)
	want := "https://client.example/cb?x=1&error=access_denied&error_description=The+user+denied+access.&error_uri=https%3A%2F%2Fusher.example%2Fdocs&iss=https%3A%2F%2Fusher.example&state=s+t"
	if got != want {
		t.Errorf("ErrorRedirect = %s\nwant            %s", got, want)
	}
	a = oauth.AuthorizeRequest{RedirectURI: "http://127.0.0.1/cb"}
	got = a.ErrorRedirect(&oauth.Error{Code: oauth.CodeInvalidScope, Description: "caf\u00e9 \"x\""}, iss)
	want = "http://127.0.0.1/cb?error=invalid_scope&error_description=caf%3F+%3Fx%3F&iss=https%3A%2F%2Fusher.example"
	if got != want {
		t.Errorf("ErrorRedirect = %s\nwant            %s", got, want)
	}
}

func TestErrorRedirectNil(t *testing.T) {
	t.Parallel()
	a := oauth.AuthorizeRequest{RedirectURI: "https://client.example/cb", State: "s"}
	if got, want := a.ErrorRedirect(nil, "https://usher.example"), "https://client.example/cb?error=server_error&iss=https%3A%2F%2Fusher.example&state=s"; got != want {
		t.Errorf("ErrorRedirect(nil) = %s, want %s", got, want)
	}
}

func FuzzParseAuthorize(f *testing.F) {
	f.Add(authorizeQuery(nil).Encode())
	f.Add(authorizeQuery(map[string]string{"state+": "a"}).Encode())
	f.Add("client_id=a&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb&response_type=code")
	f.Fuzz(func(t *testing.T, rawQuery string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		a, err := oauth.ParseAuthorize(q)
		if err != nil {
			var e *oauth.Error
			if !errors.As(err, &e) || e.Code == "" || e.Description == "" {
				t.Fatalf("error %v", err)
			}
			if e.Redirectable && oauth.CheckRedirectURI(a.RedirectURI) != nil {
				t.Fatalf("redirectable error for the redirect URI %q", a.RedirectURI)
			}
			return
		}
		if oauth.CheckRedirectURI(a.RedirectURI) != nil || oauth.CheckChallenge(a.CodeChallengeMethod, a.CodeChallenge) != nil ||
			a.Scope != "mcp:invoke" || a.ClientID == "" || len(a.State) > 1000 {
			t.Fatalf("accepted %+v", a)
		}
		if _, err := url.Parse(a.Redirect("code", "https://usher.example")); err != nil {
			t.Fatalf("redirect does not parse: %v", err)
		}
	})
}

// TestOfflineAccess checks the whole flow of a client that adds
// offline_access to its scope, as some MCP clients do: it is accepted and
// ignored — the consent, the code and the tokens are for mcp:invoke, a
// remembered consent to mcp:invoke answers it, the refresh token comes
// from the client's grant types, and a refresh naming it is accepted.
func TestOfflineAccess(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		withOffline := func(q url.Values) { q.Set("scope", "mcp:invoke offline_access") }
		_, challenge := pkce()
		_, page := e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge, withOffline).Encode(), "olga")
		if strings.Contains(page, "offline_access") || !strings.Contains(page, "mcp:invoke") {
			t.Errorf("the consent page must show mcp:invoke only:\n%s", page)
		}
		code, verifier := e.code(c, "olga", withOffline)
		tok := e.redeem(c, code, verifier)
		if tok.Status != http.StatusOK || tok.Scope != broker.ScopeInvoke || tok.RefreshToken == "" {
			t.Fatalf("redeem: %+v", tok)
		}
		consent, err := st.GetConsent(t.Context(), principal("olga").ID(), c.ID)
		if err != nil || consent.Scope != broker.ScopeInvoke {
			t.Errorf("consent %+v (%v), want mcp:invoke", consent, err)
		}
		// The consent is remembered: a request with offline_access, and
		// one without, get a code at once.
		for _, edit := range []func(url.Values){withOffline, nil} {
			_, challenge := pkce()
			resp, body := e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge, edit).Encode(), "olga")
			if rq := redirectQuery(t, resp, c.RedirectURI); rq.Get("code") == "" {
				t.Errorf("remembered consent: %d %s", resp.StatusCode, body)
			}
		}
		r := e.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "scope": {"mcp:invoke offline_access"}})
		if r.Status != http.StatusOK || r.Scope != broker.ScopeInvoke || r.RefreshToken == "" {
			t.Errorf("refresh naming offline_access: %+v", r)
		}

		// A client registered without refresh_token gets none, offline_access
		// or not.
		noRefresh := e.register(func(md map[string]any) { md["grant_types"] = []string{"authorization_code"} })
		code, verifier = e.code(noRefresh, "olga", withOffline)
		if tok := e.redeem(noRefresh, code, verifier); tok.Status != http.StatusOK || tok.RefreshToken != "" {
			t.Errorf("a client without the refresh_token grant: %+v", tok)
		}
	})
}

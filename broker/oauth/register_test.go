package oauth_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

func TestParseRegistration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want oauth.Registration // Raw is checked apart
	}{
		{"defaults", `{"redirect_uris":["https://client.example/cb"]}`, oauth.Registration{
			RedirectURIs: []string{"https://client.example/cb"}, GrantTypes: []string{"authorization_code"},
			ResponseTypes: []string{"code"}, AuthMethod: "client_secret_basic", Scope: "mcp:invoke",
		}},
		{"public native client", `{
			"client_name": "MCP Inspector",
			"redirect_uris": ["http://localhost:6274/oauth/callback", "http://127.0.0.1/cb"],
			"grant_types": ["authorization_code", "refresh_token"],
			"response_types": ["code"],
			"token_endpoint_auth_method": "none",
			"client_uri": "https://github.com/modelcontextprotocol/inspector",
			"logo_uri": "https://client.example/logo.png",
			"scope": "mcp:invoke openid",
			"software_id": "inspector", "contacts": ["a@example.com"], "jwks": {"keys": [{"kty": "RSA", "kty": "EC"}]}
		}`, oauth.Registration{
			RedirectURIs: []string{"http://localhost:6274/oauth/callback", "http://127.0.0.1/cb"},
			GrantTypes:   []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
			AuthMethod: "none", ClientName: "MCP Inspector", ClientURI: "https://github.com/modelcontextprotocol/inspector",
			LogoURI: "https://client.example/logo.png", Scope: "mcp:invoke",
		}},
		{"private-use scheme, unicode name", `{"redirect_uris":["com.example.app:/cb"],"client_name":"Ünïcödé 客户端","token_endpoint_auth_method":"client_secret_basic"}`, oauth.Registration{
			RedirectURIs: []string{"com.example.app:/cb"}, GrantTypes: []string{"authorization_code"}, ResponseTypes: []string{"code"},
			AuthMethod: "client_secret_basic", ClientName: "Ünïcödé 客户端", Scope: "mcp:invoke",
		}},
		{"unknown members, whatever their case", `{"redirect_uris":["https://c.example/cb"],"Software_ID":"x","logo_uri#ja":"https://c.example/l.png","client_name#ja":"クライアント"}`, oauth.Registration{
			RedirectURIs: []string{"https://c.example/cb"}, GrantTypes: []string{"authorization_code"}, ResponseTypes: []string{"code"},
			AuthMethod: "client_secret_basic", Scope: "mcp:invoke",
		}},
		{"name of the longest length", `{"redirect_uris":["https://c.example/cb"],"client_name":"` + strings.Repeat("é", oauth.MaxClientNameLen) + `"}`, oauth.Registration{
			RedirectURIs: []string{"https://c.example/cb"}, GrantTypes: []string{"authorization_code"}, ResponseTypes: []string{"code"},
			AuthMethod: "client_secret_basic", ClientName: strings.Repeat("é", oauth.MaxClientNameLen), Scope: "mcp:invoke",
		}},
		{"nested as deep as allowed, brackets in strings not counted", `{"redirect_uris":["https://c.example/cb"],"x":` +
			nested(oauth.MaxMetadataDepth-1, `"[[[{{{"`) + `}`, oauth.Registration{
			RedirectURIs: []string{"https://c.example/cb"}, GrantTypes: []string{"authorization_code"}, ResponseTypes: []string{"code"},
			AuthMethod: "client_secret_basic", Scope: "mcp:invoke",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := oauth.ParseRegistration([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Raw) != tt.body {
				t.Errorf("Raw %s, want the body byte for byte", got.Raw)
			}
			got.Raw = nil
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseRegistrationRefuses(t *testing.T) {
	t.Parallel()
	cb := `"redirect_uris":["https://client.example/cb"]`
	tests := []struct {
		name, body, wantCode string
	}{
		{"empty body", ``, "invalid_client_metadata"},
		{"null", `null`, "invalid_client_metadata"},
		{"array", `[{` + cb + `}]`, "invalid_client_metadata"},
		{"string", `"x"`, "invalid_client_metadata"},
		{"truncated", `{` + cb, "invalid_client_metadata"},
		{"trailing garbage", `{` + cb + `}x`, "invalid_client_metadata"},
		{"two objects", `{` + cb + `}{}`, "invalid_client_metadata"},
		{"duplicate member", `{` + cb + `,"redirect_uris":["https://evil.example/cb"]}`, "invalid_client_metadata"},
		{"duplicate auth method", `{` + cb + `,"token_endpoint_auth_method":"none","token_endpoint_auth_method":"client_secret_post"}`, "invalid_client_metadata"},
		{"duplicate member in another case", `{` + cb + `,"Redirect_URIs":["https://evil.example/cb"]}`, "invalid_client_metadata"},
		{"known member in another case", `{"REDIRECT_URIS":["https://client.example/cb"]}`, "invalid_client_metadata"},
		{"auth method in another case", `{` + cb + `,"Token_Endpoint_Auth_Method":"none"}`, "invalid_client_metadata"},
		{"invalid UTF-8", "{" + cb + `,"client_name":"a` + "\xff" + `"}`, "invalid_client_metadata"},
		{"too large", `{` + cb + `,"x":"` + strings.Repeat("a", oauth.MaxRegistrationBytes) + `"}`, "invalid_client_metadata"},
		{"deeply nested", `{` + cb + `,"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, "invalid_client_metadata"},
		{"nested one level too deep", `{` + cb + `,"x":` + nested(oauth.MaxMetadataDepth, `1`) + `}`, "invalid_client_metadata"},
		{"nested 1,000 deep", `{` + cb + `,"x":` + nested(1000, `1`) + `}`, "invalid_client_metadata"},
		{"nested too deep in a known member", `{"redirect_uris":` + nested(oauth.MaxMetadataDepth, `"https://c.example/cb"`) + `}`, "invalid_client_metadata"},
		{"no redirect_uris", `{"client_name":"x"}`, "invalid_redirect_uri"},
		{"empty redirect_uris", `{"redirect_uris":[]}`, "invalid_redirect_uri"},
		{"null redirect_uris", `{"redirect_uris":null}`, "invalid_redirect_uri"},
		{"redirect_uris a string", `{"redirect_uris":"https://client.example/cb"}`, "invalid_client_metadata"},
		{"redirect_uris of numbers", `{"redirect_uris":[1]}`, "invalid_client_metadata"},
		{"too many redirect_uris", `{"redirect_uris":[` + strings.TrimSuffix(strings.Repeat(`"https://c.example/cb",`, 11), ",") + `]}`, "invalid_redirect_uri"},
		{"javascript redirect", `{"redirect_uris":["javascript:alert(1)"]}`, "invalid_redirect_uri"},
		{"http redirect", `{"redirect_uris":["https://client.example/cb","http://client.example/cb"]}`, "invalid_redirect_uri"},
		{"fragment redirect", `{"redirect_uris":["https://client.example/cb#x"]}`, "invalid_redirect_uri"},
		{"implicit grant", `{` + cb + `,"grant_types":["implicit"]}`, "invalid_client_metadata"},
		{"client credentials", `{` + cb + `,"grant_types":["authorization_code","client_credentials"]}`, "invalid_client_metadata"},
		{"token exchange", `{` + cb + `,"grant_types":["urn:ietf:params:oauth:grant-type:token-exchange"]}`, "invalid_client_metadata"},
		{"refresh only", `{` + cb + `,"grant_types":["refresh_token"]}`, "invalid_client_metadata"},
		{"empty grant_types", `{` + cb + `,"grant_types":[]}`, "invalid_client_metadata"},
		{"repeated grant type", `{` + cb + `,"grant_types":["authorization_code","authorization_code"]}`, "invalid_client_metadata"},
		{"token response type", `{` + cb + `,"response_types":["code","token"]}`, "invalid_client_metadata"},
		{"id_token response type", `{` + cb + `,"response_types":["id_token"]}`, "invalid_client_metadata"},
		{"client_secret_post", `{` + cb + `,"token_endpoint_auth_method":"client_secret_post"}`, "invalid_client_metadata"},
		{"private_key_jwt", `{` + cb + `,"token_endpoint_auth_method":"private_key_jwt"}`, "invalid_client_metadata"},
		{"empty auth method", `{` + cb + `,"token_endpoint_auth_method":""}`, "invalid_client_metadata"},
		{"auth method a number", `{` + cb + `,"token_endpoint_auth_method":1}`, "invalid_client_metadata"},
		{"name too long", `{` + cb + `,"client_name":"` + strings.Repeat("a", oauth.MaxClientNameLen+1) + `"}`, "invalid_client_metadata"},
		{"name with RTL override", `{` + cb + `,"client_name":"Claude\u202eexe.evil"}`, "invalid_client_metadata"},
		{"name with newline", `{` + cb + `,"client_name":"a\nb"}`, "invalid_client_metadata"},
		{"name with NUL", `{` + cb + `,"client_name":"a\u0000b"}`, "invalid_client_metadata"},
		{"name with zero-width joiner", `{` + cb + `,"client_name":"a\u200db"}`, "invalid_client_metadata"},
		{"name with C1 control", `{` + cb + `,"client_name":"a\u0085b"}`, "invalid_client_metadata"},
		{"name with padding", `{` + cb + `,"client_name":"  Claude"}`, "invalid_client_metadata"},
		{"name a number", `{` + cb + `,"client_name":7}`, "invalid_client_metadata"},
		{"javascript client_uri", `{` + cb + `,"client_uri":"javascript:alert(1)"}`, "invalid_client_metadata"},
		{"http logo_uri", `{` + cb + `,"logo_uri":"http://client.example/logo.png"}`, "invalid_client_metadata"},
		{"data logo_uri", `{` + cb + `,"logo_uri":"data:image/png;base64,AAAA"}`, "invalid_client_metadata"},
		{"client_uri without host", `{` + cb + `,"client_uri":"https://"}`, "invalid_client_metadata"},
		{"client_uri with bad port", `{` + cb + `,"client_uri":"https://c.example:x/"}`, "invalid_client_metadata"},
		{"user info in client_uri", `{` + cb + `,"client_uri":"https://client.example@evil.example/"}`, "invalid_client_metadata"},
		{"malformed scope", `{` + cb + `,"scope":"mcp:invoke  openid"}`, "invalid_client_metadata"},
		{"scope with quote", `{` + cb + `,"scope":"a\"b"}`, "invalid_client_metadata"},
		{"scope an array", `{` + cb + `,"scope":["mcp:invoke"]}`, "invalid_client_metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := oauth.ParseRegistration([]byte(tt.body))
			var e *oauth.Error
			if !errors.As(err, &e) {
				reg.Raw = nil
				t.Fatalf("got %+v, %v; want an *oauth.Error", reg, err)
			}
			if e.Code != tt.wantCode || e.Status != 400 || e.Description == "" {
				t.Errorf("got %+v, want %s", e, tt.wantCode)
			}
			// RFC 6749 keeps '"' and '\\' out of error_description: one
			// there would reach the client as '?'.
			if strings.ContainsAny(e.Description, `"\`) {
				t.Errorf("description %q holds a character error_description cannot carry", e.Description)
			}
		})
	}
}

// nested is inner inside depth levels of arrays and objects, alternating.
func nested(depth int, inner string) string {
	var open, closing strings.Builder
	for i := range depth {
		if i%2 == 0 {
			open.WriteString(`[`)
			closing.WriteString(`]`)
		} else {
			open.WriteString(`{"k":`)
			closing.WriteString(`}`)
		}
	}
	c := []byte(closing.String())
	slices.Reverse(c)
	return open.String() + inner + string(c)
}

// TestRegisterRefusesDeepNesting checks that a registration request whose
// extra member nests deeper than MaxMetadataDepth is refused with
// invalid_client_metadata and stores nothing, on both engines (SQLite's
// json_valid refuses 1,000 levels, PostgreSQL's json stores 5,000).
func TestRegisterRefusesDeepNesting(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		for _, depth := range []int{oauth.MaxMetadataDepth, 1000, 5000} {
			body := `{"redirect_uris":["https://app.example.com/cb"],"token_endpoint_auth_method":"none","x":` +
				strings.Repeat("[", depth) + `0` + strings.Repeat("]", depth) + `}`
			req, err := http.NewRequest(http.MethodPost, e.issuer+oauth.PathRegister, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, answer := e.do(req, "")
			var oe struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if err := json.Unmarshal([]byte(answer), &oe); err != nil || resp.StatusCode != http.StatusBadRequest ||
				oe.Error != oauth.CodeInvalidClientMetadata || oe.Description == "" {
				t.Errorf("%d deep: %d %s, want 400 invalid_client_metadata", depth, resp.StatusCode, answer)
			}
		}
		if cls, err := st.ListOAuthClients(t.Context()); err != nil || len(cls) != 0 {
			t.Errorf("clients stored: %d (%v), want none", len(cls), err)
		}
	})
}

func TestRegistrationResponse(t *testing.T) {
	t.Parallel()
	issued := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	public, err := oauth.ParseRegistration([]byte(`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","client_name":"Inspector","grant_types":["authorization_code","refresh_token"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := public.Response("usher-dcr-abc", "", issued)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"client_id":"usher-dcr-abc","client_id_issued_at":1796126400,"redirect_uris":["http://127.0.0.1/cb"],` +
		`"grant_types":["authorization_code","refresh_token"],"response_types":["code"],"token_endpoint_auth_method":"none",` +
		`"client_name":"Inspector","scope":"mcp:invoke"}`
	if string(body) != want {
		t.Errorf("public client:\n%s\nwant\n%s", body, want)
	}

	confidential, err := oauth.ParseRegistration([]byte(`{"redirect_uris":["https://client.example/cb"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err = confidential.Response("usher-dcr-def", "s3cret", issued)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got["client_secret"] != "s3cret" || got["client_secret_expires_at"] != float64(0) || got["token_endpoint_auth_method"] != "client_secret_basic" {
		t.Errorf("confidential client: %s", body)
	}

	for _, tt := range []struct {
		name             string
		reg              oauth.Registration
		clientID, secret string
	}{
		{"no client id", public, "", ""},
		{"secret for a public client", public, "id", "s"},
		{"no secret for a confidential client", confidential, "id", ""},
	} {
		if body, err := tt.reg.Response(tt.clientID, tt.secret, issued); err == nil {
			t.Errorf("%s: %s, want an error", tt.name, body)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for range 100 {
		id := oauth.NewClientID()
		if !strings.HasPrefix(id, "usher-dcr-") || len(id) != len("usher-dcr-")+22 || ids[id] {
			t.Fatalf("client id %q", id)
		}
		ids[id] = true
		s := oauth.NewSecret()
		if len(s) != 43 || strings.ContainsAny(s, "+/=") || ids[s] {
			t.Fatalf("secret %q", s)
		}
		ids[s] = true
	}

	s := oauth.NewSecret()
	h := oauth.HashSecret(s)
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("hash %q", h)
	}
	if got := oauth.HashSecret("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashSecret(abc) = %s", got)
	}
	for _, tt := range []struct {
		name, secret, hash string
		want               bool
	}{
		{"right", s, h, true},
		{"wrong secret", s + "x", h, false},
		{"hash as secret", h, h, false},
		{"upper-case hash", s, strings.ToUpper(h), h == strings.ToUpper(h)},
		{"empty secret", "", oauth.HashSecret(""), false},
		{"empty hash", s, "", false},
		{"truncated hash", s, h[:63], false},
	} {
		if got := oauth.CheckSecret(tt.secret, tt.hash); got != tt.want {
			t.Errorf("%s: CheckSecret = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func FuzzParseRegistration(f *testing.F) {
	f.Add([]byte(`{"redirect_uris":["https://client.example/cb"],"token_endpoint_auth_method":"none"}`))
	f.Add([]byte(`{"redirect_uris":["com.example.app:/cb"],"grant_types":["authorization_code","refresh_token"],"client_name":"x"}`))
	f.Add([]byte(`{"redirect_uris":["http://127.0.0.1/cb"],"redirect_uris":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		reg, err := oauth.ParseRegistration(body)
		if err != nil {
			var e *oauth.Error
			if !errors.As(err, &e) || (e.Code != oauth.CodeInvalidClientMetadata && e.Code != oauth.CodeInvalidRedirectURI) {
				t.Fatalf("error %v is not an RFC 7591 error", err)
			}
			return
		}
		if len(reg.RedirectURIs) == 0 || !slices.Contains(reg.GrantTypes, "authorization_code") || reg.Scope != "mcp:invoke" ||
			(reg.AuthMethod != "none" && reg.AuthMethod != "client_secret_basic") || string(reg.Raw) != string(body) {
			t.Fatalf("accepted %q as %+v", body, reg)
		}
		for _, u := range reg.RedirectURIs {
			if oauth.CheckRedirectURI(u) != nil {
				t.Fatalf("accepted redirect URI %q", u)
			}
		}
		secret := ""
		if reg.AuthMethod != "none" {
			secret = "s"
		}
		resp, err := reg.Response("id", secret, time.Unix(0, 0))
		if err != nil || !json.Valid(resp) {
			t.Fatalf("response %s, %v", resp, err)
		}
	})
}

// TestRegisterBehindProxy checks that the registration limit counts the
// client's address behind a trusted proxy — the rightmost entry of the
// forwarding header that is not a trusted proxy — and that a header sent
// by a peer that is not a trusted proxy changes nothing.
func TestRegisterBehindProxy(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		// The test's requests come from 127.0.0.1: the proxy.
		proxy, err := httpx.NewTrustedProxies([]string{"127.0.0.0/8"}, httpx.HeaderXForwardedFor)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, st, func(o *oauth.ServerOptions) { o.RegistrationsPerHour = 2; o.ClientAddr = proxy.ClientAddr })
		for range 2 {
			if resp, body := registerFrom(e, "203.0.113.1"); resp.StatusCode != http.StatusCreated {
				t.Fatalf("203.0.113.1: %d %s", resp.StatusCode, body)
			}
		}
		for name, xff := range map[string]string{
			"the same client":                 "203.0.113.1",
			"a forged entry left of the real": "198.51.100.77, 203.0.113.1",
		} {
			if resp, body := registerFrom(e, xff); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, oauth.CodeTemporarilyUnavailable) {
				t.Errorf("%s: %d %s, want 429", name, resp.StatusCode, body)
			}
		}
		resp, body := registerFrom(e, "203.0.113.2")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("another client behind the proxy: %d %s", resp.StatusCode, body)
		}
		var reg struct {
			ClientID string `json:"client_id"`
		}
		if err := json.Unmarshal([]byte(body), &reg); err != nil {
			t.Fatal(err)
		}
		if cl, err := st.GetOAuthClient(t.Context(), reg.ClientID); err != nil || cl.RegisteredBy != "203.0.113.2" {
			t.Errorf("registered by %q (%v), want the client's address", cl.RegisteredBy, err)
		}

		// A peer that is not a trusted proxy is the client, whatever it
		// claims.
		other, err := httpx.NewTrustedProxies([]string{"10.0.0.0/8"}, httpx.HeaderXForwardedFor)
		if err != nil {
			t.Fatal(err)
		}
		u := newEnv(t, storetest.NewSQLite(t), func(o *oauth.ServerOptions) { o.RegistrationsPerHour = 2; o.ClientAddr = other.ClientAddr })
		for i, xff := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
			resp, body := registerFrom(u, xff)
			if want := []int{201, 201, 429}[i]; resp.StatusCode != want {
				t.Errorf("spoofed %s from an untrusted peer: %d %s, want %d", xff, resp.StatusCode, body, want)
			}
		}
	})
}

// registerFrom registers a client through a proxy that sends
// X-Forwarded-For: xff.
func registerFrom(e *env, xff string) (*http.Response, string) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"redirect_uris": []string{"https://app.example.com/cb"}, "token_endpoint_auth_method": "none"})
	req, err := http.NewRequest(http.MethodPost, e.issuer+oauth.PathRegister, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", xff)
	return e.do(req, "")
}

// TestRegisterCursor checks the registration Cursor sends — three redirect
// URIs, one of them a private-use scheme that is not a reversed domain
// name — and an authorization that ends at that scheme, the consent page
// naming it an application on this device.
func TestRegisterCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	const callback = "cursor://anysphere.cursor-mcp/oauth/callback"
	c := e.register(func(md map[string]any) {
		md["client_name"] = "Cursor"
		md["redirect_uris"] = []string{callback, "https://www.cursor.com/agents/mcp/oauth/callback", "http://localhost:8787/callback"}
	})
	if c.RedirectURI != callback {
		t.Fatalf("registered %q first, want %q", c.RedirectURI, callback)
	}
	_, challenge := pkce()
	resp, page := e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge, nil).Encode(), "cora")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "cursor:") || !strings.Contains(page, "an application on this device") {
		t.Fatalf("consent page %d:\n%s", resp.StatusCode, page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' cursor:;") {
		t.Errorf("CSP %q must let the form's answer redirect to cursor:", csp)
	}
	code, _ := e.code(c, "cora", nil)
	if code == "" {
		t.Fatal("no code")
	}

	for _, uri := range []string{"javascript://x/%0aalert(1)", "ms-msdt:/id", "C:/Windows/System32/calc.exe", "intent://cb/x"} {
		resp, body := e.registerRaw(map[string]any{"redirect_uris": []string{callback, uri}, "token_endpoint_auth_method": "none"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, oauth.CodeInvalidRedirectURI) {
			t.Errorf("%s: %d %s, want invalid_redirect_uri", uri, resp.StatusCode, body)
		}
	}
}

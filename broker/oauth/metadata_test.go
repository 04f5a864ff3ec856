package oauth_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/oauth"
)

// wantMetadata is the whole document for the issuer https://usher.example.
const wantMetadata = `{
  "issuer": "https://usher.example",
  "authorization_endpoint": "https://usher.example/oauth/authorize",
  "token_endpoint": "https://usher.example/oauth/token",
  "registration_endpoint": "https://usher.example/oauth/register",
  "revocation_endpoint": "https://usher.example/oauth/revoke",
  "response_types_supported": [
    "code"
  ],
  "response_modes_supported": [
    "query"
  ],
  "grant_types_supported": [
    "authorization_code",
    "refresh_token",
    "urn:ietf:params:oauth:grant-type:token-exchange"
  ],
  "code_challenge_methods_supported": [
    "S256"
  ],
  "token_endpoint_auth_methods_supported": [
    "none",
    "client_secret_basic",
    "private_key_jwt"
  ],
  "token_endpoint_auth_signing_alg_values_supported": [
    "RS256",
    "ES256"
  ],
  "revocation_endpoint_auth_methods_supported": [
    "none",
    "client_secret_basic",
    "private_key_jwt"
  ],
  "revocation_endpoint_auth_signing_alg_values_supported": [
    "RS256",
    "ES256"
  ],
  "scopes_supported": [
    "mcp:invoke"
  ],
  "client_id_metadata_document_supported": true,
  "authorization_response_iss_parameter_supported": true
}
`

func TestNewMetadata(t *testing.T) {
	t.Parallel()
	m, err := oauth.NewMetadata("https://usher.example")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if string(got)+"\n" != wantMetadata {
		t.Errorf("metadata:\n%s\nwant:\n%s", got, wantMetadata)
	}

	m, err = oauth.NewMetadata("http://127.0.0.1:8080/usher")
	if err != nil {
		t.Fatal(err)
	}
	if m.TokenEndpoint != "http://127.0.0.1:8080/usher/oauth/token" || m.AuthorizationEndpoint != "http://127.0.0.1:8080/usher/oauth/authorize" {
		t.Errorf("endpoints of an issuer with a path: %+v", m)
	}
}

func TestNewMetadataRefuses(t *testing.T) {
	t.Parallel()
	for _, issuer := range []string{
		"",
		"usher.example",
		"/usher",
		"http://usher.example",       // http off loopback
		"https://usher.example/",     // trailing slash
		"https://usher.example/a/",   // trailing slash
		"https://usher.example?x=1",  // query
		"https://usher.example#top",  // fragment
		"https://user@usher.example", // user info
		"ftp://usher.example",
		"https://usher.example\n",
		"https://usher.example/a%2Fb",  // escaped path
		"https://usher.example/a b",    // not plain
		"https://usher.example//a",     // empty segment
		"https://usher.example/a/../b", // dot segment
		"https://usher.example/.",      // dot segment
		"https://usher.example/café",   // non-ASCII
	} {
		if m, err := oauth.NewMetadata(issuer); err == nil {
			t.Errorf("NewMetadata(%q) = %+v, want an error", issuer, m)
		}
	}
}

func TestWellKnownPaths(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		issuer string
		want   []string
	}{
		{"https://usher.example", []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"}},
		{"https://usher.example:8443", []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"}},
		{"https://usher.example/tenant/one", []string{
			"/.well-known/oauth-authorization-server/tenant/one",
			"/.well-known/openid-configuration/tenant/one",
			"/tenant/one/.well-known/openid-configuration",
		}},
	} {
		m, err := oauth.NewMetadata(tt.issuer)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.WellKnownPaths(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.issuer, got, tt.want)
		}
	}
}

func TestMetadataHandler(t *testing.T) {
	t.Parallel()
	root, err := oauth.NewMetadata("http://127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	root.RegistrationEndpoint = "" // Dynamic Client Registration off
	withPath, err := oauth.NewMetadata("http://127.0.0.1:8080/usher")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", oauth.MetadataHandler(root))
	for _, p := range withPath.WellKnownPaths() {
		mux.Handle(p, oauth.MetadataHandler(withPath))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		name, method, path string
		header             map[string]string
		wantStatus         int
		wantIssuer         string // for a document
		wantError          string // for an OAuth error body
		wantHeader         map[string]string
	}{
		{name: "GET at the root", method: "GET", path: "/.well-known/oauth-authorization-server", wantStatus: 200, wantIssuer: "http://127.0.0.1:8080",
			wantHeader: map[string]string{"Content-Type": "application/json", "Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"}},
		{name: "GET path-inserted", method: "GET", path: "/.well-known/oauth-authorization-server/usher", wantStatus: 200, wantIssuer: "http://127.0.0.1:8080/usher"},
		{name: "HEAD", method: "HEAD", path: "/.well-known/oauth-authorization-server", wantStatus: 200,
			wantHeader: map[string]string{"Content-Type": "application/json", "Access-Control-Allow-Origin": "*"}},
		{name: "CORS preflight", method: "OPTIONS", path: "/.well-known/oauth-authorization-server",
			header:     map[string]string{"Origin": "http://localhost:6274", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "mcp-protocol-version"},
			wantStatus: 204, wantHeader: map[string]string{"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS"}},
		{name: "POST", method: "POST", path: "/.well-known/oauth-authorization-server", wantStatus: 405, wantError: "invalid_request",
			wantHeader: map[string]string{"Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store"}},
		{name: "DELETE path-inserted", method: "DELETE", path: "/.well-known/oauth-authorization-server/usher", wantStatus: 405, wantError: "invalid_request"},
		{name: "OpenID configuration", method: "GET", path: "/.well-known/openid-configuration", wantStatus: 404, wantError: "invalid_request",
			wantHeader: map[string]string{"Content-Type": "application/json; charset=utf-8", "Access-Control-Allow-Origin": "*"}},
		{name: "OpenID configuration path-appended", method: "GET", path: "/usher/.well-known/openid-configuration", wantStatus: 404, wantError: "invalid_request"},
		{name: "another issuer's path", method: "GET", path: "/.well-known/oauth-authorization-server/other", wantStatus: 404, wantError: "invalid_request"},
		{name: "trailing slash", method: "GET", path: "/.well-known/oauth-authorization-server/", wantStatus: 404, wantError: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			for k, want := range tt.wantHeader {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			switch {
			case tt.method == "HEAD" || tt.method == "OPTIONS":
				if len(body) != 0 {
					t.Errorf("a body: %s", body)
				}
			case tt.wantIssuer != "":
				var doc map[string]any
				if err := json.Unmarshal(body, &doc); err != nil {
					t.Fatal(err)
				}
				if doc["issuer"] != tt.wantIssuer {
					t.Errorf("issuer %v, want %s", doc["issuer"], tt.wantIssuer)
				}
				if tt.wantIssuer == "http://127.0.0.1:8080" && strings.Contains(string(body), "registration_endpoint") {
					t.Error("registration_endpoint published although cleared")
				}
			default:
				var e struct{ Error, ErrorDescription string }
				if err := json.Unmarshal(body, &e); err != nil || e.Error != tt.wantError {
					t.Errorf("body %s, want OAuth error %s", body, tt.wantError)
				}
			}
		})
	}
}

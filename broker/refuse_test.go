package broker_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/identity"
)

const brokerIssuer = "https://usher.example.com"

// jwt returns an unsigned token with the given claims: RefuseTokens
// reads it without verifying.
func jwt(claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]any{"alg": "RS256", "typ": "at+jwt", "kid": "k1"}) + "." + enc(claims) + ".c2lnbmF0dXJl"
}

// rawJWT returns an unsigned token whose claims are payload as written.
func rawJWT(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","typ":"at+jwt","kid":"k1"}`)) + "." + enc([]byte(payload)) + ".c2lnbmF0dXJl"
}

func TestRefuseTokens(t *testing.T) {
	t.Parallel()
	reached := false
	h := broker.RefuseTokens(brokerIssuer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = true
		w.WriteHeader(http.StatusNoContent)
	}))
	tests := []struct {
		name    string
		header  []string
		refused bool
	}{
		{"broker issuer", []string{"Bearer " + jwt(map[string]any{"iss": brokerIssuer, "sub": "alice"})}, true},
		{"broker scope from another issuer", []string{"Bearer " + jwt(map[string]any{"iss": "https://other", "scope": "openid mcp:invoke"})}, true},
		{"broker scope as an array", []string{"Bearer " + jwt(map[string]any{"scope": []string{"mcp:invoke"}})}, true},
		{"broker scope as scp", []string{"Bearer " + jwt(map[string]any{"scp": "mcp:invoke"})}, true},
		{"lower-case scheme", []string{"bearer " + jwt(map[string]any{"iss": brokerIssuer})}, true},
		{"second Authorization header", []string{"Bearer x.y.z", "Bearer " + jwt(map[string]any{"iss": brokerIssuer})}, true},
		{"broker issuer written with escapes", []string{"Bearer " + rawJWT(`{"iss":"https:\/\/usher.example.com"}`)}, true},
		{"broker scope written with escapes", []string{"Bearer " + rawJWT(`{"scope":"openid mcp\u003ainvoke"}`)}, true},
		{"identity token of an issuer under Usher's URL", []string{"Bearer " + jwt(map[string]any{"iss": brokerIssuer + "/dev/oidc", "scp": "usher.api"})}, false},
		{"identity token", []string{"Bearer " + jwt(map[string]any{"iss": "https://login.example.com/t/v2.0", "scp": "approvals.decide"})}, false},
		{"a scope that only contains the words", []string{"Bearer " + jwt(map[string]any{"scope": "mcp:invoke-later"})}, false},
		{"iss not a string", []string{"Bearer " + jwt(map[string]any{"iss": 5})}, false},
		{"iss not a string, broker scope", []string{"Bearer " + jwt(map[string]any{"iss": 5, "scope": "mcp:invoke"})}, true},
		{"claim names in another case", []string{"Bearer " + jwt(map[string]any{"ISS": brokerIssuer, "Scope": "mcp:invoke", "SCP": "mcp:invoke"})}, false},
		{"four parts", []string{"Bearer " + jwt(map[string]any{"iss": brokerIssuer}) + ".more"}, false},
		{"not a JWT", []string{"Bearer opaque-token"}, false},
		{"payload not base64", []string{"Bearer a.!!!.c"}, false},
		{"payload not JSON", []string{"Bearer a." + base64.RawURLEncoding.EncodeToString([]byte("iss")) + ".c"}, false},
		{"oversized", []string{"Bearer " + jwt(map[string]any{"iss": brokerIssuer, "pad": strings.Repeat("p", identity.MaxTokenBytes)})}, false},
		{"basic auth", []string{"Basic " + jwt(map[string]any{"iss": brokerIssuer})}, false},
		{"no Authorization", nil, false},
	}
	for _, tt := range tests {
		reached = false
		r := httptest.NewRequest("POST", "/api/approvals/x/decision", nil)
		for _, v := range tt.header {
			r.Header.Add("Authorization", v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if tt.refused {
			if w.Code != http.StatusForbidden || reached || !strings.Contains(w.Body.String(), `"code":"broker_token_refused"`) {
				t.Errorf("%s: %d %s (handler reached %v), want 403 broker_token_refused", tt.name, w.Code, w.Body, reached)
			}
			continue
		}
		if !reached {
			t.Errorf("%s: %d %s, want it passed on", tt.name, w.Code, w.Body)
		}
	}

	// Without a configured issuer, the scope still gives a broker token away.
	h = broker.RefuseTokens("", http.NotFoundHandler())
	r := httptest.NewRequest("GET", "/api/approvals", nil)
	r.Header.Set("Authorization", "Bearer "+jwt(map[string]any{"iss": "", "scope": "mcp:invoke"}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("broker scope with no issuer configured = %d, want 403", w.Code)
	}
}

package identity_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/identity"
)

// entraAppClaims are the claims of an Entra v2 app-only access token: what
// a daemon gets from the client credentials grant for the API, with an
// application role instead of a delegated scope, and "sub" equal to "oid"
// (the service principal).
func entraAppClaims(iss string, now time.Time) map[string]any {
	const servicePrincipal = "c7b2a1f0-3e0d-4a8b-9d51-2f6e1c0a9b77"
	return map[string]any{
		"iss":    iss,
		"aud":    apiClientID,
		"tid":    tenantA,
		"oid":    servicePrincipal,
		"sub":    servicePrincipal,
		"azp":    "5b0b6a1e-8d7c-4f3e-a2b1-9c8d7e6f5a4b",
		"azpacr": "1",
		"idtyp":  "app",
		"roles":  []string{"Usher.Admin"},
		"ver":    "2.0",
		"iat":    now.Unix(),
		"nbf":    now.Unix(),
		"exp":    now.Add(time.Hour).Unix(),
	}
}

// Tokens an application obtained for itself are refused, however they are
// shaped, while a person's token with the same roles is accepted.
func TestAppOnlyTokensAreRefused(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	v, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		claims func() map[string]any
		want   string
	}{
		{name: "entra app-only token", claims: func() map[string]any { return entraAppClaims(ti.URL(), clk.Now()) }, want: "app_token"},
		{name: "entra app-only token without the idtyp claim: roles only", claims: func() map[string]any {
			c := entraAppClaims(ti.URL(), clk.Now())
			delete(c, "idtyp")
			return c
		}, want: "app_token"},
		{name: "idtyp app next to the API's scope", claims: func() map[string]any {
			c := entraAppClaims(ti.URL(), clk.Now())
			c["scp"] = "usher.api"
			return c
		}, want: "app_token"},
		{name: "app-only token with an empty scope claim", claims: func() map[string]any {
			c := entraAppClaims(ti.URL(), clk.Now())
			delete(c, "idtyp")
			c["scope"] = ""
			return c
		}, want: "app_token"},
		{name: "a person's token that says so", claims: func() map[string]any {
			c := entraClaims(ti.URL(), clk.Now())
			c["idtyp"] = "user"
			return c
		}, want: "accepted"},
		{name: "a person's token with the same roles", claims: func() map[string]any { return entraClaims(ti.URL(), clk.Now()) }, want: "accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(t.Context(), sign(t, ti.key, goodKID, tt.claims()))
			if got := outcome(err); got != tt.want {
				t.Fatalf("Verify: %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}

// The middleware answers an app-only token 403 user_token_required, with
// the delegated scope it needs in the challenge.
func TestMiddlewareRefusesAppOnlyTokens(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	v, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Bool
	api := httptest.NewServer(v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Store(true) })))
	t.Cleanup(api.Close)
	req, err := http.NewRequestWithContext(t.Context(), "GET", api.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+sign(t, ti.key, goodKID, entraAppClaims(ti.URL(), clk.Now())))
	resp, err := api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Error struct{ Code string } }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || body.Error.Code != "user_token_required" {
		t.Errorf("app-only token = %d %q, want 403 user_token_required", resp.StatusCode, body.Error.Code)
	}
	if got, want := resp.Header.Get("WWW-Authenticate"), `Bearer error="insufficient_scope", scope="usher.api"`; got != want {
		t.Errorf("challenge = %q, want %q", got, want)
	}
	if reached.Load() {
		t.Error("an app-only token reached the handler")
	}
}

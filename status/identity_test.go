package status_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/status"
)

// Over real HTTP, behind the real identity middleware with a real issuer's
// keys and broker.RefuseTokens, as `usher serve` mounts the API: an admin
// reads the status; a person outside admin.groups is 403 admin_required;
// a broker token and an application's own token are refused even when
// they carry the admins' group as a group or an app role.
func TestAdminOnlyOverHTTP(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Use: "sig", Algorithm: "RS256"}}})
	}))
	t.Cleanup(idp.Close)
	const audience, brokerIssuer = "api://usher", "https://usher.example.com"
	verifier, err := identity.New(t.Context(), &identity.Options{
		Issuer: idp.URL, Audiences: []string{audience}, RequiredScopes: []string{"access_as_user"}, JWKSURL: idp.URL + "/keys",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := status.NewAPI(openStore(t), &status.APIOptions{Admins: status.Admins{"operators"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(broker.RefuseTokens(brokerIssuer, verifier.Middleware(api.Handler())))
	t.Cleanup(srv.Close)

	sign := func(claims gojwt.MapClaims) string {
		now := time.Now()
		claims["iat"], claims["nbf"], claims["exp"] = now.Unix(), now.Unix(), now.Add(5*time.Minute).Unix()
		tok := gojwt.NewWithClaims(gojwt.SigningMethodRS256, claims)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	person := func(oid string, groups ...string) string {
		return sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": oid + "-sub", "oid": oid, "scp": "access_as_user", "groups": groups})
	}
	for name, c := range map[string]struct {
		token string
		code  int
		err   string
	}{
		"an admin":                 {person("olga", "operators"), 200, ""},
		"an admin by app role":     {sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "s", "oid": "oskar", "scp": "access_as_user", "roles": []string{"operators"}}), 200, ""},
		"a person in other groups": {person("alice", "staff"), 403, "admin_required"},
		"a person in no group":     {person("bob"), 403, "admin_required"},
		"an app-only token, idtyp": {sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "daemon", "oid": "daemon", "idtyp": "app", "roles": []string{"operators"}}), 403, "user_token_required"},
		"an app-only token, roles": {sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "daemon", "oid": "daemon", "roles": []string{"operators"}}), 403, "user_token_required"},
		"a broker token":           {sign(gojwt.MapClaims{"iss": brokerIssuer, "aud": brokerIssuer + "/mcp", "sub": "olga", "scope": "mcp:invoke", "groups": []string{"operators"}}), 403, "broker_token_refused"},
		"no token":                 {"", 401, "unauthenticated"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/api/admin/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Replicas []status.ReplicaStatus
			Error    struct{ Code string }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.code || body.Error.Code != c.err || (c.code == 200 && body.Replicas == nil) {
			t.Errorf("%s: %d %+v, want %d %q", name, resp.StatusCode, body, c.code, c.err)
		}
	}
}

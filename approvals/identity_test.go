package approvals_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// Over real HTTP, behind the real identity middleware with a real issuer's
// keys: a signed-in person decides; a broker token is refused, politely
// by broker.RefuseTokens and, without it, by identity verification itself;
// an Entra app-only token is refused by identity verification.
// brokerIssuer is the issuer of the broker tokens the tests sign.
const brokerIssuer = "https://usher.example.com"

func TestDecisionOverHTTP(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Use: "sig", Algorithm: "RS256"}}})
	}))
	t.Cleanup(idp.Close)
	const audience = "api://usher"
	verifier, err := identity.New(t.Context(), &identity.Options{
		Issuer: idp.URL, Audiences: []string{audience}, RequiredScopes: []string{"access_as_user"}, JWKSURL: idp.URL + "/keys",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, storetest.NewSQLite(t))
	user := identity.Principal{Issuer: idp.URL, ObjectID: "alice-oid"}
	b := binding()
	b.Principal = user.ID()
	a := e.request(t, b)

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
	userToken := sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "alice-sub", "oid": "alice-oid", "scp": "access_as_user"})
	// An application's own token (client credentials), shaped as Entra
	// issues it, for the same object id (the worst case).
	appTokens := map[string]string{
		"idtyp app": sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "alice-oid", "oid": "alice-oid",
			"azp": "daemon-client", "azpacr": "1", "idtyp": "app", "roles": []string{"Approvals.Decide"}, "ver": "2.0"}),
		"roles only": sign(gojwt.MapClaims{"iss": idp.URL, "aud": audience, "sub": "alice-oid", "oid": "alice-oid",
			"azp": "daemon-client", "roles": []string{"Approvals.Decide"}, "ver": "2.0"}),
	}
	// A broker token for the same user, signed by a key the issuer
	// publishes (the worst case): its issuer and audience are the broker's.
	brokerToken := sign(gojwt.MapClaims{"iss": brokerIssuer, "aud": brokerIssuer + "/mcp", "sub": user.ID(),
		"scope": "mcp:invoke", "client_id": "cursor", "jti": "j1"})

	api := verifier.Middleware(e.svc.Handler(nil))
	servers := map[string]*httptest.Server{
		"courteous": httptest.NewServer(broker.RefuseTokens(brokerIssuer, api)),
		"bare":      httptest.NewServer(api),
	}
	for _, srv := range servers {
		t.Cleanup(srv.Close)
	}
	post := func(srv *httptest.Server, token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/api/approvals/"+a.ID+"/decision",
			strings.NewReader(`{"decision":"approve"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Status string
			Error  struct{ Code string }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Status + body.Error.Code
	}

	if status, code := post(servers["courteous"], brokerToken); status != 403 || code != "broker_token_refused" {
		t.Errorf("broker token, courteous = %d %s, want 403 broker_token_refused", status, code)
	}
	if status, code := post(servers["bare"], brokerToken); status != 401 {
		t.Errorf("broker token, identity alone = %d %s, want 401", status, code)
	}
	for name, tok := range appTokens {
		if status, code := post(servers["courteous"], tok); status != 403 || code != "user_token_required" {
			t.Errorf("app-only token (%s) = %d %s, want 403 user_token_required", name, status, code)
		}
	}
	if got, _ := e.st.GetApproval(t.Context(), a.ID); got.Status != store.ApprovalPending {
		t.Fatalf("after broker and app-only tokens the approval is %s, want pending", got.Status)
	}
	if status, result := post(servers["courteous"], userToken); status != 200 || result != "approved" {
		t.Errorf("the user's own token = %d %s, want 200 approved", status, result)
	}
}

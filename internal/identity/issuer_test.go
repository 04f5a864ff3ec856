package identity_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/testenv"
)

// Entra-shaped identifiers of the test tenant and applications.
const (
	tenantA     = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	tenantB     = "f8cdef31-a31e-4b4a-93e4-5f571e91255a"
	apiClientID = "6e74172b-be56-4843-9ff4-e66a39bb12e3"
	apiAppIDURI = "api://usher.example.com"
	webClientID = "0d4c8a43-42b7-4b50-a1c3-6f7fba7b8e6e"
	userOID     = "00000000-0000-0000-66f3-3332eca7ea81"
	goodKID     = "key-1"
	otherKID    = "key-2"
)

// testKeys are generated once: RSA key generation is the slow part of
// these tests.
var testKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
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

// testIssuer is a real OIDC issuer over loopback HTTP: discovery and JWKS,
// Entra-shaped paths for the multi-tenant common metadata, and RS256
// signing with a real key.
type testIssuer struct {
	srv      *httptest.Server
	key      *rsa.PrivateKey // published under goodKID
	other    *rsa.PrivateKey // published under otherKID only once withdrawn
	jwksHits atomic.Int32
	// withdrawn makes the key set publish other under otherKID in place
	// of key under goodKID, as an issuer rotating its keys does.
	withdrawn atomic.Bool
}

func newTestIssuer(t testing.TB) *testIssuer {
	t.Helper()
	keys := testKeys()
	ti := &testIssuer{key: keys[0], other: keys[1]}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                ti.URL(),
			"jwks_uri":                              ti.URL() + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /common/v2.0/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                ti.MultiTenantIssuer(),
			"jwks_uri":                              ti.URL() + "/common/discovery/v2.0/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	keysHandler := func(w http.ResponseWriter, r *http.Request) {
		ti.jwksHits.Add(1)
		k := jose.JSONWebKey{Key: ti.key.Public(), KeyID: goodKID, Use: "sig"}
		if ti.withdrawn.Load() {
			k = jose.JSONWebKey{Key: ti.other.Public(), KeyID: otherKID, Use: "sig"}
		}
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k}})
	}
	mux.HandleFunc("GET /keys", keysHandler)
	mux.HandleFunc("GET /common/discovery/v2.0/keys", keysHandler)
	ti.srv = httptest.NewServer(mux)
	t.Cleanup(ti.srv.Close)
	return ti
}

// URL is the single-tenant issuer.
func (ti *testIssuer) URL() string { return ti.srv.URL }

// MultiTenantIssuer is the Entra-style issuer template.
func (ti *testIssuer) MultiTenantIssuer() string { return ti.srv.URL + "/{tenantid}/v2.0" }

// TenantIssuer is the issuer of one tenant under the template.
func (ti *testIssuer) TenantIssuer(tid string) string { return ti.srv.URL + "/" + tid + "/v2.0" }

// entraClaims are the claims of an Entra v2 access token for the API.
func entraClaims(iss string, now time.Time) map[string]any {
	return map[string]any{
		"iss":                iss,
		"aud":                apiClientID,
		"tid":                tenantA,
		"oid":                userOID,
		"sub":                "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
		"azp":                webClientID,
		"scp":                "usher.api Sessions.Read",
		"ver":                "2.0",
		"iat":                now.Unix(),
		"nbf":                now.Unix(),
		"exp":                now.Add(time.Hour).Unix(),
		"name":               "Ada Lovelace",
		"preferred_username": "ada@contoso.example",
		"email":              "ada@contoso.example",
		"groups":             []string{"b1f4a0c5-4c7e-4a0e-9a2b-2c4f0f5d3e11"},
		"roles":              []string{"Usher.Admin"},
	}
}

// sign signs claims with RS256 under kid.
func sign(t testing.TB, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	return signWith(t, jose.RS256, jose.JSONWebKey{Key: key, KeyID: kid}, claims)
}

func signWith(t testing.TB, alg jose.SignatureAlgorithm, key any, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// unsigned returns an "alg":"none" token.
func unsigned(t *testing.T, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT","kid":"`+goodKID+`"}`)) + "." + enc(payload) + "."
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// newClock returns an injectable clock at a fixed time.
func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
}

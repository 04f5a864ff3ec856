package broker

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/internal/identity"
)

func TestVerifyAcceptsMintedToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.verifier.Verify(t.Context(), tok.Raw)
	if err != nil {
		t.Fatal(err)
	}
	now := f.clock.Now()
	want := Claims{
		Issuer: testIssuer, Subject: "alice", Audience: testAudience, ID: tok.ID, Scopes: []string{"mcp:invoke"},
		ClientID: "usher-assistant", Actor: "usher-assistant", RunID: "run-1",
		IssuedAt: now, ExpiresAt: now.Add(5 * time.Minute),
	}
	if c.Issuer != want.Issuer || c.Subject != want.Subject || c.Audience != want.Audience || c.ID != want.ID ||
		strings.Join(c.Scopes, " ") != "mcp:invoke" || c.ClientID != want.ClientID || c.Actor != want.Actor ||
		c.RunID != want.RunID || !c.IssuedAt.Equal(want.IssuedAt) || !c.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("claims = %+v, want %+v", *c, want)
	}
}

// TestVerifyGrantRevoked checks that a token naming a grant is refused
// once GrantRevoked says the grant is revoked — a cached token too — and
// that a failing check is no verdict on the token (it could not be
// checked, as with an unavailable key source); a token without a grant is
// not looked up.
func TestVerifyGrantRevoked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	revoked := map[string]bool{}
	var checkErr error
	var asked []string
	v, err := NewVerifier(f.keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: f.clock.Now,
		GrantRevoked: func(_ context.Context, grant string) (bool, error) {
			asked = append(asked, grant)
			return revoked[grant], checkErr
		}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(grant string) string {
		tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, ClientID: "app", GrantID: grant})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Raw
	}
	tok, plain := mint("fam-1"), mint("")
	if c, err := v.Verify(t.Context(), tok); err != nil || c.GrantID != "fam-1" {
		t.Fatalf("Verify = %+v, %v; want grant fam-1", c, err)
	}
	revoked["fam-1"] = true
	if _, err := v.Verify(t.Context(), tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("the cached token of a revoked grant: %v, want ErrInvalidToken", err)
	}
	if _, err := v.Verify(t.Context(), plain); err != nil {
		t.Errorf("a token without a grant: %v", err)
	}
	checkErr = errors.New("the database is away")
	if _, err := v.Verify(t.Context(), mint("fam-2")); err == nil || errors.Is(err, ErrInvalidToken) {
		t.Errorf("a grant that cannot be checked: %v, want an error that is not ErrInvalidToken", err)
	}
	if strings.Join(asked, " ") != "fam-1 fam-1 fam-2" {
		t.Errorf("grants looked up: %q, want each verification of a token with a grant", asked)
	}
	if _, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, GrantID: "a\x00b"}); !errors.Is(err, ErrBadGrant) {
		t.Errorf("Mint of a grant_id with a control character: %v, want ErrBadGrant", err)
	}
}

// TestVerifyTenantAdmitted checks that a token of a tenant the API's
// identity configuration no longer admits (taken off the allow-list) is
// refused at once — a cached token too —, and that a token without a
// tenant is not asked about.
func TestVerifyTenantAdmitted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	admitting := func(tenants ...string) *identity.Verifier {
		v, err := identity.New(t.Context(), &identity.Options{
			Issuer: "https://idp.example.com", JWKSURL: "https://idp.example.com/keys",
			Audiences: []string{"api://usher"}, RequiredScopes: []string{"access_as_user"}, Tenants: tenants,
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var api atomic.Pointer[identity.Verifier]
	api.Store(admitting("tenant-1"))
	v, err := NewVerifier(f.keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: f.clock.Now,
		TenantAdmitted: func(tenant string) error { return api.Load().AdmitsTenant(tenant) }})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(sub, tenant string) string {
		tok, err := f.broker.Mint(t.Context(), Grant{Subject: sub, Audience: testAudience, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Raw
	}
	alice, bare := mint("https://idp.example.com|tenant-1|alice", "tenant-1"), mint("alice", "")
	for _, tok := range []string{alice, bare} {
		if _, err := v.Verify(t.Context(), tok); err != nil {
			t.Fatalf("Verify while the tenant is allowed: %v", err)
		}
	}
	api.Store(admitting("tenant-2")) // tenant-1 taken off the allow-list
	if _, err := v.Verify(t.Context(), alice); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), `tenant "tenant-1" not allowed`) {
		t.Errorf("the cached token of a tenant no longer allowed: %v, want ErrInvalidToken", err)
	}
	if _, err := v.Verify(t.Context(), mint("https://idp.example.com|tenant-1|bob", "tenant-1")); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a new token of a tenant no longer allowed: %v, want ErrInvalidToken", err)
	}
	if _, err := v.Verify(t.Context(), mint("https://idp.example.com|tenant-2|carol", "tenant-2")); err != nil {
		t.Errorf("a token of the tenant allowed now: %v", err)
	}
	if _, err := v.Verify(t.Context(), bare); err != nil {
		t.Errorf("a token without a tenant: %v", err)
	}
}

// TestVerifyAccepts covers the variants the verifier deliberately allows.
func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kid, key := f.signer(t)
	now := f.clock.Now()
	tests := []struct {
		name   string
		header func(h map[string]any)
		claims func(c map[string]any)
	}{
		{"control", nil, nil},
		{"typ upper case", func(h map[string]any) { h["typ"] = "AT+JWT" }, nil},
		{"typ media type", func(h map[string]any) { h["typ"] = "application/at+jwt" }, nil},
		{"audience as one-element array", nil, func(c map[string]any) { c["aud"] = []string{testAudience} }},
		{"several scopes", nil, func(c map[string]any) { c["scope"] = "openid mcp:invoke profile" }},
		{"scope with doubled spaces", nil, func(c map[string]any) { c["scope"] = "openid  mcp:invoke" }},
		{"expired within leeway", nil, func(c map[string]any) {
			c["iat"] = now.Add(-5*time.Minute - 29*time.Second).Unix()
			c["nbf"] = c["iat"]
			c["exp"] = now.Add(-29 * time.Second).Unix()
		}},
		{"issued and valid within leeway ahead", nil, func(c map[string]any) {
			c["iat"] = now.Add(29 * time.Second).Unix()
			c["nbf"] = c["iat"]
			c["exp"] = now.Add(5 * time.Minute).Unix()
		}},
		{"lifetime exactly the maximum", nil, func(c map[string]any) { c["exp"] = now.Add(15 * time.Minute).Unix() }},
		{"no run_id", nil, func(c map[string]any) { delete(c, "run_id") }},
		{"act with members besides sub", nil, func(c map[string]any) { c["act"] = map[string]any{"sub": "usher-assistant", "iss": testIssuer} }},
		{"unknown header members", func(h map[string]any) { h["cty"] = "x" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := validHeader(kid), validClaims(now)
			if tt.header != nil {
				tt.header(h)
			}
			if tt.claims != nil {
				tt.claims(c)
			}
			if _, err := f.verifier.Verify(t.Context(), compact(t, h, c, rs256(t, key))); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

// TestVerifyRejects has one case per check. Each token differs from a
// valid one (signed by our key, when the check is not about the key) only
// in what its check covers.
func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kid, key := f.signer(t)
	now := f.clock.Now()
	attacker := attackerKey()
	attackerKID, err := thumbprint(&attacker.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	// An attacker's key server: jku and x5u point at it. Verify must never
	// call it.
	var attackerHits atomic.Int64
	attackerJWKS, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &attacker.PublicKey, KeyID: attackerKID, Algorithm: "RS256", Use: "sig"}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attackerHits.Add(1)
		w.Write(attackerJWKS)
	}))
	defer srv.Close()
	attackerJWK := jose.JSONWebKey{Key: &attacker.PublicKey, KeyID: attackerKID, Algorithm: "RS256", Use: "sig"}
	attackerCert := selfSigned(t, attacker)

	ourPub := &key.PublicKey
	pkixDER, err := x509.MarshalPKIXPublicKey(ourPub)
	if err != nil {
		t.Fatal(err)
	}
	pkixPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkixDER})
	pkcs1PEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(ourPub)})

	// hs256 signs the valid claims with HMAC-SHA256 keyed by secret, using
	// a mainstream JWT library as an attacker would.
	hs256 := func(secret []byte) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(validClaims(now)))
		tok.Header["typ"] = "at+jwt"
		tok.Header["kid"] = kid
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// withHeader and withClaims change a valid token signed by signer.
	withHeader := func(sign func([]byte) []byte, change func(h map[string]any)) string {
		h := validHeader(kid)
		change(h)
		return compact(t, h, validClaims(now), sign)
	}
	withClaims := func(change func(c map[string]any)) string {
		c := validClaims(now)
		change(c)
		return compact(t, validHeader(kid), c, rs256(t, key))
	}
	// withRawClaims replaces a member of the valid claims by members as
	// they are written, to make JSON that no map encodes.
	withRawClaims := func(name, members string) string {
		c := validClaims(now)
		delete(c, name)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		raw := json.RawMessage(`{` + members + `,` + string(b[1:]))
		return compact(t, validHeader(kid), raw, rs256(t, key))
	}
	valid := compact(t, validHeader(kid), validClaims(now), rs256(t, key))

	tests := []struct {
		name  string
		token string
		want  error
	}{
		// alg and signature
		{"alg none", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(validClaims(now)))
			tok.Header["typ"], tok.Header["kid"] = "at+jwt", kid
			s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), ErrInvalidToken},
		{"alg None", withHeader(noSignature, func(h map[string]any) { h["alg"] = "None" }), ErrInvalidToken},
		{"alg nOnE", withHeader(noSignature, func(h map[string]any) { h["alg"] = "nOnE" }), ErrInvalidToken},
		{"alg none with our valid RS256 signature", withHeader(rs256(t, key), func(h map[string]any) { h["alg"] = "none" }), ErrInvalidToken},
		{"alg RS512 with our valid RS256 signature", withHeader(rs256(t, key), func(h map[string]any) { h["alg"] = "RS512" }), ErrInvalidToken},
		{"alg rs256 lower case with our valid signature", withHeader(rs256(t, key), func(h map[string]any) { h["alg"] = "rs256" }), ErrInvalidToken},
		{"alg missing with our valid signature", withHeader(rs256(t, key), func(h map[string]any) { delete(h, "alg") }), ErrInvalidToken},
		{"HS256 keyed with our public key as PKIX PEM", hs256(pkixPEM), ErrInvalidToken},
		{"HS256 keyed with our public key as PKCS1 PEM", hs256(pkcs1PEM), ErrInvalidToken},
		{"HS256 keyed with our public key as PKIX DER", hs256(pkixDER), ErrInvalidToken},
		{"HS256 keyed with our public key as PKCS1 DER", hs256(x509.MarshalPKCS1PublicKey(ourPub)), ErrInvalidToken},
		{"signature cleared", valid[:strings.LastIndexByte(valid, '.')+1], ErrInvalidToken},
		{"signature of another token", func() string {
			other := compact(t, validHeader(kid), validClaims(now.Add(time.Second)), rs256(t, key))
			return valid[:strings.LastIndexByte(valid, '.')] + other[strings.LastIndexByte(other, '.'):]
		}(), ErrInvalidToken},
		{"claims altered after signing", func() string {
			parts := strings.Split(valid, ".")
			c := validClaims(now)
			c["sub"] = "mallory"
			p, _ := json.Marshal(c)
			return parts[0] + "." + base64.RawURLEncoding.EncodeToString(p) + "." + parts[2]
		}(), ErrInvalidToken},

		// kid and keys
		{"kid missing", withHeader(rs256(t, key), func(h map[string]any) { delete(h, "kid") }), ErrInvalidToken},
		{"kid unknown", withHeader(rs256(t, key), func(h map[string]any) { h["kid"] = "no-such-kid" }), ErrInvalidToken},
		{"attacker key under our kid", compact(t, validHeader(kid), validClaims(now), rs256(t, attacker)), ErrInvalidToken},
		{"attacker key under its own kid", withHeader(rs256(t, attacker), func(h map[string]any) { h["kid"] = attackerKID }), ErrInvalidToken},
		{"jku to attacker key set, attacker kid", withHeader(rs256(t, attacker), func(h map[string]any) {
			h["kid"], h["jku"] = attackerKID, srv.URL
		}), ErrInvalidToken},
		{"jku to attacker key set, our kid", withHeader(rs256(t, attacker), func(h map[string]any) { h["jku"] = srv.URL }), ErrInvalidToken},
		{"x5u to attacker certificate", withHeader(rs256(t, attacker), func(h map[string]any) {
			h["kid"], h["x5u"] = attackerKID, srv.URL
		}), ErrInvalidToken},
		{"embedded attacker jwk, attacker kid", withHeader(rs256(t, attacker), func(h map[string]any) {
			h["kid"], h["jwk"] = attackerKID, attackerJWK
		}), ErrInvalidToken},
		{"embedded attacker jwk, our kid", withHeader(rs256(t, attacker), func(h map[string]any) {
			j := attackerJWK
			j.KeyID = kid
			h["jwk"] = j
		}), ErrInvalidToken},
		{"embedded attacker x5c", withHeader(rs256(t, attacker), func(h map[string]any) {
			h["x5c"] = []string{base64.StdEncoding.EncodeToString(attackerCert)}
		}), ErrInvalidToken},
		{"crit header", withHeader(rs256(t, key), func(h map[string]any) { h["crit"] = []string{"exp"} }), ErrInvalidToken},
		{"crit naming a present extension", withHeader(rs256(t, key), func(h map[string]any) {
			h["crit"], h["usher-ext"] = []string{"usher-ext"}, true
		}), ErrInvalidToken},
		{"crit empty", withHeader(rs256(t, key), func(h map[string]any) { h["crit"] = []string{} }), ErrInvalidToken},
		{"crit null", withHeader(rs256(t, key), func(h map[string]any) { h["crit"] = nil }), ErrInvalidToken},
		{"kid not a string", withHeader(rs256(t, key), func(h map[string]any) { h["kid"] = 7 }), ErrInvalidToken},

		// typ
		{"typ JWT", withHeader(rs256(t, key), func(h map[string]any) { h["typ"] = "JWT" }), ErrInvalidToken},
		{"typ missing", withHeader(rs256(t, key), func(h map[string]any) { delete(h, "typ") }), ErrInvalidToken},
		{"typ at+jwt with suffix", withHeader(rs256(t, key), func(h map[string]any) { h["typ"] = "at+jwtx" }), ErrInvalidToken},
		{"typ application/jwt", withHeader(rs256(t, key), func(h map[string]any) { h["typ"] = "application/jwt" }), ErrInvalidToken},
		{"typ not a string", withHeader(rs256(t, key), func(h map[string]any) { h["typ"] = []string{"at+jwt"} }), ErrInvalidToken},
		{"typ empty", withHeader(rs256(t, key), func(h map[string]any) { h["typ"] = "" }), ErrInvalidToken},

		// iss and aud
		{"issuer wrong", withClaims(func(c map[string]any) { c["iss"] = "https://evil.example.com" }), ErrInvalidToken},
		{"issuer with trailing slash", withClaims(func(c map[string]any) { c["iss"] = testIssuer + "/" }), ErrInvalidToken},
		{"issuer missing", withClaims(func(c map[string]any) { delete(c, "iss") }), ErrInvalidToken},
		{"audience wrong", withClaims(func(c map[string]any) { c["aud"] = "https://other.example.com/mcp" }), ErrInvalidToken},
		{"audience with trailing slash", withClaims(func(c map[string]any) { c["aud"] = testAudience + "/" }), ErrInvalidToken},
		{"audience differs in case", withClaims(func(c map[string]any) { c["aud"] = strings.ToUpper(testAudience) }), ErrInvalidToken},
		{"two audiences", withClaims(func(c map[string]any) { c["aud"] = []string{testAudience, "https://other.example.com/mcp"} }), ErrInvalidToken},
		{"our audience twice", withClaims(func(c map[string]any) { c["aud"] = []string{testAudience, testAudience} }), ErrInvalidToken},
		{"empty audience array", withClaims(func(c map[string]any) { c["aud"] = []string{} }), ErrInvalidToken},
		{"audience missing", withClaims(func(c map[string]any) { delete(c, "aud") }), ErrInvalidToken},
		{"audience null", withClaims(func(c map[string]any) { c["aud"] = nil }), ErrInvalidToken},

		// times
		{"expired", withClaims(func(c map[string]any) {
			c["iat"] = now.Add(-6 * time.Minute).Unix()
			c["nbf"] = c["iat"]
			c["exp"] = now.Add(-31 * time.Second).Unix()
		}), ErrInvalidToken},
		{"not yet valid", withClaims(func(c map[string]any) { c["nbf"] = now.Add(31 * time.Second).Unix() }), ErrInvalidToken},
		{"issued in the future", withClaims(func(c map[string]any) { c["iat"] = now.Add(31 * time.Second).Unix() }), ErrInvalidToken},
		{"lifetime over the maximum", withClaims(func(c map[string]any) { c["exp"] = now.Add(15*time.Minute + time.Second).Unix() }), ErrInvalidToken},
		{"expires when issued", withClaims(func(c map[string]any) {
			c["iat"] = now.Add(20 * time.Second).Unix()
			c["exp"] = c["iat"]
		}), ErrInvalidToken},
		{"exp missing", withClaims(func(c map[string]any) { delete(c, "exp") }), ErrInvalidToken},
		{"nbf missing", withClaims(func(c map[string]any) { delete(c, "nbf") }), ErrInvalidToken},
		{"iat missing", withClaims(func(c map[string]any) { delete(c, "iat") }), ErrInvalidToken},
		{"exp as string", withClaims(func(c map[string]any) { c["exp"] = "2000000000" }), ErrInvalidToken},
		{"exp fractional", withClaims(func(c map[string]any) { c["exp"] = float64(now.Unix()) + 60.5 }), ErrInvalidToken},
		{"exp beyond year 9999", withClaims(func(c map[string]any) { c["exp"] = int64(1) << 62 }), ErrInvalidToken},

		// subject and identifiers
		{"sub missing", withClaims(func(c map[string]any) { delete(c, "sub") }), ErrInvalidToken},
		{"sub empty", withClaims(func(c map[string]any) { c["sub"] = "" }), ErrInvalidToken},
		{"jti missing", withClaims(func(c map[string]any) { delete(c, "jti") }), ErrInvalidToken},
		{"client_id missing", withClaims(func(c map[string]any) { delete(c, "client_id") }), ErrInvalidToken},
		{"act not an object", withClaims(func(c map[string]any) { c["act"] = "usher-assistant" }), ErrInvalidToken},
		{"sub twice", withRawClaims("sub", `"sub":"alice","sub":"mallory"`), ErrInvalidToken},
		{"aud twice", withRawClaims("aud", `"aud":"https://other.example.com/mcp","aud":"`+testAudience+`"`), ErrInvalidToken},
		{"claims not UTF-8", withRawClaims("run_id", `"run_id":"`+"\xff"+`"`), ErrInvalidToken},
		{"act missing", withClaims(func(c map[string]any) { delete(c, "act") }), ErrInvalidToken},
		{"act null", withClaims(func(c map[string]any) { c["act"] = nil }), ErrInvalidToken},
		{"act empty", withClaims(func(c map[string]any) { c["act"] = map[string]any{} }), ErrInvalidToken},
		{"act sub empty", withClaims(func(c map[string]any) { c["act"] = map[string]any{"sub": ""} }), ErrInvalidToken},
		{"act sub not a string", withClaims(func(c map[string]any) { c["act"] = map[string]any{"sub": 1} }), ErrInvalidToken},
		{"act sub with a control character", withClaims(func(c map[string]any) { c["act"] = map[string]any{"sub": "usher\u0000"} }), ErrInvalidToken},

		// tenant and groups, bounded as Mint bounds them
		{"too many groups", withClaims(func(c map[string]any) {
			groups := make([]string, MaxGroups+1)
			for i := range groups {
				groups[i] = fmt.Sprint("g", i)
			}
			c["groups"] = groups
		}), ErrInvalidToken},
		{"a group too long", withClaims(func(c map[string]any) { c["groups"] = []string{strings.Repeat("g", MaxClaimLength+1)} }), ErrInvalidToken},
		{"an empty group", withClaims(func(c map[string]any) { c["groups"] = []string{""} }), ErrInvalidToken},
		{"groups as a string", withClaims(func(c map[string]any) { c["groups"] = "finance" }), ErrInvalidToken},
		{"a grant_id too long", withClaims(func(c map[string]any) { c["grant_id"] = strings.Repeat("g", MaxClaimLength+1) }), ErrInvalidToken},
		{"a grant_id with a control character", withClaims(func(c map[string]any) { c["grant_id"] = "fam\n1" }), ErrInvalidToken},
		{"a grant_id as a number", withClaims(func(c map[string]any) { c["grant_id"] = 7 }), ErrInvalidToken},
		{"a tenant with a control character", withClaims(func(c map[string]any) { c["tid"] = "contoso\u0007" }), ErrInvalidToken},

		// scope
		{"scope missing", withClaims(func(c map[string]any) { delete(c, "scope") }), ErrInsufficientScope},
		{"scope empty", withClaims(func(c map[string]any) { c["scope"] = "" }), ErrInsufficientScope},
		{"scope mcp:invokeX", withClaims(func(c map[string]any) { c["scope"] = "mcp:invokeX" }), ErrInsufficientScope},
		{"scope xmcp:invoke", withClaims(func(c map[string]any) { c["scope"] = "xmcp:invoke" }), ErrInsufficientScope},
		{"scope MCP:INVOKE", withClaims(func(c map[string]any) { c["scope"] = "MCP:INVOKE" }), ErrInsufficientScope},
		{"scope joined by a tab", withClaims(func(c map[string]any) { c["scope"] = "openid\tmcp:invoke" }), ErrInsufficientScope},
		{"scope as an array", withClaims(func(c map[string]any) { c["scope"] = []string{"mcp:invoke"} }), ErrInvalidToken},

		// form
		{"oversized", withClaims(func(c map[string]any) { c["pad"] = strings.Repeat("a", MaxTokenSize) }), ErrInvalidToken},
		{"empty", "", ErrInvalidToken},
		{"two segments", valid[:strings.LastIndexByte(valid, '.')], ErrInvalidToken},
		{"four segments", valid + ".e30", ErrInvalidToken},
		{"JWE-like five segments", "eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d", ErrInvalidToken},
		{"newline in signature", valid[:len(valid)-4] + "\n" + valid[len(valid)-4:], ErrInvalidToken},
		{"padding", valid + "==", ErrInvalidToken},
		{"byte outside base64url", valid[:len(valid)-1] + "+", ErrInvalidToken},
		{"header not JSON", base64.RawURLEncoding.EncodeToString([]byte("RS256")) + valid[strings.IndexByte(valid, '.'):], ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.verifier.Verify(t.Context(), tt.token)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %+v, %v; want %v", c, err, tt.want)
			}
			if c != nil {
				t.Fatalf("claims returned with an error: %+v", c)
			}
			other := ErrInvalidToken
			if tt.want == ErrInvalidToken {
				other = ErrInsufficientScope
			}
			if errors.Is(err, other) {
				t.Fatalf("error %v is also %v", err, other)
			}
		})
	}
	if n := attackerHits.Load(); n != 0 {
		t.Fatalf("the verifier fetched the attacker's URL %d times", n)
	}
}

// TestVerifyCheapChecksBeforeKeyLookup: a token that fails a claim check
// never reaches the key source, so it cannot make the store reload.
func TestVerifyCheapChecksBeforeKeyLookup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	counting := &countingKeyStore{KeyStore: f.ks}
	keys, err := NewKeyring(counting, "broker", testSealKey, &KeyringOptions{Now: f.clock.Now, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	now := f.clock.Now()
	for i := range 100 {
		c := validClaims(now)
		c["aud"] = "https://other.example.com/mcp"
		h := validHeader("random-" + string(rune('a'+i%26)) + time.Duration(i).String())
		if _, err := v.Verify(t.Context(), compact(t, h, c, rs256(t, attackerKey()))); !errors.Is(err, ErrInvalidToken) {
			t.Fatal(err)
		}
	}
	if n := counting.reads.Load(); n != 0 {
		t.Fatalf("%d store reads for tokens with a wrong audience; want 0", n)
	}
	noKID := validHeader("")
	delete(noKID, "kid")
	if _, err := v.Verify(t.Context(), compact(t, noKID, validClaims(now), rs256(t, attackerKey()))); !errors.Is(err, ErrInvalidToken) {
		t.Fatal(err)
	}
	if n := counting.reads.Load(); n != 0 {
		t.Fatalf("%d store reads for a token without a kid; want 0", n)
	}
}

// staticKeys is a fixed KeySource.
type staticKeys map[string]*rsa.PublicKey

func (s staticKeys) Key(_ context.Context, kid string) (*rsa.PublicKey, error) {
	if k := s[kid]; k != nil {
		return k, nil
	}
	return nil, ErrUnknownKey
}

// TestVerifyRefusesSmallKey: whatever the key source, a key under 2048
// bits never verifies.
func TestVerifyRefusesSmallKey(t *testing.T) {
	t.Parallel()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	v, err := NewVerifier(staticKeys{"small": &small.PublicKey}, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok := compact(t, validHeader("small"), validClaims(c.Now()), rs256(t, small))
	if _, err := v.Verify(t.Context(), tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify with a 1024-bit key = %v, want ErrInvalidToken", err)
	}
}

// TestVerifyKeySourceUnavailable: a key source that cannot answer is
// neither an invalid token nor a pass.
func TestVerifyKeySourceUnavailable(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	ks.unavailable.Store(true)
	keys, err := NewKeyring(ks, "broker", testSealKey, &KeyringOptions{Now: c.Now, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok := compact(t, validHeader("some-kid"), validClaims(c.Now()), rs256(t, attackerKey()))
	_, err = v.Verify(t.Context(), tok)
	if err == nil || errors.Is(err, ErrInvalidToken) || errors.Is(err, ErrInsufficientScope) || !errors.Is(err, errUnavailable) {
		t.Fatalf("Verify = %v; want the key store's error, neither invalid nor insufficient", err)
	}
}

func TestVerifierOptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		name string
		keys KeySource
		opts *VerifierOptions
		want []string
	}{
		{"nil options", f.keys, nil, []string{"Issuer is required", "Audience is required"}},
		{"everything wrong", nil, &VerifierOptions{MaxLifetime: 16 * time.Minute, Leeway: 31 * time.Second, RequiredScope: "a b"},
			[]string{"key source", "Issuer", "Audience", "MaxLifetime", "Leeway", "RequiredScope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(tt.keys, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	// A negative leeway means none: a token one second past exp fails.
	v, err := NewVerifier(f.keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Leeway: -1, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	kid, key := f.signer(t)
	c := validClaims(f.clock.Now())
	c["exp"] = f.clock.Now().Add(-time.Second).Unix()
	c["iat"], c["nbf"] = c["exp"].(int64)-60, c["exp"].(int64)-60
	if _, err := v.Verify(t.Context(), compact(t, validHeader(kid), c, rs256(t, key))); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("no leeway: Verify = %v, want ErrInvalidToken", err)
	}
	if _, err := f.verifier.Verify(t.Context(), compact(t, validHeader(kid), c, rs256(t, key))); err != nil {
		t.Fatalf("default leeway: Verify = %v", err)
	}
}

// FuzzVerify: Verify never panics, and accepts nothing but the exact token
// that was minted.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	tok, err := fx.broker.Mint(f.Context(), Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		f.Fatal(err)
	}
	kid, key := fx.signer(f)
	now := fx.clock.Now()
	direct := compact(f, validHeader(kid), validClaims(now), rs256(f, key))
	f.Add(tok.Raw)
	f.Add(direct)
	f.Add(compact(f, map[string]any{"alg": "none", "typ": "at+jwt", "kid": kid}, validClaims(now), noSignature))
	f.Add(strings.Replace(tok.Raw, ".", "..", 1))
	f.Add("e30.e30.e30")
	f.Add("")
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := fx.verifier.Verify(t.Context(), raw)
		if err == nil && raw != tok.Raw && raw != direct {
			t.Fatalf("accepted a token that was never signed: %q → %+v", raw, c)
		}
		if err != nil && c != nil {
			t.Fatalf("claims with an error")
		}
	})
}

// TestPlausibleDate: times outside 1970 to 9999 are refused before any
// arithmetic on them can overflow.
func TestPlausibleDate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v  int64
		ok bool
	}{{-1, false}, {0, false}, {1, true}, {maxNumericDate, true}, {maxNumericDate + 1, false}, {1<<63 - 1, false}} {
		if ok := plausibleDate(tt.v); ok != tt.ok {
			t.Errorf("plausibleDate(%d) = %v, want %v", tt.v, ok, tt.ok)
		}
	}
}

// selfSigned returns a DER certificate for key.
func selfSigned(t *testing.T, key *rsa.PrivateKey) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "attacker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

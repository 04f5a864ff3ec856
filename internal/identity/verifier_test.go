package identity_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/testenv"
)

// outcome names how Verify answered, so that a test also fails when a
// token is refused for another reason than the one under test.
func outcome(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, identity.ErrInsufficientScope):
		return "insufficient_scope"
	case errors.Is(err, identity.ErrAppToken):
		return "app_token"
	case errors.Is(err, identity.ErrTooManyGroups):
		return "too_many_groups"
	case errors.Is(err, identity.ErrForbidden):
		return "forbidden"
	case errors.Is(err, identity.ErrUnauthenticated):
		return "unauthenticated"
	default:
		return "unexpected error: " + err.Error()
	}
}

func singleTenantOptions(ti *testIssuer, c *testenv.Clock) *identity.Options {
	return &identity.Options{
		Issuer:         ti.URL(),
		Audiences:      []string{apiClientID, apiAppIDURI},
		RequiredScopes: []string{"usher.api"},
		Tenants:        []string{tenantA},
		Now:            c.Now,
	}
}

func TestVerify(t *testing.T) {
	ti := newTestIssuer(t)
	keys := testKeys()
	byIssuer := func(t *testing.T, c map[string]any) string { return sign(t, ti.key, goodKID, c) }

	tests := []struct {
		name  string
		edit  func(c map[string]any)
		token func(t *testing.T, c map[string]any) string // default: signed by the issuer
		want  string
	}{
		{name: "entra token for the client id", want: "accepted"},
		{name: "entra token for the App ID URI", edit: func(c map[string]any) { c["aud"] = apiAppIDURI }, want: "accepted"},
		{name: "audience array containing the API", edit: func(c map[string]any) {
			c["aud"] = []string{"https://graph.microsoft.com", apiAppIDURI}
		}, want: "accepted"},
		{name: "generic issuer: scope claim without scp", edit: func(c map[string]any) {
			delete(c, "scp")
			c["scope"] = "openid usher.api"
		}, want: "accepted"},
		{name: "scp as an array", edit: func(c map[string]any) { c["scp"] = []string{"usher.api"} }, want: "accepted"},
		{name: "sub without oid", edit: func(c map[string]any) { delete(c, "oid") }, want: "accepted"},

		{name: "wrong issuer", edit: func(c map[string]any) {
			c["iss"] = "https://login.microsoftonline.com/" + tenantA + "/v2.0"
		}, want: "unauthenticated"},
		{name: "issuer with trailing slash", edit: func(c map[string]any) { c["iss"] = ti.URL() + "/" }, want: "unauthenticated"},
		{name: "no issuer", edit: func(c map[string]any) { delete(c, "iss") }, want: "unauthenticated"},
		{name: "wrong tenant", edit: func(c map[string]any) { c["tid"] = tenantB }, want: "forbidden"},
		{name: "no tenant", edit: func(c map[string]any) { delete(c, "tid") }, want: "forbidden"},
		{name: "wrong audience: the web client", edit: func(c map[string]any) { c["aud"] = webClientID }, want: "unauthenticated"},
		{name: "audience array without the API", edit: func(c map[string]any) {
			c["aud"] = []string{"https://graph.microsoft.com", webClientID}
		}, want: "unauthenticated"},
		{name: "no audience", edit: func(c map[string]any) { delete(c, "aud") }, want: "unauthenticated"},
		{name: "missing scope", edit: func(c map[string]any) { c["scp"] = "Sessions.Read" }, want: "insufficient_scope"},
		{name: "scope claim ignored when scp is present", edit: func(c map[string]any) {
			c["scp"] = "Sessions.Read"
			c["scope"] = "usher.api"
		}, want: "insufficient_scope"},
		{name: "scope prefix is not the scope", edit: func(c map[string]any) { c["scp"] = "usher.api.read" }, want: "insufficient_scope"},
		{name: "no scopes at all", edit: func(c map[string]any) { delete(c, "scp") }, want: "app_token"},
		{name: "expired", edit: func(c map[string]any) { c["exp"] = c["iat"].(int64) - 1 }, want: "unauthenticated"},
		{name: "no expiry", edit: func(c map[string]any) { delete(c, "exp") }, want: "unauthenticated"},
		{name: "not yet valid", edit: func(c map[string]any) { c["nbf"] = c["iat"].(int64) + 600 }, want: "unauthenticated"},
		{name: "no iat", edit: func(c map[string]any) { delete(c, "iat") }, want: "unauthenticated"},
		{name: "neither oid nor sub", edit: func(c map[string]any) { delete(c, "oid"); delete(c, "sub") }, want: "unauthenticated"},
		{name: "scp of the wrong type", edit: func(c map[string]any) { c["scp"] = 42 }, want: "unauthenticated"},

		// Entra's groups overage: a person in more groups than a token
		// lists gets none, and a pointer to where they are.
		{name: "groups overage: _claim_names instead of groups", edit: groupsOverage, want: "too_many_groups"},
		{name: "groups overage next to some groups", edit: func(c map[string]any) {
			groupsOverage(c)
			c["groups"] = []string{"b1f4a0c5-4c7e-4a0e-9a2b-2c4f0f5d3e11"}
		}, want: "too_many_groups"},
		{name: "groups overage: hasgroups", edit: func(c map[string]any) {
			delete(c, "groups")
			c["hasgroups"] = true
		}, want: "too_many_groups"},
		{name: "_claim_names of another claim only", edit: func(c map[string]any) {
			c["_claim_names"] = map[string]string{"other": "src1"}
			c["_claim_sources"] = map[string]any{"src1": map[string]string{"endpoint": "https://graph.example/other"}}
		}, want: "accepted"},
		{name: "groups overage in another tenant is the tenant's refusal", edit: func(c map[string]any) {
			groupsOverage(c)
			c["tid"] = tenantB
		}, want: "forbidden"},

		{name: "signed by an unknown key", token: func(t *testing.T, c map[string]any) string {
			return sign(t, keys[1], "key-2", c)
		}, want: "unauthenticated"},
		{name: "signed by an unknown key under a known kid", token: func(t *testing.T, c map[string]any) string {
			return sign(t, keys[1], goodKID, c)
		}, want: "unauthenticated"},
		{name: "no kid", token: func(t *testing.T, c map[string]any) string {
			return signWith(t, jose.RS256, keys[0], c)
		}, want: "unauthenticated"},
		{name: "alg none", token: unsigned, want: "unauthenticated"},
		{name: "HS256 keyed with the public key", token: func(t *testing.T, c map[string]any) string {
			return signWith(t, jose.HS256, jose.JSONWebKey{Key: keys[0].N.Bytes(), KeyID: goodKID}, c)
		}, want: "unauthenticated"},
		{name: "RS512 by the issuer's key", token: func(t *testing.T, c map[string]any) string {
			return signWith(t, jose.RS512, jose.JSONWebKey{Key: keys[0], KeyID: goodKID}, c)
		}, want: "unauthenticated"},
		{name: "PS256 by the issuer's key", token: func(t *testing.T, c map[string]any) string {
			return signWith(t, jose.PS256, jose.JSONWebKey{Key: keys[0], KeyID: goodKID}, c)
		}, want: "unauthenticated"},
		{name: "payload changed after signing", token: func(t *testing.T, c map[string]any) string {
			good := sign(t, keys[0], goodKID, c)
			c["oid"] = "11111111-1111-1111-1111-111111111111"
			forged := sign(t, keys[0], goodKID, c)
			parts, forgedParts := strings.Split(good, "."), strings.Split(forged, ".")
			return parts[0] + "." + forgedParts[1] + "." + parts[2]
		}, want: "unauthenticated"},
		{name: "JWS JSON serialization", token: func(t *testing.T, c map[string]any) string {
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: keys[0], KeyID: goodKID}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			payload, _ := json.Marshal(c)
			obj, err := signer.Sign(payload)
			if err != nil {
				t.Fatal(err)
			}
			return obj.FullSerialize()
		}, want: "unauthenticated"},
		{name: "malformed", token: func(*testing.T, map[string]any) string { return "not.a.jwt" }, want: "unauthenticated"},
		{name: "empty", token: func(*testing.T, map[string]any) string { return "" }, want: "unauthenticated"},
		{name: "too long", token: func(t *testing.T, c map[string]any) string {
			c["pad"] = strings.Repeat("a", identity.MaxTokenBytes)
			return sign(t, keys[0], goodKID, c)
		}, want: "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			v, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
			if err != nil {
				t.Fatal(err)
			}
			c := entraClaims(ti.URL(), clk.Now())
			if tt.edit != nil {
				tt.edit(c)
			}
			token := byIssuer
			if tt.token != nil {
				token = tt.token
			}
			_, err = v.Verify(t.Context(), token(t, c))
			if got := outcome(err); got != tt.want {
				t.Fatalf("Verify: %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}

// groupsOverage makes c a token of a person in more groups than Entra
// lists (over 200): no "groups", and where to read them instead.
func groupsOverage(c map[string]any) {
	delete(c, "groups")
	c["_claim_names"] = map[string]string{"groups": "src1"}
	c["_claim_sources"] = map[string]any{"src1": map[string]string{
		"endpoint": "https://graph.windows.net/" + tenantA + "/users/" + userOID + "/getMemberObjects"}}
}

func TestVerifyExpiredIsTokenExpiredError(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	v, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		t.Fatal(err)
	}
	raw := sign(t, ti.key, goodKID, entraClaims(ti.URL(), clk.Now()))
	if _, err := v.Verify(t.Context(), raw); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	clk.Advance(time.Hour + time.Second)
	_, err = v.Verify(t.Context(), raw)
	var expired *oidc.TokenExpiredError
	if !errors.Is(err, identity.ErrUnauthenticated) || !errors.As(err, &expired) {
		t.Fatalf("Verify after expiry = %v, want ErrUnauthenticated wrapping *oidc.TokenExpiredError", err)
	}
}

func TestVerifyPrincipal(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	v, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(t.Context(), sign(t, ti.key, goodKID, entraClaims(ti.URL(), clk.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.ID(), ti.URL()+"|"+tenantA+"|"+userOID; got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
	if p.Issuer != ti.URL() || p.Tenant != tenantA || p.ObjectID != userOID || p.Subject == "" {
		t.Errorf("identity fields = %+v", p)
	}
	if p.Name != "Ada Lovelace" || p.Email != "ada@contoso.example" {
		t.Errorf("display fields = %q, %q", p.Name, p.Email)
	}
	if !slices.Equal(p.Scopes, []string{"usher.api", "Sessions.Read"}) ||
		!slices.Equal(p.Roles, []string{"Usher.Admin"}) || len(p.Groups) != 1 {
		t.Errorf("scopes %q, roles %q, groups %q", p.Scopes, p.Roles, p.Groups)
	}

	c := entraClaims(ti.URL(), clk.Now())
	delete(c, "oid")
	delete(c, "name")
	c["email"] = "someone-else@contoso.example"
	p2, err := v.Verify(t.Context(), sign(t, ti.key, goodKID, c))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p2.ID(), ti.URL()+"|"+tenantA+"|"+c["sub"].(string); got != want {
		t.Errorf("ID() without oid = %q, want %q", got, want)
	}
	if p2.Name != "ada@contoso.example" {
		t.Errorf("Name falls back to preferred_username: got %q", p2.Name)
	}
}

func TestVerifyMultiTenant(t *testing.T) {
	ti := newTestIssuer(t)
	tests := []struct {
		name      string
		iss, tid  string
		noTenant  bool
		want      string
		principal string
	}{
		{name: "allowed tenant with its own issuer", iss: ti.TenantIssuer(tenantA), tid: tenantA, want: "accepted",
			principal: ti.TenantIssuer(tenantA) + "|" + tenantA + "|" + userOID},
		{name: "other tenant with its own issuer", iss: ti.TenantIssuer(tenantB), tid: tenantB, want: "forbidden"},
		{name: "allowed tid under another tenant's issuer", iss: ti.TenantIssuer(tenantB), tid: tenantA, want: "unauthenticated"},
		{name: "other tid under the allowed tenant's issuer", iss: ti.TenantIssuer(tenantA), tid: tenantB, want: "unauthenticated"},
		{name: "no tid", iss: ti.TenantIssuer(tenantA), noTenant: true, want: "unauthenticated"},
		{name: "the template itself", iss: ti.MultiTenantIssuer(), tid: "{tenantid}", want: "forbidden"},
		{name: "another issuer", iss: ti.URL(), tid: tenantA, want: "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			v, err := identity.New(t.Context(), &identity.Options{
				Issuer:         ti.MultiTenantIssuer(),
				Audiences:      []string{apiAppIDURI},
				RequiredScopes: []string{"usher.api"},
				Tenants:        []string{tenantA},
				Now:            clk.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			c := entraClaims(tt.iss, clk.Now())
			c["aud"] = apiAppIDURI
			c["tid"] = tt.tid
			if tt.noTenant {
				delete(c, "tid")
			}
			p, err := v.Verify(t.Context(), sign(t, ti.key, goodKID, c))
			if got := outcome(err); got != tt.want {
				t.Fatalf("Verify: %s (%v), want %s", got, err, tt.want)
			}
			if err == nil && p.ID() != tt.principal {
				t.Errorf("ID() = %q, want %q", p.ID(), tt.principal)
			}
		})
	}
}

func TestNewDiscovery(t *testing.T) {
	ti := newTestIssuer(t)
	tests := []struct {
		name    string
		issuer  string
		tenants []string
		wantErr bool
	}{
		{name: "single tenant", issuer: ti.URL()},
		{name: "multi-tenant from the common metadata", issuer: ti.MultiTenantIssuer(), tenants: []string{tenantA}},
		{name: "document names another issuer", issuer: ti.URL() + "/", wantErr: true},
		{name: "common metadata names another template", issuer: ti.MultiTenantIssuer() + "/", tenants: []string{tenantA}, wantErr: true},
		{name: "no discovery document", issuer: ti.URL() + "/nowhere", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := identity.New(t.Context(), &identity.Options{
				Issuer: tt.issuer, Audiences: []string{apiClientID}, RequiredScopes: []string{"usher.api"}, Tenants: tt.tenants,
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("New: %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name string
		opts *identity.Options
		want []string // substrings of the one error; none: valid
	}{
		{name: "nil", opts: nil, want: []string{"issuer is required", "at least one audience", "at least one delegated scope"}},
		{name: "loopback http with a key set URL, no discovery", opts: &identity.Options{
			Issuer: "http://127.0.0.1:1/dev/oidc", Audiences: []string{"usher-api"}, RequiredScopes: []string{"usher.api"},
			JWKSURL: "http://127.0.0.1:1/dev/oidc/jwks",
		}},
		{name: "no required scope", opts: &identity.Options{
			Issuer: "http://127.0.0.1:1/dev/oidc", Audiences: []string{"usher-api"}, JWKSURL: "http://127.0.0.1:1/dev/oidc/jwks",
		}, want: []string{"required scopes: at least one delegated scope is required"}},
		{name: "http on a public host", opts: &identity.Options{
			Issuer: "http://login.example.com", Audiences: []string{"a"},
		}, want: []string{"issuer: must be https"}},
		{name: "relative issuer", opts: &identity.Options{Issuer: "/oidc", Audiences: []string{"a"}},
			want: []string{"issuer: must be an absolute URL"}},
		{name: "issuer with a query", opts: &identity.Options{Issuer: "https://login.example.com/?x=1", Audiences: []string{"a"}},
			want: []string{"must not have user info, query or fragment"}},
		{name: "multi-tenant without tenants", opts: &identity.Options{
			Issuer: "https://login.microsoftonline.com/{tenantid}/v2.0", Audiences: []string{"a"},
		}, want: []string{"requires a tenant allow-list"}},
		{name: "placeholder twice", opts: &identity.Options{
			Issuer: "https://login.example.com/{tenantid}/{tenantid}", Audiences: []string{"a"}, Tenants: []string{tenantA},
		}, want: []string{"may appear only once"}},
		{name: "everything wrong at once", opts: &identity.Options{
			Issuer:         "ftp://login.example.com",
			Audiences:      []string{""},
			RequiredScopes: []string{"two scopes"},
			Tenants:        []string{" "},
			JWKSURL:        "http://keys.example.com/jwks",
		}, want: []string{
			"issuer: must be https", "empty audience", `"two scopes" is not a scope`,
			"empty tenant id", "jwks url: must be https",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel() // New must not need the network here
			_, err := identity.New(ctx, tt.opts)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
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

func TestKeySetRefetchIsBounded(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	opts := singleTenantOptions(ti, clk)
	opts.JWKSURL = ti.URL() + "/keys"
	v, err := identity.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := entraClaims(ti.URL(), clk.Now())
	c["exp"] = clk.Now().Add(3 * time.Hour).Unix()
	good := sign(t, ti.key, goodKID, c)
	unknown := sign(t, ti.other, "made-up", c)

	step := func(name, raw, want string, hits int32) {
		t.Helper()
		_, err := v.Verify(t.Context(), raw)
		if got := outcome(err); got != want {
			t.Fatalf("%s: %s (%v), want %s", name, got, err, want)
		}
		if got := ti.jwksHits.Load(); got != hits {
			t.Fatalf("%s: key set fetched %d times, want %d", name, got, hits)
		}
	}
	step("first unknown kid fetches", unknown, "unauthenticated", 1)
	step("unknown kid again does not", unknown, "unauthenticated", 1)
	step("known kid from cache", good, "accepted", 1)
	clk.Advance(31 * time.Second)
	step("unknown kid after the interval fetches", unknown, "unauthenticated", 2)
	clk.Advance(time.Hour)
	step("old key set is refreshed", good, "accepted", 3)

	ti.srv.Close()
	clk.Advance(time.Hour)
	step("issuer unreachable: cached keys still verify", good, "accepted", 3)
}

// FuzzVerify checks that no mangling of a good token is accepted with other
// claims: a token either fails or yields the original principal.
func FuzzVerify(f *testing.F) {
	ti := newTestIssuer(f)
	clk := newClock()
	v, err := identity.New(f.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		f.Fatal(err)
	}
	good := sign(f, ti.key, goodKID, entraClaims(ti.URL(), clk.Now()))
	want, err := v.Verify(f.Context(), good)
	if err != nil {
		f.Fatal(err)
	}
	parts := strings.Split(good, ".")
	f.Add(good)
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[0] + ".." + parts[2])
	f.Add(good + ".")
	f.Add(strings.ToUpper(good))
	f.Add(`{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := v.Verify(t.Context(), raw)
		if err == nil && got.ID() != want.ID() {
			t.Fatalf("accepted a mangled token as %q", got.ID())
		}
	})
}

// Admits applies today's issuer and tenant allow-list to a principal id
// verified earlier, as Verify applies them to a token.
func TestAdmits(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	single, err := identity.New(t.Context(), singleTenantOptions(ti, clk))
	if err != nil {
		t.Fatal(err)
	}
	anyTenant := singleTenantOptions(ti, clk)
	anyTenant.Tenants = nil
	open, err := identity.New(t.Context(), anyTenant)
	if err != nil {
		t.Fatal(err)
	}
	multi, err := identity.New(t.Context(), &identity.Options{
		Issuer: ti.MultiTenantIssuer(), Audiences: []string{apiAppIDURI}, RequiredScopes: []string{"usher.api"},
		Tenants: []string{tenantA}, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := func(iss, tenant string) string { return iss + "|" + tenant + "|" + userOID }
	tests := []struct {
		name string
		v    *identity.Verifier
		id   string
		want string
	}{
		{"allowed tenant", single, id(ti.URL(), tenantA), "accepted"},
		{"tenant taken off the allow-list", single, id(ti.URL(), tenantB), "forbidden"},
		{"no tenant, with an allow-list", single, id(ti.URL(), ""), "forbidden"},
		{"another issuer", single, id("https://login.example.com/"+tenantA+"/v2.0", tenantA), "forbidden"},
		{"any tenant without an allow-list", open, id(ti.URL(), tenantB), "accepted"},
		{"multi-tenant: allowed tenant, its own issuer", multi, id(ti.TenantIssuer(tenantA), tenantA), "accepted"},
		{"multi-tenant: tenant taken off the allow-list", multi, id(ti.TenantIssuer(tenantB), tenantB), "forbidden"},
		{"multi-tenant: allowed tenant under another's issuer", multi, id(ti.TenantIssuer(tenantB), tenantA), "forbidden"},
		{"not a principal id", single, "alice", "forbidden"},
		{"no object id", single, ti.URL() + "|" + tenantA + "|", "forbidden"},
		{"a part too many", single, id(ti.URL(), tenantA) + "|x", "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcome(tt.v.Admits(tt.id)); got != tt.want {
				t.Errorf("Admits(%q) = %s, want %s", tt.id, got, tt.want)
			}
		})
	}
	// A token Usher minted is compared by its tenant only.
	for _, tt := range []struct {
		v      *identity.Verifier
		tenant string
		want   string
	}{
		{single, tenantA, "accepted"},
		{single, tenantB, "forbidden"},
		{single, "", "forbidden"},
		{multi, tenantA, "accepted"},
		{multi, tenantB, "forbidden"},
		{open, tenantB, "accepted"},
		{open, "", "accepted"},
	} {
		if got := outcome(tt.v.AdmitsTenant(tt.tenant)); got != tt.want {
			t.Errorf("AdmitsTenant(%q) = %s, want %s", tt.tenant, got, tt.want)
		}
	}
}

package identity_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/identity"
)

// TestIssuerRefusedExplained checks what the log says of a token from
// another issuer: the issuer, in words about an access token (go-oidc's
// are about an "id token"), and for Entra's v1.0 issuer
// (sts.windows.net/{tid}/: the API's app registration does not ask for
// v2 tokens) the setting to change. The client is told as little as for
// any invalid token.
func TestIssuerRefusedExplained(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	v1 := func(c map[string]any) {
		c["iss"], c["ver"], c["aud"] = "https://sts.windows.net/"+tenantA+"/", "1.0", apiAppIDURI
	}
	other := func(c map[string]any) { c["iss"] = "https://issuer.example.com/" }
	multi := singleTenantOptions(ti, clk)
	multi.Issuer = ti.MultiTenantIssuer()
	for _, tc := range []struct {
		name string
		opts *identity.Options
		edit func(map[string]any)
		want string
	}{
		{"v1.0 token, single tenant", singleTenantOptions(ti, clk), v1,
			`issuer "https://sts.windows.net/` + tenantA + `/" is not "` + ti.URL() + `": it is the v1.0 form sts.windows.net/{tid}/: set "requestedAccessTokenVersion": 2`},
		{"v1.0 token, multi-tenant", multi, v1, `"requestedAccessTokenVersion": 2`},
		{"another issuer", singleTenantOptions(ti, clk), other, `issuer "https://issuer.example.com/" is not "` + ti.URL() + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			tc.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			v, err := identity.New(t.Context(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c := entraClaims(ti.URL(), clk.Now())
			tc.edit(c)
			raw := sign(t, ti.key, goodKID, c)
			_, err = v.Verify(t.Context(), raw)
			if !errors.Is(err, identity.ErrUnauthenticated) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "id token") {
				t.Fatalf("Verify = %v, want %q and no \"id token\"", err, tc.want)
			}
			if strings.Contains(tc.want, "requestedAccessTokenVersion") != strings.Contains(err.Error(), "requestedAccessTokenVersion") {
				t.Errorf("Verify = %v: the hint is for Entra's v1.0 issuer only", err)
			}

			api := httptest.NewServer(v.Middleware(http.NotFoundHandler()))
			defer api.Close()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, api.URL, nil)
			req.Header.Set("Authorization", "Bearer "+raw)
			resp, err := api.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"The access token is invalid or expired."`) ||
				strings.Contains(string(body), "issuer") {
				t.Errorf("answer %d %s, want the generic 401", resp.StatusCode, body)
			}
			if !strings.Contains(logs.String(), "requestedAccessTokenVersion") && strings.Contains(tc.want, "requestedAccessTokenVersion") {
				t.Errorf("log %s, want the hint", logs.String())
			}
		})
	}
}

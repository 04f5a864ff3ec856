package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/config"
)

// TestBanner checks that the banner says what is true of the sign-in:
// a browser sign-in only when there is one, and an issuer with no
// placeholder left in it.
func TestBanner(t *testing.T) {
	entra := config.Identity{Issuer: "https://login.microsoftonline.com/t1/v2.0"}
	multi := config.Identity{Issuer: "https://login.microsoftonline.com/{tenantid}/v2.0", Tenants: []string{"t1", "t2"}}
	for _, tc := range []struct {
		name      string
		identity  config.Identity
		clientID  string
		want, not []string
	}{
		{"development provider", config.Identity{}, "",
			[]string{"Open it in a browser and sign in", "DEVELOPMENT provider", "usher token user"}, []string{"Browser sign-in is off"}},
		{"issuer, browser sign-in on", entra, "web-client",
			[]string{"Open it in a browser and sign in", "Identity provider: https://login.microsoftonline.com/t1/v2.0\n"}, []string{"off", "DEVELOPMENT"}},
		{"issuer, browser sign-in off", entra, "",
			[]string{"Browser sign-in is off", "Set web.client_id", "Identity provider: https://login.microsoftonline.com/t1/v2.0\n"}, []string{"Open it in a browser"}},
		{"multi-tenant issuer", multi, "",
			[]string{"Identity provider: https://login.microsoftonline.com/<tenant>/v2.0 for the tenants t1, t2\n"}, []string{"{tenantid}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := config.Config{Identity: tc.identity}
			cfg.Web.ClientID = tc.clientID
			(&environment{stdout: &out}).banner("http://127.0.0.1:8080", "http://127.0.0.1:9090/metrics", cfg, &installFlags{}, "127.0.0.1:8080")
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("banner lacks %q:\n%s", w, &out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("banner says %q:\n%s", n, &out)
				}
			}
		})
	}
}

package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

// TestDiscoveryWaitsForTheIssuer checks that New reads the issuer's
// endpoints from its discovery document — Entra's common metadata for a
// multi-tenant template — and waits for an issuer that is away for a
// moment (503), as the API's verifier does, while a 404 ends it at once.
// The issuer is a real server on loopback; the waits are synctest's.
func TestDiscoveryWaitsForTheIssuer(t *testing.T) {
	var fails, requests atomic.Int32
	var iss *httptest.Server
	iss = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/common/v2.0/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		if fails.Add(-1) >= 0 {
			http.Error(w, "<html>down</html>", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"issuer":"` + iss.URL + `/{tenantid}/v2.0","authorization_endpoint":"` + iss.URL + `/common/oauth2/v2.0/authorize",` +
			`"token_endpoint":"` + iss.URL + `/common/oauth2/v2.0/token","jwks_uri":"` + iss.URL + `/common/discovery/v2.0/keys"}`))
	}))
	t.Cleanup(iss.Close)
	st := storetest.NewSQLite(t)
	opts := func(issuer string) *Options {
		return &Options{
			PublicURL: "http://127.0.0.1:1", Issuer: issuer, ClientID: "web", Secret: []byte("0123456789abcdef0123456789abcdef"),
			VerifyAccessToken: func(context.Context, string) (identity.Principal, error) {
				return identity.Principal{}, identity.ErrUnauthenticated
			},
			Store: st, Logger: quiet,
			// No idle connection outlives a request: synctest's clock moves
			// only while nothing in the bubble waits on the network.
			HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		}
	}
	multi := iss.URL + "/" + identity.TenantPlaceholder + "/v2.0"

	synctest.Test(t, func(t *testing.T) {
		fails.Store(2)
		requests.Store(0)
		start := time.Now()
		s, err := New(t.Context(), opts(multi))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if n, took := requests.Load(), time.Since(start); n != 3 || took != 3*time.Second {
			t.Errorf("%d requests over %s, want 3 over 3s (two failures, waited for)", n, took)
		}
		if got, want := s.oauth.Endpoint.TokenURL, iss.URL+"/common/oauth2/v2.0/token"; got != want {
			t.Errorf("token endpoint %q, want the document's %q", got, want)
		}
		if login := s.oauth.AuthCodeURL("x"); !strings.HasPrefix(login, iss.URL+"/common/oauth2/v2.0/authorize?") {
			t.Errorf("sign-in goes to %q", login)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		requests.Store(0)
		start := time.Now()
		_, err := New(t.Context(), opts(iss.URL+"/nowhere"))
		if err == nil || !strings.Contains(err.Error(), "web: discovery for "+iss.URL+"/nowhere: ") || !strings.Contains(err.Error(), "404 Not Found") ||
			requests.Load() != 1 || time.Since(start) != 0 {
			t.Errorf("New = %v after %d requests over %s, want a 404 at once", err, requests.Load(), time.Since(start))
		}
	})
}

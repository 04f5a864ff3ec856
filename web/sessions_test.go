package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/identity"
)

// TestLargePrincipal checks that an Entra principal with the maximum of
// 200 groups fits the cookies, split, and comes back whole.
func TestLargePrincipal(t *testing.T) {
	e := newEnv(t)
	p := identity.Principal{Issuer: "https://login.microsoftonline.com/t/v2.0", Tenant: "t", ObjectID: "o", Name: "Grace", Scopes: []string{"access_as_user"}}
	for i := range 200 {
		p.Groups = append(p.Groups, fmt.Sprintf("%08x-1111-2222-3333-444455556666", i))
	}
	rec := httptest.NewRecorder()
	if _, err := e.sessions.startSession(rec, httptest.NewRequest(http.MethodGet, "/", nil), p, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	cookies := (&http.Response{Header: rec.Header()}).Cookies()
	if len(cookies) < 2 || len(cookies) > maxChunks {
		t.Fatalf("%d cookies", len(cookies))
	}
	req := httptest.NewRequest(http.MethodGet, "/api/x", nil)
	for _, c := range cookies {
		if len(c.Name)+len(c.Value) > 4000 {
			t.Errorf("cookie %s holds %d bytes", c.Name, len(c.Name)+len(c.Value))
		}
		req.AddCookie(c)
	}
	var got identity.Principal
	h := e.sessions.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = identity.FromContext(r.Context())
	}), e.verifier.Middleware)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.ID() != p.ID() || len(got.Groups) != 200 || got.Groups[199] != p.Groups[199] {
		t.Fatalf("principal came back as %s with %d groups", got.ID(), len(got.Groups))
	}

	// A smaller session afterwards deletes the chunks it no longer needs.
	rec = httptest.NewRecorder()
	p.Groups = nil
	if _, err := e.sessions.startSession(rec, req, p, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	after := (&http.Response{Header: rec.Header()}).Cookies()
	if len(after) != len(cookies) || after[0].Value == "" || after[1].MaxAge >= 0 {
		t.Errorf("rewritten cookies: %v", after)
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "/",
		"/":                             "/",
		"/runs/abc":                     "/runs/abc",
		"/approvals/X?y=1#z":            "/approvals/X?y=1#z",
		"//evil.example.com":            "/",
		"/\\evil.example.com":           "/",
		"https://evil.example.com":      "/",
		"evil.example.com":              "/",
		"javascript:alert(1)":           "/",
		"/auth/login":                   "/",
		"/a\r\nSet-Cookie: x=y":         "/",
		"/" + strings.Repeat("a", 2000): "/" + strings.Repeat("a", 2000),
		"/" + strings.Repeat("a", 2048): "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewOptions(t *testing.T) {
	_, err := New(t.Context(), nil)
	if err == nil {
		t.Fatal("nil options accepted")
	}
	if _, err := New(t.Context(), &Options{PreviousSecrets: [][]byte{[]byte("short")}}); err == nil || !strings.Contains(err.Error(), "previous secret 1") {
		t.Errorf("a previous secret of 5 bytes: %v, want it refused", err)
	}
	for _, want := range []string{"public url is required", "issuer is required", "client id is required", "access token verifier", "secret", "session store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	verify := func(context.Context, string) (identity.Principal, error) { return identity.Principal{}, nil }
	_, err = New(t.Context(), &Options{
		PublicURL: "http://usher.example.com", Issuer: "ftp://x", ClientID: "c", VerifyAccessToken: verify,
		Secret: make([]byte, 32), SessionLifetime: time.Minute, Scopes: []string{"two scopes"},
		Endpoints:     &Endpoints{AuthURL: "https://a.example.com/authorize"},
		RevocationTTL: time.Hour, SweepInterval: -time.Second,
	})
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"public url: must be https", "issuer: must be https", "session lifetime", `"two scopes"`, "token url", "revocation ttl", "sweep interval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestSignInOff checks a nil *Sessions: bearer tokens only.
func TestSignInOff(t *testing.T) {
	var s *Sessions
	bearerCalled := false
	h := s.Authenticate(http.NotFoundHandler(), func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { bearerCalled = true })
	})
	req := httptest.NewRequest(http.MethodGet, "/api/x", nil)
	req.AddCookie(&http.Cookie{Name: "usher_session", Value: "x"})
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !bearerCalled {
		t.Error("with sign-in off every request goes to the bearer middleware")
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/auth/session", nil))
	var v sessionView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.SignedIn || v.SignInAvailable {
		t.Errorf("/auth/session: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/auth/login", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("/auth/login: %d", rec.Code)
	}
}

package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/oauth/oauthtest"
	"github.com/usherhq/usher/store/storetest"
)

// withSession sends a request with nothing but the session cookie value,
// as someone who copied it would.
func withSession(t *testing.T, method, u, cookie string) int {
	t.Helper()
	var body io.Reader
	if strings.HasSuffix(u, "/api/assistant/runs") {
		body = strings.NewReader(`{"title":"after sign-out?"}`)
	}
	req, _ := http.NewRequest(method, u, body)
	req.Header.Set("Cookie", (&http.Cookie{Name: "usher_session", Value: cookie}).String())
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignOutEndsCopiedCookie checks, on `usher serve` with each engine,
// that a copy of a session cookie works as the browser's does until the
// browser signs out, and is refused afterwards by the API (/api/me, a new
// run); and that signing out everywhere ends another person's sessions
// not at all.
func TestSignOutEndsCopiedCookie(t *testing.T) {
	t.Parallel()
	for name, args := range map[string]func(t *testing.T) []string{
		"sqlite":   func(*testing.T) []string { return nil },
		"postgres": func(t *testing.T) []string { return []string{"--database-url", storetest.PostgresURL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
			s := startServer(t, env, args(t)...)
			alice := oauthtest.SignIn(t, s.url, "alice")
			copied := alice // the same value, sent by someone else
			alicePhone := oauthtest.SignIn(t, s.url, "alice")
			bob := oauthtest.SignIn(t, s.url, "bob")
			if code := withSession(t, http.MethodGet, s.url+"/api/me", copied); code != http.StatusOK {
				t.Fatalf("/api/me with the copied cookie before sign-out: %d", code)
			}
			if code := withSession(t, http.MethodPost, s.url+"/api/assistant/runs", copied); code != http.StatusCreated {
				t.Fatalf("a new run with the copied cookie before sign-out: %d", code)
			}
			if code := withSession(t, http.MethodPost, s.url+"/auth/logout", alice); code != http.StatusNoContent {
				t.Fatalf("logout: %d", code)
			}
			if code := withSession(t, http.MethodGet, s.url+"/api/me", copied); code != http.StatusUnauthorized {
				t.Errorf("/api/me with the copied cookie after sign-out: %d, want 401", code)
			}
			if code := withSession(t, http.MethodPost, s.url+"/api/assistant/runs", copied); code != http.StatusUnauthorized {
				t.Errorf("a new run with the copied cookie after sign-out: %d, want 401", code)
			}
			if code := withSession(t, http.MethodGet, s.url+"/api/me", alicePhone); code != http.StatusOK {
				t.Errorf("alice's other session after signing one out: %d", code)
			}
			if code := withSession(t, http.MethodPost, s.url+"/auth/logout-all", alicePhone); code != http.StatusOK {
				t.Fatalf("logout-all: %d", code)
			}
			if code := withSession(t, http.MethodGet, s.url+"/api/me", alicePhone); code != http.StatusUnauthorized {
				t.Errorf("alice's other session after signing out everywhere: %d, want 401", code)
			}
			if code := withSession(t, http.MethodGet, s.url+"/api/me", bob); code != http.StatusOK {
				t.Errorf("bob's session after alice signed out everywhere: %d", code)
			}
		})
	}
}

package main

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/usherhq/usher/store/storetest"
)

var (
	devHiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	devFormAction  = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
)

// signInOverHTTP signs user in to s through the development provider as
// a browser does — /auth/login, the provider's form, the callback — and
// returns the session cookie's value.
func signInOverHTTP(t *testing.T, s *server, user string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	step := func(resp *http.Response, err error) (*http.Response, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	login, _ := step(c.Get(s.url + "/auth/login"))
	page, body := step(c.Get(login.Header.Get("Location")))
	action := devFormAction.FindStringSubmatch(body)
	if page.StatusCode != http.StatusOK || action == nil {
		t.Fatalf("the provider's sign-in page: %d %s", page.StatusCode, body)
	}
	form := url.Values{"username": {user}}
	for _, m := range devHiddenInput.FindAllStringSubmatch(body, -1) {
		form.Set(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	target, _ := page.Request.URL.Parse(html.UnescapeString(action[1]))
	posted, _ := step(c.PostForm(target.String(), form))
	cb, body := step(c.Get(posted.Header.Get("Location")))
	if cb.StatusCode != http.StatusSeeOther {
		t.Fatalf("callback: %d %s", cb.StatusCode, body)
	}
	for _, ck := range cb.Cookies() {
		if ck.Name == "usher_session" {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

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
			alice := signInOverHTTP(t, s, "alice")
			copied := alice // the same value, sent by someone else
			alicePhone := signInOverHTTP(t, s, "alice")
			bob := signInOverHTTP(t, s, "bob")
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

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

	"github.com/usherhq/usher/broker/oauth/oauthtest"
)

// TestConsentFormBoundToBrowserSession runs `usher serve` with its real
// browser sign-in: a consent form shown in one of Alice's browser sessions
// and posted from another of hers is refused, and the same form posted
// from its own session gives the app its code.
func TestConsentFormBoundToBrowserSession(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="})
	first := oauthtest.SignIn(t, s.url, "alice")
	second := oauthtest.SignIn(t, s.url, "alice")
	app := oauthtest.Register(t, s.url, "MCP Inspector", "http://127.0.0.1:6274/oauth/callback")
	u, _ := app.AuthorizeURL()
	resp, page := oauthtest.SessionRequest(t, http.MethodGet, u, first, "", nil)
	csrf, request := oauthtest.ConsentCSRF.FindStringSubmatch(page), oauthtest.ConsentRequest.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || csrf == nil || request == nil {
		t.Fatalf("authorize: %d %s", resp.StatusCode, page)
	}
	form := url.Values{"csrf_token": {html.UnescapeString(csrf[1])}, "request": {html.UnescapeString(request[1])}, "decision": {"approve"}}
	post := func(cookie string) *http.Response {
		resp, _ := oauthtest.SessionRequest(t, http.MethodPost, s.url+"/oauth/authorize", cookie,
			"application/x-www-form-urlencoded", strings.NewReader(form.Encode()), "Origin", s.url)
		return resp
	}
	if resp := post(second); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
		t.Fatalf("posted from Alice's other session: %d to %q, want 403", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = post(first)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("posted from its own session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestRefusedSignInTellsTheClient runs `usher serve` with its real
// browser sign-in and a tenant allow-list the development provider's
// people are not on: an MCP client's authorization request whose sign-in
// is refused ends at the client's redirect URI with access_denied and its
// state, not on a page the client never sees.
func TestRefusedSignInTellsTheClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_IDENTITY_TENANTS": "another-tenant"})
	app := oauthtest.Register(t, s.url, "MCP Inspector", "http://127.0.0.1:6274/oauth/callback")
	u, _ := app.AuthorizeURL()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	devForm := regexp.MustCompile(`<form method="post" action="([^"]+)">`)
	devHidden := regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	for range 8 {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if action := devForm.FindSubmatch(body); resp.StatusCode == http.StatusOK && action != nil {
			// The development provider's sign-in page: sign in as alice.
			form := url.Values{"username": {"alice"}}
			for _, m := range devHidden.FindAllSubmatch(body, -1) {
				form.Set(html.UnescapeString(string(m[1])), html.UnescapeString(string(m[2])))
			}
			target, _ := resp.Request.URL.Parse(html.UnescapeString(string(action[1])))
			if resp, err = c.PostForm(target.String(), form); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		next := resp.Header.Get("Location")
		if next == "" {
			t.Fatalf("stopped at %s: %d %s", u, resp.StatusCode, body)
		}
		loc, _ := resp.Request.URL.Parse(next)
		if strings.HasPrefix(loc.String(), app.RedirectURI) {
			if q := loc.Query(); q.Get("error") != "access_denied" || q.Get("state") != "apps-test" || q.Has("code") {
				t.Fatalf("the client was told %q, want access_denied with its state", loc)
			}
			return
		}
		u = loc.String()
	}
	t.Fatalf("no answer to the client after 8 steps, at %s", u)
}

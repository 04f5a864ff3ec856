package main

import (
	"html"
	"net/http"
	"net/url"
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

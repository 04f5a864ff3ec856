package browser

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/broker/oauth/oauthtest"
	"github.com/usherhq/usher/store/storetest"
)

// The Connected apps tests connect an external MCP client to `usher serve`
// as one does — registration (RFC 7591), the authorization request, the
// consent page, the token endpoint — and disconnect it through the API
// and through the Sessions UI's page.

// appsOf lists the connected apps through the API with headers (name,
// value pairs), and returns the status, the error code and the client ids.
func appsOf(t *testing.T, s *server, headers ...string) (status int, code string, ids []string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+oauth.PathApps, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Apps []struct {
			ClientID string `json:"client_id"`
		} `json:"apps"`
		Error struct{ Code string } `json:"error"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("GET %s: %d %s", oauth.PathApps, resp.StatusCode, body)
	}
	for _, a := range out.Apps {
		ids = append(ids, a.ClientID)
	}
	return resp.StatusCode, out.Error.Code, ids
}

// apiErrorCode reads the API error's code from body.
func apiErrorCode(body string) string {
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// TestConnectedAppsThroughServe connects two apps for Alice over
// `usher serve`, with each engine, and checks the Connected apps API as
// mounted: her session lists them, Bob's does not; an app's own access
// token is refused there (broker_token_refused); a cross-site DELETE is
// refused; her DELETE disconnects one — its refresh token is refused from
// then on, the other app's still works — and is in the audit log.
func TestConnectedAppsThroughServe(t *testing.T) {
	t.Parallel()
	for name, args := range map[string]func(t *testing.T) []string{
		"sqlite":   func(*testing.T) []string { return nil },
		"postgres": func(t *testing.T) []string { return []string{"--database-url", storetest.PostgresURL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
			db := args(t)
			s := startServer(t, env, db...)
			alice := oauthtest.SignIn(t, s.url, "alice")
			bob := oauthtest.SignIn(t, s.url, "bob")
			cookie := func(v string) []string {
				return []string{"Cookie", (&http.Cookie{Name: "usher_session", Value: v}).String(), "Sec-Fetch-Site", "same-origin"}
			}
			if status, _, ids := appsOf(t, s, cookie(alice)...); status != http.StatusOK || len(ids) != 0 {
				t.Fatalf("before any app: %d %v", status, ids)
			}

			inspector := oauthtest.Register(t, s.url, "MCP Inspector", "http://127.0.0.1:6274/oauth/callback")
			vscode := oauthtest.Register(t, s.url, "Visual Studio Code", "http://127.0.0.1:33418/")
			inspectorTokens := inspector.Connect(t, alice)
			vscodeTokens := vscode.Connect(t, alice)

			if status, _, ids := appsOf(t, s, cookie(alice)...); status != http.StatusOK || fmt.Sprint(ids) != fmt.Sprint([]string{vscode.ClientID, inspector.ClientID}) {
				t.Errorf("Alice's apps: %d %v, want VS Code then the Inspector", status, ids)
			}
			if status, _, ids := appsOf(t, s, cookie(bob)...); status != http.StatusOK || len(ids) != 0 {
				t.Errorf("Bob's apps: %d %v, want none", status, ids)
			}
			if status, code, _ := appsOf(t, s); status != http.StatusUnauthorized {
				t.Errorf("apps without authentication: %d %s, want 401", status, code)
			}
			bearer := []string{"Authorization", "Bearer " + inspectorTokens.AccessToken}
			if status, code, _ := appsOf(t, s, bearer...); status != http.StatusForbidden || code != "broker_token_refused" {
				t.Errorf("apps with an app's access token: %d %s, want 403 broker_token_refused", status, code)
			}
			appURL := s.url + oauth.PathApps + "/" + url.PathEscape(inspector.ClientID)
			if resp, body := oauthtest.SessionRequest(t, http.MethodDelete, appURL, alice, "", nil, bearer...); resp.StatusCode != http.StatusForbidden || apiErrorCode(body) != "broker_token_refused" {
				t.Errorf("DELETE with an app's access token: %d %s, want 403 broker_token_refused", resp.StatusCode, body)
			}
			if resp, body := oauthtest.SessionRequest(t, http.MethodDelete, appURL, alice, "", nil, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden || apiErrorCode(body) != "cross_origin_refused" {
				t.Errorf("a cross-site DELETE: %d %s, want 403 cross_origin_refused", resp.StatusCode, body)
			}
			if resp, body := oauthtest.SessionRequest(t, http.MethodDelete, appURL, bob, "", nil); resp.StatusCode != http.StatusNotFound || apiErrorCode(body) != "not_found" {
				t.Errorf("Bob's DELETE of Alice's app: %d %s, want 404 not_found", resp.StatusCode, body)
			}
			// A metadata document's client id is a URL: its slashes escaped,
			// it reaches the handler as one segment (no redirect to a
			// "cleaned" path).
			docApp := s.url + oauth.PathApps + "/" + url.PathEscape("https://app.example.com//oauth/../client.json")
			if resp, body := oauthtest.SessionRequest(t, http.MethodDelete, docApp, alice, "", nil); resp.StatusCode != http.StatusNotFound || apiErrorCode(body) != "not_found" {
				t.Errorf("DELETE of a URL client id never connected: %d %s, want 404 not_found", resp.StatusCode, body)
			}
			if resp, body := oauthtest.SessionRequest(t, http.MethodPost, s.url+oauth.PathApps, alice, "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST %s: %d %s, want 405", oauth.PathApps, resp.StatusCode, body)
			}

			if resp, body := oauthtest.SessionRequest(t, http.MethodDelete, appURL, alice, "", nil); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("Alice's DELETE: %d %s, want 204", resp.StatusCode, body)
			}
			if _, _, ids := appsOf(t, s, cookie(alice)...); fmt.Sprint(ids) != fmt.Sprint([]string{vscode.ClientID}) {
				t.Errorf("after the revocation: %v, want VS Code only", ids)
			}
			if p := inspector.Refresh(t, inspectorTokens.RefreshToken); p.Status != http.StatusBadRequest || p.Error != "invalid_grant" {
				t.Errorf("the revoked app's refresh: %+v, want invalid_grant", p)
			}
			if p := vscode.Refresh(t, vscodeTokens.RefreshToken); p.Status != http.StatusOK {
				t.Errorf("the other app's refresh: %+v, want 200", p)
			}

			export, err := s.cli(t, append([]string{"audit", "export"}, db...)...)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(export, `"oauth_consent_revoked"`); n != 1 || !strings.Contains(export, inspector.ClientID) {
				t.Errorf("%d oauth_consent_revoked records in the audit log, want 1", n)
			}
			if out, err := s.cli(t, append([]string{"audit", "verify"}, db...)...); err != nil || !strings.HasPrefix(out, "audit log intact:") {
				t.Errorf("audit verify: %v %q", err, out)
			}
		})
	}
}

// TestBrowserConnectedApps signs in to the Sessions UI, connects an app
// as that browser's person (the authorization request and the consent
// over HTTP, with the browser's session cookie, as
// e2e/testdata/oauth-client.mjs does), opens Connected apps from the
// header, sees the app — its name, where it came from, its redirect host,
// its last use —, cancels a revocation and then revokes it from the
// keyboard, sees the empty state with the focus on the page's heading, and
// the app's refresh token refused afterwards.
func TestBrowserConnectedApps(t *testing.T) {
	t.Parallel()
	// The server first: cleanups run last to first, so the browser closes
	// before the server stops, and the page's requests never meet a
	// closed port.
	s := startServer(t, nil)
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")

	var session string
	for _, c := range call(tb, network.GetCookies, network.GetCookiesParams{URLs: []string{s.url + "/"}}).Cookies {
		if c.Name == "usher_session" {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatal("the browser has no session cookie")
	}
	app := oauthtest.Register(t, s.url, "Claude Desktop <b>test</b>", "http://127.0.0.1:33418/callback")
	tokens := app.Connect(t, session)

	tb.do(chromedp.Navigate(s.url + "/"))
	tb.click(`.topbar a.apps-link[href="/apps"]`)
	tb.waitUntil("the Connected apps page lists the app", `location.pathname === "/apps" && document.querySelector(".app-card")`)
	if got := evaluate[string](tb, `document.activeElement.id`); got != "apps-title" {
		t.Errorf("focus on opening the page: %q, want the heading", got)
	}
	if got := evaluate[string](tb, `document.querySelector('.apps-link').getAttribute('aria-current') || ''`); got != "page" {
		t.Errorf("the header link's aria-current = %q, want page", got)
	}
	card := tb.text(".app-card")
	// One view, loaded once: a link followed while the page still starts
	// up is not shown a second time when it has started.
	if n := tb.sent("GET", "/api/oauth/apps"); n != 1 {
		t.Errorf("the page fetched the apps %d times, want once", n)
	}
	for _, want := range []string{"Claude Desktop <b>test</b>", "Registered itself on", "127.0.0.1:", "Last used", "mcp:invoke"} {
		if !strings.Contains(card, want) {
			t.Errorf("the app's card lacks %q: %q", want, card)
		}
	}
	if n := evaluate[int](tb, `document.querySelectorAll(".app-card b").length`); n != 0 {
		t.Error("the app's name became markup")
	}
	if name := evaluate[string](tb, `document.querySelector(".app-card button.revoke").textContent`); name != "Revoke Claude Desktop <b>test</b>" {
		t.Errorf("the Revoke button's accessible text = %q", name)
	}

	// Cancel first: nothing happens, and the focus returns to Revoke.
	tb.click(".app-card button.revoke")
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open]")`)
	if got := evaluate[string](tb, `document.activeElement.textContent`); got != "Cancel" {
		t.Errorf("focus in the confirmation: %q, want Cancel", got)
	}
	tb.click("dialog.dialog button[type=button]")
	tb.waitUntil("the confirmation closed, focus back on Revoke",
		`!document.querySelector("dialog.dialog") && document.activeElement.matches(".app-card button.revoke")`)
	// The app still works: its token rotates, and the successor is the
	// one to be refused after the revocation.
	rotated := app.Refresh(t, tokens.RefreshToken)
	if rotated.Status != http.StatusOK || rotated.RefreshToken == "" {
		t.Fatalf("refresh after Cancel: %+v, want 200", rotated)
	}

	// Then revoke, with the keyboard: Enter on the focused Revoke, Tab to
	// the confirmation's button, Enter.
	tb.do(pressEnter)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open]")`)
	tb.do(chromedp.KeyEvent(kb.Tab), pressEnter)
	tb.waitUntil("the empty state", `document.querySelector(".app-list .empty-state") && !document.querySelector(".app-card")`)
	tb.waitUntil("focus on the page's heading", `document.activeElement && document.activeElement.id === "apps-title"`)
	checkAxe(t, tb, "the connected apps")
	if empty := tb.text(".app-list .empty-state"); !strings.Contains(empty, "No apps are connected") {
		t.Errorf("empty state %q", empty)
	}
	if p := app.Refresh(t, rotated.RefreshToken); p.Status != http.StatusBadRequest || p.Error != "invalid_grant" {
		t.Errorf("the refresh token after Revoke: %+v, want invalid_grant", p)
	}

	// A reload shows the same: nothing connected.
	tb.do(chromedp.Reload())
	tb.waitUntil("the empty state after a reload", `document.querySelector(".app-list .empty-state")`)
	tb.checkClean()
}

// TestBrowserConsent connects an app in Chromium as a person does: its
// authorization request sends the signed-out browser to sign in and back,
// the consent page's Allow posts the form from Usher's own page, and its
// answer takes the browser to the app's redirect URI with a code that the
// app redeems. Browsers hold the page to its policies (the referrer policy
// decides the post's Origin; form-action covers the redirect after it),
// which a client that posts the form over plain HTTP does not show.
func TestBrowserConsent(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	arrived := make(chan url.Values, 1)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- r.URL.Query():
		default:
		}
		fmt.Fprint(w, "<!doctype html><title>signed in</title><p>You may close this window.")
	}))
	t.Cleanup(cb.Close)
	tb := startBrowser(t) // after the servers: it closes before them
	app := oauthtest.Register(t, s.url, "Browser App", cb.URL+"/callback")
	u, verifier := app.AuthorizeURL()

	tb.do(chromedp.Navigate(u))
	tb.waitUntil("the development provider's form", `location.pathname.startsWith("/dev/oidc/") && document.querySelector("#username")`)
	tb.typeText("#username", "alice")
	tb.click(`form button[type=submit]`)
	tb.waitUntil("the consent page", `location.pathname === "/oauth/authorize/continue" && document.querySelector("button[value=approve]")`)
	if page := tb.text("main"); !strings.Contains(page, "Browser App") {
		t.Errorf("the consent page does not name the app: %q", page)
	}
	tb.click(`button[value=approve]`)
	tb.waitUntil("the app's redirect URI", `location.origin === `+js(cb.URL))
	var q url.Values
	select {
	case q = <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached the redirect URI")
	}
	if q.Get("state") != "apps-test" || q.Get("iss") != s.url || q.Get("code") == "" {
		t.Fatalf("the redirect URI got %v, want code, state and iss", q)
	}
	if tok := app.Redeem(t, q.Get("code"), verifier); tok.AccessToken == "" || tok.RefreshToken == "" {
		t.Fatalf("redeeming the code: %+v", tok)
	}
	tb.checkClean()
}

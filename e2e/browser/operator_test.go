package browser

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/internal/apitest"
)

// meLoaded holds once the page's GET /api/me has answered and two frames
// have passed, in which the page shows what it says.
const meLoaded = `performance.getEntriesByName(location.origin + "/api/me").length > 0 &&
	new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))))`

// TestBrowserOperator: the Operator page is for admins (admin.groups).
// Alice, in no admin group, has no Operator link, and the page at
// /operator says the status is not hers to read. Olga, an admin, follows
// the link with the keyboard and reads the status — this replica alive,
// no problem, the queue, the approvals, the audit log — which the page
// reads again every few seconds, and the model usage with her turn's; axe finds no serious violation at either
// size, in either theme.
//
// The development sign-in form names no groups: Olga's requests carry the
// access token `usher token user --group operators` gives her (the API
// takes a bearer token before the session cookie), so that GET /api/me
// and GET /api/admin/status see her group, as they would in an Entra
// token.
func TestBrowserOperator(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ADMIN_GROUPS": "operators", "USHER_ADMIN_HEARTBEAT_INTERVAL": "1s"})
	olga, err := s.cli(t, "token", "user", "--sub", "olga", "--group", "operators")
	if err != nil {
		t.Fatal(err)
	}
	// A turn of olga's, whose model request the page's usage shows.
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs?wait=30s", olga, `{"message":"hello"}`); code != http.StatusCreated {
		t.Fatalf("olga's run = %d %v", code, body)
	}
	tb := startBrowser(t)

	// Alice: no link; the page itself is refused by the API.
	tb.expectLog("status of 403")
	tb.signIn(s.url, "alice")
	tb.do(chromedp.Navigate(s.url + "/operator"))
	tb.waitUntil("the refusal", `document.querySelector("#main .operator .form-error")?.textContent.includes("Only admins")`)
	tb.waitUntil("GET /api/me answered", meLoaded)
	if n := evaluate[int](tb, `document.querySelectorAll(".operator-link").length`); n != 0 {
		t.Errorf("alice sees %d Operator links, want none", n)
	}
	if got := tb.text("#main .operator"); strings.Contains(got, "Replicas alive") {
		t.Errorf("alice's Operator page shows the status:\n%s", got)
	}
	checkAxe(t, tb, "the Operator page refused")

	// Olga, an admin.
	tb.click(`.topbar .user button`)
	tb.waitUntil("signed out", `document.querySelector("main.signin")`)
	tb.signIn(s.url, "olga")
	call(tb, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + olga}})
	tb.do(chromedp.Navigate(s.url + "/"))
	tb.waitUntil("the Operator link", `document.querySelector(".topnav a.operator-link[href='/operator']")`)
	// The new-session view puts the focus in its composer when it shows,
	// which may be after the link: Enter would go to the empty composer.
	tb.waitUntil("the new-session view, its composer focused", `document.querySelector("#home-title") && document.activeElement?.matches("#main .composer textarea")`)
	if !evaluate[bool](tb, `document.querySelector(".operator-link").focus(), document.activeElement.matches(".operator-link")`) {
		t.Fatal("the Operator link took no focus")
	}
	tb.do(pressEnter)
	tb.waitUntil("the status", `location.pathname === "/operator" && document.querySelector("#main .status-table tbody tr")`)
	if got := evaluate[string](tb, `document.activeElement.id`); got != "operator-title" {
		t.Errorf("focus on opening the page: %q, want the heading", got)
	}
	if got := evaluate[string](tb, `document.querySelector(".operator-link").getAttribute("aria-current") || ""`); got != "page" {
		t.Errorf("the link's aria-current = %q, want page", got)
	}
	page := tb.text("#main .operator")
	for _, want := range []string{"No problem", "Replicas alive (1)", "127.0.0.1:", "Upstreams (0)", "Queued", "Pending", "Last checkpoint"} {
		if !strings.Contains(page, want) {
			t.Errorf("the Operator page lacks %q:\n%s", want, page)
		}
	}
	tb.waitUntil("the model usage", `document.querySelector("#main .status-usage tbody tr")?.textContent.includes("demo")`)
	if usage := tb.text("#main .status-usage"); !strings.Contains(usage, "Model usage,") || !strings.Contains(usage, "turn") {
		t.Errorf("the Operator page's model usage:\n%s", usage)
	}
	tb.waitUntil("the status read again", `performance.getEntriesByName(location.origin + "/api/admin/status").length >= 2`)
	checkAxeVariants(t, tb, "the Operator page")
}

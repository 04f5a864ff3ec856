package browser

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserDailyAtEverySize: the home screen at the limit, a session's
// menu, the settings and the Connected apps' empty state pass axe with no
// moderate finding at 1280×800 and 390×844, light and dark. At 390 px the
// limit's buttons stay inside the screen with a long title, and a
// conversation's header is compact: the title on one line, cut, and its
// buttons on one row. At 1280 px the header is one line too, Stop
// appearing or not; in a short window the sessions list scrolls and the
// sidebar's foot stays in view.
func TestBrowserDailyAtEverySize(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	ivy := userToken(t, s, "ivy")
	long := strings.Repeat("A rather long title for a session ", 5)
	var last string
	for i := 1; i <= 5; i++ {
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", ivy, fmt.Sprintf(`{"title":%q}`, fmt.Sprint(long, i)))
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		last = run["runId"].(string)
	}
	tb := startBrowser(t)
	tb.signIn(s.url, "ivy")
	tb.waitUntil("the limit", `document.querySelector(".home-limits.at-limit button.park-quiet")`)
	checkAxeVariants(t, tb, "the home screen at the limit")
	phone := axeVariants[2]
	tb.setVariant(phone)
	if out := evaluate[[]string](tb, `[...document.querySelectorAll(".home-limits button")].filter((b) => {
		const r = b.getBoundingClientRect();
		return r.left < 0 || r.right > innerWidth || b.scrollWidth > b.clientWidth + 1 && getComputedStyle(b).textOverflow !== "ellipsis";
	}).map((b) => b.textContent)`); len(out) > 0 {
		t.Errorf("at 390 px these buttons run off the screen: %q", out)
	}
	if w := evaluate[int](tb, `document.documentElement.scrollWidth`); w > phone.width {
		t.Errorf("at 390 px the page is %d px wide", w)
	}
	// A short window: the list scrolls, the sidebar's foot stays at its
	// foot, in view.
	tb.setVariant(axeVariant{"1280×560, light", 1280, 560, false, "light"})
	foot := `(() => {
		const side = document.querySelector(".sidebar"), nav = side.querySelector("nav"), out = document.querySelector(".sidebar .sign-out-all");
		return { listScrolls: nav.scrollHeight > nav.clientHeight + 1 ? 1 : 0, sidebarScrolls: side.scrollHeight > side.clientHeight + 1 ? 1 : 0,
			signOutBottom: out.getBoundingClientRect().bottom, sidebarBottom: side.getBoundingClientRect().bottom };
	})()`
	if got := evaluate[map[string]float64](tb, foot); got["listScrolls"] != 1 || got["sidebarScrolls"] != 0 || got["signOutBottom"] > got["sidebarBottom"] || got["sidebarBottom"]-got["signOutBottom"] > 24 {
		t.Errorf("in a 560 px high window the sidebar = %v, want the list scrolling and Sign out everywhere at the sidebar's foot", got)
	}
	tb.setVariant(axeVariants[0])

	tb.click(menuOf(last))
	tb.waitUntil("the menu open", `document.activeElement?.getAttribute("role") === "menuitem"`)
	checkAxe(t, tb, "a session's menu")
	tb.click(`.home-intro .lede`)
	tb.click(`.sidebar .open-settings`)
	tb.waitUntil("the settings dialog", `document.querySelector("dialog.settings-dialog[open]")`)
	checkAxeVariants(t, tb, "the settings dialog")
	tb.click(`dialog.settings-dialog .actions .button:not([type=submit])`)
	tb.waitUntil("the dialog closed", `!document.querySelector("dialog.settings-dialog")`)

	// A conversation's header at a phone's width.
	tb.click(`.session-list a[href="/runs/` + last + `"]`)
	tb.waitUntil("the conversation", `document.querySelector(".conversation-head h2")?.textContent.startsWith("A rather long")`)
	// At 1280 px: one line, the title cut (whole in its title attribute),
	// and no jump when Stop shows (as while a turn runs).
	desk := `(() => {
		const head = document.querySelector(".conversation-head"), title = head.querySelector("h2");
		return { height: Math.round(head.getBoundingClientRect().height), titleHeight: title.getBoundingClientRect().height,
			cut: title.scrollWidth > title.clientWidth ? 1 : 0, whole: title.title === title.textContent ? 1 : 0,
			list: Math.round(document.querySelector(".messages").getBoundingClientRect().top) };
	})()`
	idle := evaluate[map[string]float64](tb, desk)
	evaluate[bool](tb, `(document.querySelector(".conversation-actions .stop-turn").hidden = false, true)`)
	working := evaluate[map[string]float64](tb, desk)
	evaluate[bool](tb, `(document.querySelector(".conversation-actions .stop-turn").hidden = true, true)`)
	if idle["titleHeight"] > 32 || idle["cut"] != 1 || idle["whole"] != 1 || working["height"] != idle["height"] || working["list"] != idle["list"] {
		t.Errorf("the conversation's header at 1280 px = %v, with Stop %v: want the title on one line, cut, whole in its title attribute, and Stop moving nothing", idle, working)
	}
	tb.setVariant(phone)
	head := evaluate[map[string]float64](tb, `(() => {
		const head = document.querySelector(".conversation-head"), title = head.querySelector("h2");
		const tops = new Set([...head.querySelectorAll(".conversation-actions > *:not([hidden])")].map((b) => Math.round(b.getBoundingClientRect().top)));
		const right = Math.max(...[...head.querySelectorAll("*")].map((e) => e.getBoundingClientRect().right));
		return { height: head.getBoundingClientRect().height, rows: tops.size, cut: title.scrollWidth > title.clientWidth ? 1 : 0,
			titleHeight: title.getBoundingClientRect().height, titleWidth: title.getBoundingClientRect().width, right };
	})()`)
	if head["height"] > 96 || head["rows"] != 1 || head["cut"] != 1 || head["titleHeight"] > 30 || head["titleWidth"] < 150 || head["right"] > float64(phone.width) {
		t.Errorf("the conversation's header at 390 px = %v, want at most 96 px high: the title on one line, cut, and the buttons on one row, all inside the screen", head)
	}
	checkAxe(t, tb, "a conversation with a long title at "+phone.name)
	tb.setVariant(axeVariants[0])

	// Connected apps with none: the URL to give a client, and its settings.
	tb.do(chromedp.Navigate(s.url + "/apps"))
	tb.waitUntil("the empty state", `document.querySelector(".apps-empty .mcp-url code")`)
	if got := tb.text(".apps-empty .mcp-url code"); got != s.url+"/mcp" {
		t.Errorf("the MCP URL shown = %q, want %q", got, s.url+"/mcp")
	}
	if got := evaluate[string](tb, `[...document.querySelectorAll(".apps-empty .client-settings pre")].map((p) => p.textContent).join("\n")`); !strings.Contains(got, `"url": "`+s.url+`/mcp"`) || !strings.Contains(got, "claude mcp add --transport http usher "+s.url+"/mcp") {
		t.Errorf("the client settings = %s", got)
	}
	checkAxeVariants(t, tb, "Connected apps with none")
	tb.checkClean()
}

// TestBrowserConsentInTheDark: the OAuth consent page follows the
// device's dark mode, and passes axe in both.
func TestBrowserConsentInTheDark(t *testing.T) {
	t.Parallel()
	_, app := startWithApp(t, "Dark App")
	tb := startBrowser(t)
	u, _ := app.AuthorizeURL()
	tb.do(chromedp.Navigate(u))
	tb.waitUntil("the development provider's form", `location.pathname.startsWith("/dev/oidc/") && document.querySelector("#username")`)
	tb.typeText("#username", "alice")
	tb.click(`form button[type=submit]`)
	tb.waitUntil("the consent page", `location.pathname === "/oauth/authorize/continue" && document.querySelector("button[value=approve]")`)
	background := map[string]string{}
	for _, scheme := range []string{"light", "dark"} {
		call(tb, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		tb.waitUntil("the "+scheme+" scheme", `matchMedia("(prefers-color-scheme: `+scheme+`)").matches`)
		background[scheme] = evaluate[string](tb, `getComputedStyle(document.body).backgroundColor`)
		checkAxe(t, tb, "the consent page, "+scheme)
	}
	if background["dark"] != "rgb(17, 19, 23)" || background["light"] == background["dark"] {
		t.Errorf("the consent page's background: light %s, dark %s; want the Sessions UI's dark rgb(17, 19, 23)", background["light"], background["dark"])
	}
	tb.checkClean()
}

// holdRequests pauses the page's requests whose URL matches pattern (a
// glob): wait returns once one is held; release lets every one held go on
// and stops holding.
func (tb *tab) holdRequests(pattern string) (wait, release func()) {
	tb.t.Helper()
	ctx, cancel := context.WithCancel(tb.ctx)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	call(tb, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: fetch.RequestStageRequest}}})
	var mu sync.Mutex
	var held []fetch.RequestID
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range paused {
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, ev.RequestID)
			if len(held) == 1 {
				close(first)
			}
			mu.Unlock()
		}
	}()
	wait = func() {
		select {
		case <-first:
		case <-time.After(conditionTimeout):
			tb.t.Fatalf("%s: no request to %s within %s", tb.name, pattern, conditionTimeout)
		}
	}
	return wait, func() {
		cancel()
		<-done
		for _, id := range held {
			// A request the page gave up meanwhile (a reload) is gone:
			// nothing to let go on.
			ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
			_, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
			cancel()
			if err != nil && !strings.Contains(err.Error(), "Invalid InterceptionId") {
				tb.t.Fatalf("%s: letting a held request go on: %v", tb.name, err)
			}
		}
		call(tb, fetch.Disable, cdp.Empty{})
	}
}

// TestBrowserLoadingPlaceholders: while the sessions list, or a
// conversation, is slow to load, grey placeholders show where it will be
// (after 200 ms: the CSS delays them), named for screen readers; they go
// when it has loaded.
func TestBrowserLoadingPlaceholders(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	jo := userToken(t, s, "jo")
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", jo, `{"title":"Slow to load"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	runID := run["runId"].(string)
	tb := startBrowser(t)
	tb.signIn(s.url, "jo")
	tb.waitUntil("the session listed", `document.querySelector(".session-list a[href='/runs/`+runID+`']")`)

	wait, release := tb.holdRequests("*/api/assistant/runs/" + runID)
	tb.click(`.session-list a[href="/runs/` + runID + `"]`)
	wait()
	visible := func(sel string) string {
		return `(() => { const e = document.querySelector(` + js(sel) + `); return e && getComputedStyle(e).visibility === "visible" && e.getBoundingClientRect().height > 0; })()`
	}
	tb.waitUntil("the conversation's placeholder", visible(".conversation .skeleton-conversation[role=status]"))
	if got := tb.text(".conversation .skeleton-conversation .visually-hidden"); got != "Loading the conversation…" {
		t.Errorf("the placeholder is named %q", got)
	}
	release()
	tb.waitUntil("the conversation, the placeholder gone", `document.querySelector(".conversation-head h2")?.textContent === "Slow to load" && !document.querySelector(".skeleton")`)

	wait, release = tb.holdRequests("*/api/assistant/runs")
	tb.do(chromedp.Reload())
	wait()
	tb.waitUntil("the list's placeholder", visible(".session-list .skeleton-list[role=status]"))
	release()
	tb.waitUntil("the list, the placeholder gone", `document.querySelector(".session-list a[href='/runs/`+runID+`']") && !document.querySelector(".session-list .skeleton")`)
	tb.checkClean()
}

package browser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// The daily chat: the active limit without a dead end, the sessions'
// menus in the list, the settings, and the page's accessibility at every
// size and theme with no moderate finding.

// TestBrowserParkAtTheLimit: with five sessions going, a new message on
// the home screen is refused; the page offers to set aside the session
// used least recently, and one click parks it (Idle) and starts the new
// session with the message; the parked session picks up again on its next
// message, and the model answers it.
func TestBrowserParkAtTheLimit(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("Noted.")
	s := startServer(t, ms.UsherEnv())
	erin := userToken(t, s, "erin")
	var ids []string
	for i := 1; i <= 5; i++ {
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", erin, fmt.Sprintf(`{"message":"Topic %d"}`, i))
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		id := run["runId"].(string)
		ids = append(ids, id)
		// Each answered, in order: the first is the least recently used.
		if code, out := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages?wait=30s", erin, `{"content":"and more"}`); code != 200 {
			t.Fatalf("post = %d %v", code, out)
		}
	}
	tb := startBrowser(t)
	tb.signIn(s.url, "erin")
	tb.waitUntil("the limit, before typing", `document.querySelector(".home-limits.at-limit")?.textContent.includes("You have 5 sessions going")`)
	if href := evaluate[string](tb, `document.querySelector(".home-limits.at-limit a").getAttribute("href")`); href != "/runs/"+ids[0] {
		t.Errorf("the session offered is %s, want the least recently used, /runs/%s", href, ids[0])
	}
	tb.expectLog("status of 429")
	tb.trySend("A new topic")
	tb.waitUntil("the offer to set one aside and start", `document.querySelector(".home-limits button.park-quiet")?.textContent.includes("and start")`)
	checkAxe(t, tb, "the offer at the limit")
	tb.click(`.home-limits button.park-quiet`)
	tb.waitUntil("the new session", `/^\/runs\/[^/]+$/.test(location.pathname)`)
	newID := tb.runID()
	tb.waitUntil("the new message shown", `[...document.querySelectorAll(".msg-user .msg-body")].some((m) => m.textContent === "A new topic")`)
	// Its answer first: the reply scripted below is the parked session's.
	tb.waitUntil("the new session's answer", `[...document.querySelectorAll(".msg-assistant .msg-body")].some((m) => m.textContent.includes("Noted."))`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+ids[0], erin, ""); code != 200 || body["run"].(map[string]any)["status"] != "Idle" {
		t.Fatalf("the parked session = %d %v, want Idle", code, body)
	}
	if newID == ids[0] {
		t.Fatalf("the new session is the parked one")
	}

	// The parked session resumes on its next message.
	tb.click(`.session-list a[href="/runs/` + ids[0] + `"]`)
	tb.waitUntil("the parked session", `location.pathname === "/runs/`+ids[0]+`"`)
	ms.Reply("Back on topic 1.")
	tb.send("Where were we?")
	tb.waitUntil("its answer", `[...document.querySelectorAll(".msg-assistant .msg-body")].some((m) => m.textContent.includes("Back on topic 1."))`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+ids[0], erin, ""); code != 200 || body["run"].(map[string]any)["status"] != "InProgress" {
		t.Errorf("the resumed session = %d %v, want InProgress", code, body)
	}
	tb.checkClean()
}

// menuOf is the selector of a session's menu button in the list.
func menuOf(runID string) string {
	return `.session-row:has(a[href="/runs/` + runID + `"]) .session-menu`
}

// press presses a key on the element with the focus.
func (tb *tab) press(key string) {
	tb.t.Helper()
	if key == kb.Enter {
		tb.do(pressEnter)
		return
	}
	tb.do(chromedp.KeyEvent(key))
}

// TestBrowserSidebarMenus: each session's menu in the list, by mouse and
// by keyboard — a menu button with aria-expanded, arrow keys, Escape and
// an outside click that close it — renames, pins (pinned sessions first,
// under Pinned, and kept by the server), and deletes after a
// confirmation, the focus then on the session beside; the conversation's More menu closes on an outside click;
// Sign out everywhere asks first.
func TestBrowserSidebarMenus(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ASSISTANT_DELETE_INACTIVE_AFTER": "2160h", "USHER_ASSISTANT_PURGE_DELETED_AFTER": "720h"})
	frank := userToken(t, s, "frank")
	var ids []string
	for _, title := range []string{"Older one", "Newer one"} {
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", frank, `{"title":"`+title+`"}`)
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		ids = append(ids, run["runId"].(string))
	}
	older, newer := ids[0], ids[1]
	tb := startBrowser(t)
	tb.signIn(s.url, "frank")
	tb.waitUntil("both sessions listed", `document.querySelectorAll(".session-list .session-item").length === 2`)
	first := `document.querySelector(".session-list .session-item").getAttribute("href")`
	if got := evaluate[string](tb, first); got != "/runs/"+newer {
		t.Fatalf("first listed = %s, want the newer session", got)
	}

	// Mouse: pin the older session; it moves first, under Pinned.
	tb.click(menuOf(older))
	tb.waitUntil("the menu open", `document.querySelector(`+js(menuOf(older))+`).getAttribute("aria-expanded") === "true" && document.activeElement?.getAttribute("role") === "menuitem"`)
	checkAxe(t, tb, "a session's menu")
	tb.click(menuOf(older) + ` + [role=menu] .menu-pin`)
	tb.waitUntil("the pinned session first", first+` === "/runs/`+older+`" && document.querySelector(".session-list .session-group")?.textContent === "Pinned"`)
	_, list := apitest.Call(t, "GET", s.url+"/api/assistant/runs", frank, "")
	if r := list["runs"].([]any)[0].(map[string]any); r["runId"] != older || r["pinned"] != true {
		t.Errorf("the API lists first %v, want the older session, pinned", r)
	}
	// An outside click closes a menu.
	tb.click(menuOf(newer))
	tb.waitUntil("the menu open", `document.querySelector(`+js(menuOf(newer))+`).getAttribute("aria-expanded") === "true"`)
	tb.click(`.home-intro .lede`)
	tb.waitUntil("the menu closed by a click outside", `document.querySelector(`+js(menuOf(newer))+`).getAttribute("aria-expanded") === "false" && document.querySelector(`+js(menuOf(newer)+` + [role=menu]`)+`).hidden`)

	// Keyboard: Enter opens it on its first item; Escape closes it, the
	// focus back on its button; ArrowDown opens it too.
	evaluate[bool](tb, `(document.querySelector(`+js(menuOf(newer))+`).focus(), true)`)
	tb.press(kb.Enter)
	tb.waitUntil("Rename focused", `document.activeElement?.classList.contains("menu-rename")`)
	tb.press(kb.ArrowDown)
	tb.waitUntil("Pin focused", `document.activeElement?.classList.contains("menu-pin")`)
	tb.press(kb.End)
	tb.waitUntil("Delete focused", `document.activeElement?.classList.contains("menu-delete")`)
	tb.press(kb.ArrowDown)
	tb.waitUntil("around to Rename", `document.activeElement?.classList.contains("menu-rename")`)
	tb.press(kb.Escape)
	tb.waitUntil("closed, the focus on its button", `document.activeElement === document.querySelector(`+js(menuOf(newer))+`) && document.activeElement.getAttribute("aria-expanded") === "false"`)
	tb.press(kb.ArrowDown)
	tb.waitUntil("Rename focused again", `document.activeElement?.classList.contains("menu-rename")`)
	tb.press(kb.Enter)
	tb.waitUntil("the rename dialog", `document.querySelector("dialog.dialog[open] input[type=text]") === document.activeElement`)
	tb.do(chromedp.KeyEvent(kb.Backspace))
	tb.do(chromedp.SendKeys(chromedp.CSS(`dialog.dialog[open] input[type=text]`), "Renamed by keyboard"))
	tb.press(kb.Enter)
	tb.waitUntil("the new title listed", `[...document.querySelectorAll(".session-list .session-title")].some((e) => e.textContent === "Renamed by keyboard")`)
	if _, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+newer, frank, ""); body["run"].(map[string]any)["title"] != "Renamed by keyboard" {
		t.Errorf("the renamed run = %v", body["run"])
	}

	// A live update while the mouse button is down on a row (the other
	// session renamed elsewhere) leaves that row where it is: the click
	// opens it.
	olderLink := `.session-list a[href="/runs/` + older + `"]`
	at := evaluate[[]float64](tb, `(() => { const r = document.querySelector(`+js(olderLink)+`).getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	button := func(typ input.DispatchMouseEventType) {
		call(tb, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: typ, X: at[0], Y: at[1], Button: input.MouseButtonLeft, Buttons: 1, ClickCount: 1})
	}
	button(input.DispatchMouseEventTypeMousePressed)
	if code, _ := apitest.Call(t, "PATCH", s.url+"/api/assistant/runs/"+newer, frank, `{"title":"Renamed elsewhere"}`); code != 200 {
		t.Fatalf("PATCH the other run = %d", code)
	}
	tb.waitUntil("the other title listed", `[...document.querySelectorAll(".session-list .session-title")].some((e) => e.textContent === "Renamed elsewhere")`)
	button(input.DispatchMouseEventTypeMouseReleased)
	tb.waitUntil("the older session open", `location.pathname === "/runs/`+older+`" && document.querySelector(".conversation-actions .more-actions > summary")`)

	// Delete, after the confirmation, which says when the messages are
	// erased (assistant.purge_deleted_after).
	tb.click(menuOf(newer))
	tb.click(menuOf(newer) + ` + [role=menu] .menu-delete`)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open] button[value=ok]")`)
	if text := tb.text("dialog.dialog[open]"); !strings.Contains(text, "Its messages are erased 30 days later") {
		t.Errorf("the confirmation says %q, want when the messages are erased", text)
	}
	tb.click(`dialog.dialog[open] button[value=ok]`)
	tb.waitUntil("the session gone from the list", `!document.querySelector(".session-list a[href='/runs/`+newer+`']")`)
	// The focus, whose menu left with the row, is on the session beside it.
	tb.waitUntil("the focus on the session left", `document.activeElement === document.querySelector(`+js(olderLink)+`)`)
	if code, _ := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+newer, frank, ""); code != 404 {
		t.Errorf("GET the deleted run = %d, want 404", code)
	}

	// The conversation's More menu (the older session's, open since the
	// click above) closes on a click outside it.
	tb.click(`.conversation-actions .more-actions > summary`)
	tb.waitUntil("More open", `document.querySelector(".conversation-actions .more-actions").open`)
	tb.click(`.messages`)
	tb.waitUntil("More closed by a click outside", `!document.querySelector(".conversation-actions .more-actions").open`)

	// Settings say how long sessions are kept.
	tb.click(`.sidebar .open-settings`)
	tb.waitUntil("the settings dialog", `document.querySelector("dialog.settings-dialog[open]")`)
	if text := tb.text("dialog.settings-dialog .settings-retention"); text != "A session without activity for 90 days is deleted. A deleted session's messages are erased 30 days after its deletion." {
		t.Errorf("Settings say %q about keeping sessions", text)
	}
	tb.click(`dialog.settings-dialog .actions .button:not([type=submit])`)
	tb.waitUntil("the dialog closed", `!document.querySelector("dialog.settings-dialog")`)

	// Sign out everywhere asks first: Cancel keeps the session.
	tb.click(`.sidebar .sign-out-all`)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open] h2")?.textContent === "Sign out everywhere?"`)
	tb.click(`dialog.dialog[open] .actions .button:not([type=submit])`)
	tb.waitUntil("still signed in", `!document.querySelector("dialog.dialog") && document.querySelector(".topbar .user-name")`)
	if code := evaluate[int](tb, `fetch("/api/me").then((r) => r.status)`); code != 200 {
		t.Fatalf("the browser's session after Cancel: GET /api/me = %d", code)
	}
	tb.click(`.sidebar .sign-out-all`)
	tb.click(`dialog.dialog[open] button[value=ok]`)
	tb.waitUntil("signed out", `document.querySelector("main.signin")`)
	tb.checkClean()
}

// pressCtrlEnter presses Ctrl+Enter.
var pressCtrlEnter = enterKey(int64(kb.ModifierCtrl))

// TestBrowserSettings: the settings dialog saves custom instructions, the
// theme and Ctrl+Enter to send; the next model request carries the
// instructions after the system prompt; Enter then makes a new line and
// Ctrl+Enter sends; and all of it is there again after signing out and in
// from a browser that remembers nothing.
func TestBrowserSettings(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("D'accord.")
	s := startServer(t, ms.UsherEnv())
	tb := startBrowser(t)
	tb.signIn(s.url, "gina")
	// Once loaded: the list's placeholder no longer moves the sidebar.
	tb.waitUntil("the home screen", `document.querySelector("#home-title") && !document.querySelector(".skeleton")`)
	tb.click(`.sidebar .open-settings`)
	tb.waitUntil("the settings dialog", `document.querySelector("dialog.settings-dialog[open] textarea") === document.activeElement`)
	checkAxe(t, tb, "the settings dialog")
	tb.do(chromedp.SendKeys(chromedp.CSS(`dialog.settings-dialog textarea`), "Always answer in French."))
	tb.click(`dialog.settings-dialog input[name=theme][value=dark]`)
	tb.click(`dialog.settings-dialog input[name=sendKey][value=ctrl-enter]`)
	tb.click(`dialog.settings-dialog button[type=submit]`)
	tb.waitUntil("saved and applied", `!document.querySelector("dialog.settings-dialog") && document.documentElement.dataset.theme === "dark" && document.querySelector(".sidebar .theme-toggle").textContent === "Theme: dark"`)
	tb.waitUntil("the hint", `document.querySelector("#main .composer .hint")?.textContent.startsWith("Ctrl+Enter sends")`)

	// Enter makes a new line; Ctrl+Enter sends.
	tb.waitUntil("the composer is ready", `document.querySelector(`+js(composerSend)+`)`)
	tb.typeText(composerInput, "Bonjour")
	tb.do(pressEnter)
	tb.typeText(composerInput, "encore")
	tb.waitUntil("a new line, not sent", `document.querySelector(`+js(composerInput)+`)?.value === "Bonjour\nencore" && location.pathname === "/"`)
	tb.do(pressCtrlEnter)
	tb.waitUntil("the new session", `/^\/runs\/[^/]+$/.test(location.pathname)`)
	tb.waitUntil("its answer", `[...document.querySelectorAll(".msg-assistant .msg-body")].some((m) => m.textContent.includes("D'accord."))`)
	reqs := ms.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	system := reqs[len(reqs)-1].Messages[0]
	if system.Role != "system" || !strings.HasSuffix(system.Content, "Always answer in French.") {
		t.Errorf("the system message = %+v, want the custom instructions at its end", system)
	}

	// Out, the browser's memory cleared, and in again: the same settings.
	evaluate[bool](tb, `(localStorage.clear(), true)`)
	tb.click(`.topbar .user .button`)
	tb.waitUntil("signed out", `document.querySelector("main.signin")`)
	tb.signIn(s.url, "gina")
	tb.waitUntil("the dark theme again", `document.documentElement.dataset.theme === "dark" && document.querySelector("#home-title") && !document.querySelector(".skeleton")`)
	tb.click(`.sidebar .open-settings`)
	tb.waitUntil("the instructions kept", `document.querySelector("dialog.settings-dialog[open] textarea")?.value === "Always answer in French." && document.querySelector("dialog.settings-dialog input[name=sendKey][value=ctrl-enter]").checked`)
	tb.press(kb.Escape)
	tb.waitUntil("the dialog closed", `!document.querySelector("dialog.settings-dialog")`)
	tb.checkClean()
}

// TestBrowserShortcuts: Ctrl+K focuses the search, even from the message
// box; "?" opens the list of shortcuts, Escape closes it.
func TestBrowserShortcuts(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	tb := startBrowser(t)
	tb.signIn(s.url, "hana")
	tb.waitUntil("the home screen, the composer focused", `document.activeElement === document.querySelector(`+js(composerInput)+`)`)
	tb.do(chromedp.KeyEvent("k", chromedp.KeyModifiers(kb.ModifierCtrl)))
	tb.waitUntil("the search focused", `document.activeElement?.id === "session-search"`)
	evaluate[bool](tb, `(document.activeElement.blur(), true)`)
	tb.do(chromedp.KeyEvent("?"))
	tb.waitUntil("the shortcuts listed", `document.querySelector("dialog.shortcuts-dialog[open]")?.textContent.includes("Search the sessions")`)
	checkAxe(t, tb, "the shortcuts dialog")
	tb.press(kb.Escape)
	tb.waitUntil("the list closed", `!document.querySelector("dialog.shortcuts-dialog")`)
	tb.checkClean()
}

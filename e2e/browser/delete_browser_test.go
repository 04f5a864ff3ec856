package browser

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserDeleteMessage drives deleting a message in Chromium, on the
// embedded default (the demo model echoes each message), with the
// keyboard: Delete on the user's first message asks first, saying the
// earlier version stays; confirmed, the page shows the new line without
// the message and its answer, with a mark whose switcher offers the old
// line; "‹" switches back to it, whole.
func TestBrowserDeleteMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")

	replied := func(text string) string {
		return `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes(` + js(text) + `))`
	}
	idle := `document.querySelector(".conversation") && !document.querySelector(".conversation").classList.contains("busy") && document.querySelector(` + js(runBadge) + `)?.textContent === "Active"`
	shownUser := `[...document.querySelectorAll("article.msg-user .msg-body")].map((e) => e.textContent).join("|")`

	runID := tb.startSession("plan a trip to Lisbon")
	tb.waitUntil("the first reply", replied(`You wrote: "plan a trip to Lisbon"`))
	tb.waitUntil("the run is between turns", idle)
	tb.send("and a hotel?")
	tb.waitUntil("the second reply", replied(`You wrote: "and a hotel?"`))
	tb.waitUntil("the run is between turns", idle)

	// Delete, with the keyboard: Enter on the first message's Delete, the
	// confirmation (its focus on Cancel), Tab to Delete, Enter.
	evaluate[bool](tb, `(() => { document.querySelector("article.msg-user .msg-delete").focus(); return true; })()`)
	tb.do(pressEnter)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open]")`)
	if text := tb.text("dialog.dialog[open]"); !strings.Contains(text, "earlier version stays available") || !strings.Contains(text, "version switcher") {
		t.Errorf("the confirmation says %q, want that the earlier version stays available through the switcher", text)
	}
	checkAxe(t, tb, "the confirmation of a delete")
	tb.do(chromedp.KeyEvent(kb.Tab), pressEnter)
	tb.waitUntil("the new line, without the first exchange", `!document.querySelector("dialog.dialog[open]") && `+shownUser+` === "and a hotel?" && !`+replied(`You wrote: "plan a trip to Lisbon"`))
	tb.waitUntil("the deletion's mark, version 2/2", `document.querySelector(".deleted-note .branch-pos")?.textContent === "2/2"`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID, alice, ""); code != 200 || body["run"].(map[string]any)["activeBranch"] != 1.0 {
		t.Fatalf("the run after the delete = %d %v, want branch 1 active", code, body)
	}
	checkShownMatchesAPI(t, tb, s, alice, runID)
	checkAxe(t, tb, "a conversation with a deleted message")

	// "‹": back to the old line, whole, the message's versions 1/2.
	tb.click(".deleted-note .branch-prev")
	tb.waitUntil("the old line", shownUser+` === "plan a trip to Lisbon|and a hotel?" && `+replied(`You wrote: "plan a trip to Lisbon"`)+
		` && document.querySelector("article.msg-user .branch-pos")?.textContent === "1/2" && !document.querySelector(".deleted-note")`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID, alice, ""); code != 200 || body["run"].(map[string]any)["activeBranch"] != 0.0 {
		t.Fatalf("the run after switching back = %d %v, want branch 0 active", code, body)
	}
	checkShownMatchesAPI(t, tb, s, alice, runID)
	tb.checkClean()
}

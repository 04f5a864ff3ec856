package browser

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserBranches drives the Sessions UI's branches in Chromium, on
// the embedded default (the demo model echoes each message): regenerate
// on the last reply, edit on the user's message, "< 2/3 >" between the
// versions; each shows only the active line, as the API has it, in the
// tab that made the change and in another on the same conversation; and
// the conversation goes on in the line switched to.
func TestBrowserBranches(t *testing.T) {
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
	position := `(document.querySelector("article.msg-user .branch-pos")?.textContent || "")`

	runID := tb.startSession("plan a trip to Lisbon")
	tb.waitUntil("the demo model's reply", replied(`You wrote: "plan a trip to Lisbon"`))
	tb.waitUntil("the run is between turns", idle)

	// A second tab on the same conversation follows each change made in
	// the first.
	other := tb.newTab("tab 2")
	other.do(chromedp.Navigate(s.url + "/runs/" + runID))
	other.waitUntil("the conversation in the second tab", `document.querySelector(`+js(liveConnection)+`) && `+replied(`You wrote: "plan a trip to Lisbon"`))

	// Regenerate: offered on the last reply only; the page shows the new
	// line, and the reply's versions "2/2".
	if n := evaluate[int](tb, `document.querySelectorAll(".msg-regenerate").length`); n != 1 {
		t.Errorf("%d regenerate buttons, want one on the last reply", n)
	}
	tb.click("article.msg-assistant .msg-regenerate")
	tb.waitUntil("the regenerated reply, its versions 2/2 on it", `document.querySelector("article.msg-assistant .branch-pos")?.textContent === "2/2" && `+
		replied(`You wrote: "plan a trip to Lisbon"`))
	tb.waitUntil("the run is between turns", idle)
	if got := evaluate[string](tb, position); got != "" {
		t.Errorf("the regenerated message shows versions %q itself, want them on its reply", got)
	}
	if n := evaluate[int](tb, `document.querySelectorAll("article.msg").length`); n != 2 {
		t.Errorf("%d messages shown after the regenerate, want the active line's 2", n)
	}

	// Edit: the message becomes a form; the edited message and its answer
	// replace the line shown, and the message has versions, "3/3".
	tb.click("article.msg-user .msg-edit")
	tb.waitUntil("the edit form", `document.querySelector(".edit-form textarea")?.value === "plan a trip to Lisbon"`)
	evaluate[bool](tb, `(() => { document.querySelector(".edit-form textarea").value = ""; return true; })()`)
	tb.typeText(".edit-form textarea", "plan a trip to Porto")
	tb.click(".edit-form button[type=submit]")
	tb.waitUntil("the switcher reads 3/3", position+` === "3/3"`)
	checkAxe(t, tb, "a conversation with branches")
	tb.waitUntil("the edited message's reply", replied(`You wrote: "plan a trip to Porto"`))
	tb.waitUntil("the run is between turns", idle)
	if got := evaluate[string](tb, shownUser); got != "plan a trip to Porto" {
		t.Errorf("user messages shown after the edit = %q, want the edited one alone", got)
	}
	checkShownMatchesAPI(t, tb, s, alice, runID)
	other.waitUntil("the edit in the second tab", position+` === "3/3" && `+shownUser+` === "plan a trip to Porto" && `+replied(`You wrote: "plan a trip to Porto"`))
	checkShownMatchesAPI(t, other, s, alice, runID)

	// "<" twice: back to the original line, which goes on.
	tb.click("article.msg-user .branch-prev")
	tb.waitUntil("the switcher reads 2/3", position+` === "2/3"`)
	tb.waitUntil("the run is between turns", idle)
	tb.click("article.msg-user .branch-prev")
	tb.waitUntil("the switcher reads 1/3", position+` === "1/3"`)
	tb.waitUntil("the original line", shownUser+` === "plan a trip to Lisbon" && `+replied(`You wrote: "plan a trip to Lisbon"`))
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID, alice, ""); code != 200 || body["run"].(map[string]any)["activeBranch"] != 0.0 {
		t.Fatalf("the run after switching back = %d %v, want branch 0 active", code, body)
	}
	tb.waitUntil("the run is between turns", idle)
	other.waitUntil("the switch in the second tab", position+` === "1/3" && `+shownUser+` === "plan a trip to Lisbon"`)
	tb.send("and a hotel?")
	tb.waitUntil("the reply on the original line", replied(`You wrote: "and a hotel?"`))
	tb.waitUntil("the run is between turns", idle)
	if got := evaluate[string](tb, shownUser); got != "plan a trip to Lisbon|and a hotel?" {
		t.Errorf("user messages shown on the original line = %q", got)
	}
	checkShownMatchesAPI(t, tb, s, alice, runID)
	other.waitUntil("the new message in the second tab", replied(`You wrote: "and a hotel?"`))
	checkShownMatchesAPI(t, other, s, alice, runID)
	other.checkClean()

	// A reload shows the same line and versions.
	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the reload", `document.querySelector(`+js(liveConnection)+`) && `+position+` === "1/3"`)
	checkShownMatchesAPI(t, tb, s, alice, runID)
	tb.checkClean()
}

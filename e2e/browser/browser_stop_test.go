package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// more clicks the conversation's action sel, under its "More" menu.
func (tb *tab) more(sel string) {
	tb.t.Helper()
	tb.click(`.conversation-actions .more-actions > summary`)
	tb.waitUntil("the More menu", `document.querySelector(".conversation-actions .more-actions").open`)
	tb.click(`.conversation-actions .more-actions-list ` + sel)
}

// TestBrowserStopAndRetry: while the model streams a reply that does not
// end, Stop ends the turn at once — what was streamed stays, marked
// Stopped, the page says below it that the turn was stopped, the session
// takes messages — and after a reload the note and its Retry are still
// there; Retry asks again: the same message, answered anew. A model
// request retried after it streamed part of its reply shows the retry's
// text alone; a failed turn says so, after a reload too. Then Rename and
// Delete.
func TestBrowserStopAndRetry(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	carol := userToken(t, s, "carol")
	tb := startBrowser(t)
	tb.signIn(s.url, "carol")

	ms.Reply("Hello, Carol.")
	runID := tb.startSession("hello")
	tb.waitUntil("the first reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("Hello, Carol"))`)
	tb.waitBadge("Active")
	tb.waitUntil("no Stop between turns", `document.querySelector(".conversation-actions button.stop-turn").hidden`)
	checkAxe(t, tb, "a conversation")

	// A reply that streams and never ends.
	ms.ReplyPartial("Thinking about it at length")
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.send("write me a very long essay")
	tb.waitUntil("the streamed draft", `document.querySelector("article.streaming")?.textContent.includes("Thinking")`)
	if !evaluate[bool](tb, `document.querySelector("article.streaming .msg-body").inert`) {
		t.Error("the draft's rendered copy can take the focus: it is not inert")
	}
	tb.waitUntil("the Stop button", `!document.querySelector(".conversation-actions button.stop-turn").hidden`)
	tb.click(`.conversation-actions button.stop-turn`)
	tb.waitUntil("the turn stopped", `document.querySelector(".turn-note.stopped")?.textContent.startsWith("You stopped this turn.")`)
	tb.waitUntil("what was streamed, kept and marked Stopped", `[...document.querySelectorAll("article.msg-assistant:not(.streaming)")].some((e) => e.querySelector(".msg-body")?.textContent.includes("Thinking") && e.querySelector(".stopped-mark")?.textContent === "Stopped")`)
	checkAxe(t, tb, "a stopped turn")
	tb.waitBadge("Active")
	tb.waitUntil("the draft gone, Stop hidden", `!document.querySelector("article.streaming") && document.querySelector(".conversation-actions button.stop-turn").hidden`)
	// The note follows the partial reply, live and after a reload (the
	// page reads the latest turn's end from the log).
	lastTwo := `[...document.querySelectorAll(".message-list > *")].slice(-2).map((e) => e.matches(".turn-note") ? "note" : e.matches("article.msg-assistant") ? "reply" : e.className).join(",")`
	if got := evaluate[string](tb, lastTwo); got != "reply,note" {
		t.Errorf("live, the conversation ends %q, want the stopped reply then the note", got)
	}
	tb.do(chromedp.Reload())
	tb.waitUntil("the stopped turn's note and Retry after a reload", `document.querySelector(".turn-note.stopped button.turn-retry") && document.querySelector(`+js(liveConnection)+`)`)
	if got := evaluate[string](tb, lastTwo); got != "reply,note" {
		t.Errorf("after a reload, the conversation ends %q, want the stopped reply then the note", got)
	}
	code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID+"/events?after=0", carol, "")
	if code != 200 {
		t.Fatalf("events = %d %v", code, body)
	}
	var ends []string
	for _, e := range body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "agent.turn.end" {
			ends = append(ends, ev["data"].(map[string]any)["status"].(string))
		}
	}
	if fmt.Sprint(ends) != "[completed stopped]" {
		t.Errorf("turn ends = %v, want the first completed and the second stopped", ends)
	}

	// Retry: the same message, answered anew.
	ms.Reply("Here is a short essay.")
	tb.click(`.turn-note.stopped button.turn-retry`)
	tb.waitUntil("the new answer", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("Here is a short essay."))`)
	tb.waitBadge("Active")
	if n := evaluate[int](tb, `[...document.querySelectorAll("article.msg-user")].filter((e) => e.textContent.includes("write me a very long essay")).length`); n != 1 {
		t.Errorf("the page shows the retried message %d times, want once", n)
	}
	checkShownMatchesAPI(t, tb, s, carol, runID)

	// A model request that streamed part of its reply and broke off is
	// tried again: the retry's text replaces what the first attempt showed.
	tb.watchStreaming()
	ms.ReplyTruncated("Starting my answer: alpha.")
	ms.Reply("Starting my answer: alpha. And the rest.")
	tb.send("answer in two tries")
	tb.waitUntil("the retried answer", `[...document.querySelectorAll("article.msg-assistant:not(.streaming) .msg-body")].some((e) => e.textContent.includes("And the rest."))`)
	drafts := tb.streamed()
	for _, d := range drafts {
		if strings.Count(d, "alpha") > 1 {
			t.Errorf("a draft showed the first attempt's text and the retry's: %q", d)
		}
	}
	if len(drafts) == 0 {
		t.Error("no reply was streamed")
	}

	// A turn that fails says so, and offers Retry (after a reload too:
	// below, after the theme's).
	tb.waitBadge("Active")
	ms.ReplyError(400)
	tb.send("this one fails")
	tb.waitUntil("the failed turn's note", `document.querySelector(".turn-note.failed button.turn-retry")`)
	tb.waitBadge("Active")

	// Rename: the header and the sidebar follow.
	tb.more(`button.rename-run`)
	tb.waitUntil("the title field, its text selected", `document.activeElement?.matches("input.rename-input") && document.activeElement.selectionEnd - document.activeElement.selectionStart === document.activeElement.value.length`)
	tb.typeText(`input.rename-input`, "Essays, short ones")
	tb.do(pressEnter)
	tb.waitUntil("the new title", `document.querySelector("#conversation-title")?.textContent === "Essays, short ones" && !document.querySelector("input.rename-input")`)
	tb.waitUntil("the sidebar's title", `document.querySelector(".session-item[aria-current=page] .session-title")?.textContent === "Essays, short ones"`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID, carol, ""); code != 200 || body["run"].(map[string]any)["title"] != "Essays, short ones" {
		t.Errorf("GET the run = %d %v", code, body)
	}

	// Export: a Markdown file of the conversation, downloaded.
	dir := t.TempDir()
	call(tb, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir, BrowserContextID: tb.browserContext()})
	tb.more(`button.export-md`)
	var md []byte
	testenv.WaitFor(t, conditionTimeout, func() bool {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".md") {
				md, _ = os.ReadFile(filepath.Join(dir, e.Name()))
			}
		}
		return len(md) > 0
	})
	for _, want := range []string{"# Essays, short ones", "## You", "write me a very long essay", "## Usher", "Here is a short essay."} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the export lacks %q:\n%s", want, md)
		}
	}

	// The theme: light, dark, the system's again, remembered.
	background := map[string]string{"light": "rgb(246, 247, 249)", "dark": "rgb(17, 19, 23)"}
	for _, want := range []string{"light", "dark", ""} {
		tb.click(`.sidebar .theme-toggle`)
		tb.waitUntil("the theme "+want, `(document.documentElement.dataset.theme || "") === `+js(want))
		if bg, ok := background[want]; ok {
			if got := evaluate[string](tb, `getComputedStyle(document.body).backgroundColor`); got != bg {
				t.Errorf("the %s theme's page background is %s, want %s", want, got, bg)
			}
		}
	}
	tb.click(`.sidebar .theme-toggle`)
	tb.do(chromedp.Reload())
	tb.waitUntil("the theme kept after a reload", `document.documentElement.dataset.theme === "light"`)
	// "/" searches the sessions (when no field has the focus: the page
	// gives it to the composer, so leave it first).
	tb.waitUntil("the conversation after the reload", `document.querySelector(`+js(liveConnection)+`)`)
	tb.waitUntil("the failed turn's note and Retry, after the reload", `document.querySelector(".message-list > :last-child")?.matches(".turn-note.failed") && document.querySelector(".turn-note.failed button.turn-retry")`)
	if n := evaluate[int](tb, `document.querySelectorAll(".turn-note").length`); n != 1 {
		t.Errorf("after a reload, the page shows %d turn notes, want the latest turn's alone", n)
	}
	evaluate[bool](tb, `(document.activeElement.blur(), true)`)
	tb.do(chromedp.KeyEvent("/"))
	tb.waitUntil("the search field focused", `document.activeElement?.id === "session-search"`)

	// Delete, after a confirmation: gone from the sidebar and the API.
	tb.more(`button.delete-run`)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open] button[value=ok]")`)
	tb.click(`dialog.dialog[open] button[value=ok]`)
	tb.waitUntil("the home view, the session gone", `location.pathname === "/" && !document.querySelector(`+js(`.session-list a[href="/runs/`+runID+`"]`)+`)`)
	if code, _ := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runID, carol, ""); code != 404 {
		t.Errorf("GET a deleted run = %d, want 404", code)
	}
	tb.checkClean()
}

// TestBrowserActiveLimit: the home screen says, in plain words, how many
// sessions are going of how many there may be; at the limit it says so
// before anyone types, and offers to complete the oldest, after which a
// session starts.
func TestBrowserActiveLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	dave := userToken(t, s, "dave")
	var first string
	for i := 1; i <= 4; i++ {
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", dave, fmt.Sprintf(`{"title":"Session %d"}`, i))
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		if i == 1 {
			first = run["runId"].(string)
		}
	}
	tb := startBrowser(t)
	tb.signIn(s.url, "dave")
	tb.waitUntil("the count", `document.querySelector(".home-limits")?.textContent.startsWith("4 of your sessions are going; you can have up to 5 at once.")`)
	// One fetch of each list per load: the feed's first resync is it.
	testenv.WaitFor(t, conditionTimeout, func() bool { return tb.sent("GET", "/api/assistant/updates/stream") > 0 })
	time.Sleep(500 * time.Millisecond) // for a second fetch, were there one
	if runs, approvals := tb.sent("GET", "/api/assistant/runs"), tb.sent("GET", "/api/approvals"); runs != 1 || approvals != 1 {
		t.Errorf("the load fetched the sessions %d times and the approvals %d times, want once each", runs, approvals)
	}
	if code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", dave, `{"title":"Session 5"}`); code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	tb.waitUntil("the limit, before typing", `document.querySelector(".home-limits.at-limit")?.textContent.includes("You have 5 sessions going, as many as you can at once.")`)
	checkAxe(t, tb, "the home screen at the limit")
	if href := evaluate[string](tb, `document.querySelector(".home-limits.at-limit a").getAttribute("href")`); href != "/runs/"+first {
		t.Errorf("the oldest offered is %s, want %s", href, "/runs/"+first)
	}
	tb.click(`.home-limits button.complete-oldest`)
	tb.waitUntil("room for one more", `document.querySelector(".home-limits")?.textContent.startsWith("4 of your sessions are going; you can have up to 5 at once.")`)
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+first, dave, ""); code != 200 || body["run"].(map[string]any)["status"] != "Completed" {
		t.Errorf("the oldest = %d %v, want Completed", code, body)
	}
	tb.send("Hello again")
	tb.waitUntil("the new session", `/^\/runs\/[^/]+$/.test(location.pathname)`)
	tb.checkClean()
}

// TestBrowserMessageDuringTurn: a message sent while a turn runs stays
// below that turn's reply, live and after a reload (the order the model
// sees), each message with its own Copy, Edit and Delete, named for it; a
// second tab, left on the list, shows no new messages in a session the
// first tab read; after a turn the page joined late and saw none of, the
// next turn's draft is not marked as joined late; a draft typed when the session is completed elsewhere
// is kept.
func TestBrowserMessageDuringTurn(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	erin := userToken(t, s, "erin")
	tb := startBrowser(t)
	tb.signIn(s.url, "erin")

	release := ms.Hold()
	defer release()
	ms.Reply("The answer to the first.")
	ms.Reply("The answer to the second.")
	runID := tb.startSession("first question")
	ctx, cancel := context.WithTimeout(t.Context(), conditionTimeout)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.send("second question, sent meanwhile")
	tb.waitUntil("the second message", `document.querySelectorAll("article.msg-user").length === 2`)
	// A second tab, on the list, while the first reads the answers.
	other := tb.newTab("tab 2")
	other.do(chromedp.Navigate(s.url + "/apps"))
	other.waitUntil("the session in the list", `document.querySelector(`+js(`.session-list a[href="/runs/`+runID+`"]`)+`)`)
	release()
	tb.waitUntil("both answers", `document.querySelectorAll("article.msg-assistant").length === 2`)
	tb.waitBadge("Active")
	order := `[...document.querySelectorAll(".message-list > article")].map((e) => (e.querySelector(".msg-body") || {}).textContent || "").join(" | ")`
	want := "first question | The answer to the first. | second question, sent meanwhile | The answer to the second."
	if got := evaluate[string](tb, order); got != want {
		t.Errorf("live, the page shows %q, want %q", got, want)
	}
	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the reload", `document.querySelectorAll("article.msg-assistant").length === 2`)
	if got := evaluate[string](tb, order); got != want {
		t.Errorf("after a reload, the page shows %q, want %q", got, want)
	}
	// Each message's Copy is in its own footer.
	copies := `[...document.querySelectorAll(".message-list > article")].map((e) => [...e.querySelectorAll(".msg-copy")].map((b) => b.getAttribute("aria-label").split(":")[0]).join(" + ")).join(" | ")`
	if got, want := evaluate[string](tb, copies), "Copy your message | Copy the reply | Copy your message | Copy the reply"; got != want {
		t.Errorf("after a reload, the messages' Copy buttons are %q, want %q", got, want)
	}
	// Each message's buttons are named for it.
	buttons := `[...document.querySelectorAll(".message-list > article")].map((e) => [...e.querySelectorAll(".msg-meta button")].map((b) => b.getAttribute("aria-label") || b.textContent).join(" / ")).join(" | ")`
	wantButtons := "Copy your message: first question / Edit your message: first question / Delete your message: first question" +
		" | Copy the reply: The answer to the first. / Delete the reply: The answer to the first." +
		" | Copy your message: second question, sent meanwhile / Edit your message: second question, sent meanwhile / Delete your message: second question, sent meanwhile" +
		" | Copy the reply: The answer to the second. / Delete the reply: The answer to the second. / Regenerate the last reply"
	if got := evaluate[string](tb, buttons); got != wantButtons {
		t.Errorf("after a reload, the messages' buttons are\n%s\nwant\n%s", got, wantButtons)
	}
	// The other tab took in what this one read.
	other.waitUntil("no new messages in the session read", `document.querySelector(`+js(`.session-list a[href="/runs/`+runID+`"]`)+`) && !document.querySelector(`+js(`.session-list a[href="/runs/`+runID+`"] .unread-dot`)+`)`)
	other.checkClean()

	// A page loaded while a turn runs marks that turn's draft as joined
	// late ("… "); a turn that ends before the page got any of its text
	// (stopped while its model is held) leaves the next turn's draft as
	// it is.
	hold := ms.Hold()
	defer hold()
	tb.send("third question")
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tb.do(chromedp.Reload())
	tb.waitUntil("the run's live stream, the turn running", `document.querySelector(`+js(liveConnection)+`) && document.querySelector(".conversation").classList.contains("busy")`)
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+runID+"/stop", erin, ""); code != 200 {
		t.Fatalf("stop = %d %v", code, body)
	}
	tb.waitUntil("the turn stopped", `document.querySelector(".turn-note.stopped") && !document.querySelector(".conversation").classList.contains("busy")`)
	hold()
	ms.Reply("The answer to the fourth.")
	tb.watchStreaming()
	tb.send("fourth question")
	tb.waitUntil("the fourth answer", `[...document.querySelectorAll("article.msg-assistant:not(.streaming) .msg-body")].some((e) => e.textContent.includes("The answer to the fourth."))`)
	for _, d := range evaluate[[]string](tb, `(window.__drafts || []).map((n) => n.querySelector(".msg-body").textContent)`) {
		if strings.HasPrefix(d, "…") {
			t.Errorf("the next turn's draft is marked as joined late: %q", d)
		}
	}

	// A draft, and the session completed elsewhere: the draft stays.
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.typeText(composerInput, "a thought I had not sent")
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+runID+"/complete", erin, ""); code != 200 {
		t.Fatalf("complete = %d %v", code, body)
	}
	tb.waitUntil("the kept draft", `document.querySelector(".kept-draft-text")?.value === "a thought I had not sent" && document.querySelector(".read-only")`)
	tb.checkClean()
}

// TestBrowserUnsentMessage: a draft survives a reload; a message whose
// answer never reached the page (the connection dropped after Usher
// stored it) is sent again when the browser is back online — with its
// Idempotency-Key, so that it is stored exactly once.
func TestBrowserUnsentMessage(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	frank := userToken(t, s, "frank")
	tb := startBrowser(t)
	tb.signIn(s.url, "frank")
	ms.Reply("Hello, Frank.")
	runID := tb.startSession("hello")
	tb.waitUntil("the first reply", `document.querySelectorAll("article.msg-assistant").length === 1`)
	tb.waitBadge("Active")

	// A draft, kept across a reload.
	tb.typeText(composerInput, "a thought for later")
	tb.do(chromedp.Reload())
	tb.waitUntil("the draft after the reload", `document.querySelector(`+js(composerInput)+`)?.value === "a thought for later"`)
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.do(pressEnter)
	tb.waitUntil("the draft sent", `document.querySelectorAll("article.msg-user").length === 2`)
	tb.waitUntil("the box empty", `document.querySelector(`+js(composerInput)+`).value === ""`)
	tb.waitUntil("its reply", `document.querySelectorAll("article.msg-assistant").length === 2`)
	tb.waitBadge("Active")

	// The answer to a send is lost: Usher stored the message, the page
	// never heard.
	pausedCtx, cancelPaused := context.WithTimeout(tb.ctx, conditionTimeout)
	defer cancelPaused()
	paused := chromedp.Events(pausedCtx, fetch.RequestPaused)
	call(tb, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/api/assistant/runs/*/messages", RequestStage: fetch.RequestStageResponse},
	}})
	tb.trySend("sent exactly once")
	var held fetch.EventRequestPaused
	for ev, err := range paused {
		if err != nil {
			t.Fatalf("waiting for the send: %v", err)
		}
		held = ev
		break
	}
	tb.expectLog("ERR_INTERNET_DISCONNECTED")
	call(tb, fetch.FailRequest, fetch.FailRequestParams{RequestID: held.RequestID, ErrorReason: network.ErrorReasonInternetDisconnected})
	call(tb, fetch.Disable, cdp.Empty{})
	tb.waitUntil("the message kept, said not sent", `document.querySelector(".composer .form-error")?.textContent.startsWith("Not sent") && document.querySelector(`+js(composerInput)+`).value.trim() === "sent exactly once"`)

	// Offline, then back: it goes again, and is stored once.
	call(tb, network.OverrideNetworkState, network.OverrideNetworkStateParams{Offline: true, DownloadThroughput: -1, UploadThroughput: -1})
	tb.waitUntil("the banner saying the browser is offline", `!document.querySelector(".offline-banner").hidden && document.querySelector(".offline-banner .offline-text").textContent.startsWith("You are offline.")`)
	call(tb, network.OverrideNetworkState, network.OverrideNetworkStateParams{Offline: false, DownloadThroughput: -1, UploadThroughput: -1})
	tb.waitUntil("the message sent on reconnecting", `document.querySelector(`+js(composerInput)+`).value === "" && !document.querySelector(".composer .form-error").textContent`)
	tb.waitUntil("its reply", `document.querySelectorAll("article.msg-assistant").length === 3`)
	n := 0
	for _, m := range apiMessages(t, s, frank, runID) {
		if d, _ := m["data"].(map[string]any); m["type"] == "message.user" && d["content"] == "sent exactly once" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the run holds the message %d times, want once", n)
	}
	if got := evaluate[int](tb, `[...document.querySelectorAll("article.msg-user")].filter((e) => e.textContent.includes("sent exactly once")).length`); got != 1 {
		t.Errorf("the page shows it %d times, want once", got)
	}
	tb.checkClean()
}

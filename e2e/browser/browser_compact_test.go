package browser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserLongConversation walks a long conversation in the embedded
// default (the demo model, a small context limit) as a person would: the
// header shows the context's use; the run compacts by itself, the page
// marks where the model's summary stands in and still shows every message;
// "Continue in a new session" opens a session that starts from a summary,
// where the conversation goes on, and the first one is completed and links
// to it.
func TestBrowserLongConversation(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_MODEL_CONTEXT_TOKENS": "2500"})
	alice := userToken(t, s, "alice")
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"Trip planning","metadata":{"compactRecentMessages":4}}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	runID := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + runID
	say := func(i int) string {
		return fmt.Sprintf("Note %d for the trip: ", i) + strings.Repeat("we want quiet hotels near the old town, trains over flights, ", 6)
	}
	for i := 1; i <= 3; i++ {
		if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, fmt.Sprintf(`{"content":%s}`, js(say(i)))); code != 200 {
			t.Fatalf("turn %d = %d %v", i, code, body)
		}
	}

	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.do(chromedp.Navigate(s.url + "/runs/" + runID))
	tb.waitUntil("the conversation", `document.querySelectorAll("article.msg-user").length === 3`)
	tb.waitUntil("the context use in the header", `/^context: \d+% of 2\.5k$/.test(document.querySelector(".conversation-title .context-use")?.textContent || "")`)

	// Turn after turn in the page, until the run compacts by itself. The
	// notes are pasted: typed, each takes seconds on a busy machine.
	mark := `document.querySelector(".message-list > .context-note")`
	for i := 4; i <= 20 && !evaluate[bool](tb, `Boolean(`+mark+`)`); i++ {
		tb.sendPasted(say(i))
		tb.waitUntil(fmt.Sprintf("the reply to note %d", i), fmt.Sprintf(`document.querySelectorAll("article.msg-assistant").length === %d`, i))
		tb.waitBadge("Active")
	}
	tb.waitUntil("the mark where the summary stands in", mark+`?.textContent.includes("summarised for the model")`)
	checkAxe(t, tb, "a compacted conversation")
	code, body := apitest.Call(t, "GET", base, alice, "")
	snap, _ := body["snapshot"].(map[string]any)
	t.Logf("compacted after %v messages: snapshot %v covers to %v; context %v", body["messages"], snap["version"], snap["toSeq"], body["run"].(map[string]any)["context"])
	if code != 200 || snap == nil || snap["kind"] != "automatic" {
		t.Fatalf("GET the run = %d %v, want an automatic snapshot", code, body)
	}
	// The mark follows the last message the snapshot covers.
	if got := evaluate[float64](tb, `Number(`+mark+`.previousElementSibling.dataset.seq)`); got != snap["toSeq"].(float64) {
		t.Errorf("the mark follows message %v, the snapshot covers up to %v", got, snap["toSeq"])
	}
	// Every message is still on the page, as the API has it.
	checkShownMatchesAPI(t, tb, s, alice, runID)

	// Continue in a new session: it starts from a summary.
	tb.more(`button.continue-run`)
	tb.waitUntil("the confirmation", `document.querySelector("dialog.dialog[open] button[value=ok]")`)
	tb.click(`dialog.dialog[open] button[value=ok]`)
	tb.waitUntil("the new session", `location.pathname !== `+js("/runs/"+runID)+` && document.querySelector("article.msg-summary")`)
	child := tb.runID()
	tb.waitUntil("the summary's link to the first session", `document.querySelector("article.msg-summary a")?.getAttribute("href") === `+js("/runs/"+runID))
	checkAxe(t, tb, "a continued session")
	tb.send("What is still open?")
	tb.waitUntil("the reply in the new session", `document.querySelectorAll("article.msg-assistant").length === 1`)
	tb.waitBadge("Active")

	// The first session: completed, whole, linking to the new one.
	code, body = apitest.Call(t, "GET", base, alice, "")
	if r := body["run"].(map[string]any); code != 200 || r["status"] != "Completed" || fmt.Sprint(body["continuedIn"]) != "["+child+"]" {
		t.Errorf("the first session = %d %v", code, body)
	}
	tb.click(`article.msg-summary a`)
	tb.waitUntil("the first session's link to the new one", `document.querySelector(".composer-area .context-note.continued a")?.getAttribute("href") === `+js("/runs/"+child))
	checkShownMatchesAPI(t, tb, s, alice, runID)

	// The sidebar's search finds a session by words of its messages,
	// with a snippet; the groups by date give way to the results.
	tb.waitUntil("the sidebar's date group", `document.querySelector(".session-list .session-group")?.textContent === "Today"`)
	tb.typeText("#session-search", "quiet hotels")
	tb.waitUntil("the search result", `document.querySelectorAll(".session-list .session-item").length === 1 && !document.querySelector(".session-list .session-group")`)
	if href := evaluate[string](tb, `document.querySelector(".session-list .session-item").getAttribute("href")`); href != "/runs/"+runID {
		t.Errorf("the search found %s, want the first session", href)
	}
	if sn := tb.text(".session-list .session-item .session-preview.snippet"); !strings.Contains(sn, "quiet hotels") {
		t.Errorf("the result's snippet = %q", sn)
	}
	tb.checkClean()
}

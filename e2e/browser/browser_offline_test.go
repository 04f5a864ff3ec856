package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/testenv"
)

// TestBrowserServerDown: Usher stops under an open conversation. The page
// says so plainly — also once its stream gave up and it polls, as long as
// the polls do not get through — and keeps a message typed meanwhile;
// when Usher is back, the message goes, once.
func TestBrowserServerDown(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	addr := testenv.FreeAddr(t)
	dataDir := t.TempDir()
	env := ms.UsherEnv()
	s1 := startServerIn(t, dataDir, env, "--addr", addr)
	gail := userToken(t, s1, "gail")
	tb := startBrowser(t)
	tb.signIn(s1.url, "gail")
	ms.Reply("Hello, Gail.")
	runID := tb.startSession("hello")
	tb.waitUntil("the first reply", `document.querySelectorAll("article.msg-assistant").length === 1`)
	tb.waitBadge("Active")
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)

	tb.expectLog("ERR_CONNECTION_REFUSED")
	tb.expectLog("ERR_EMPTY_RESPONSE")
	tb.expectLog("ERR_CONNECTION_RESET")
	tb.expectLog("Failed to load resource")
	if err := s1.shutdown(); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, s1.stderr)
	}
	banner := `document.querySelector(".offline-banner") && !document.querySelector(".offline-banner").hidden`
	tb.waitUntil("the offline banner", banner)
	// The browser is online: it is Usher that does not answer.
	if got := tb.text(".offline-banner .offline-text"); !strings.HasPrefix(got, "Usher cannot be reached.") {
		t.Errorf("the offline banner says %q, want it to say that Usher cannot be reached", got)
	}
	tb.trySend("sent while Usher was down")
	tb.waitUntil("the message kept, said not sent", `document.querySelector(".composer .form-error")?.textContent.startsWith("Not sent") && document.querySelector(`+js(composerInput)+`).value.trim() === "sent while Usher was down"`)
	// The stream gives up and the page polls: still out of reach, it says
	// so.
	events := "/api/assistant/runs/" + runID + "/events"
	testenv.WaitFor(t, 2*conditionTimeout, func() bool { return tb.sent("GET", events) > 0 })
	tb.waitUntil("a poll refused", `performance.getEntriesByType("resource").some((e) => new URL(e.name).pathname === `+js(events)+` && e.responseEnd > 0)`)
	if !evaluate[bool](tb, banner) || tb.text(`.conversation-title .connection`) != "Reconnecting…" {
		t.Errorf("polling an Usher out of reach: banner shown %v, connection %q", evaluate[bool](tb, banner), tb.text(`.conversation-title .connection`))
	}
	// The polls back off (1, 2, 4 s … up to 30 s apart). Once three have
	// failed the next is 4 s away, unless the person asks to try now.
	testenv.WaitFor(t, 2*conditionTimeout, func() bool { return tb.sent("GET", events) >= 3 })
	polls := tb.sent("GET", events)
	tb.click(".offline-banner .offline-retry")
	testenv.WaitFor(t, 2500*time.Millisecond, func() bool { return tb.sent("GET", events) > polls })

	ms.Reply("Welcome back.")
	s2 := startServerIn(t, dataDir, env, "--addr", addr)
	// The browser says it is back online (here, with the event it would
	// fire): the next poll goes now, not after the backoff (8 s or more by
	// now), and gets through.
	sentBack := `document.querySelector(` + js(composerInput) + `).value === "" && [...document.querySelectorAll("article.msg-user .msg-body")].some((e) => e.textContent === "sent while Usher was down")`
	polls = tb.sent("GET", events)
	evaluate[bool](tb, `window.dispatchEvent(new Event("online"))`)
	testenv.WaitFor(t, 2500*time.Millisecond, func() bool { return tb.sent("GET", events) > polls })
	testenv.WaitFor(t, conditionTimeout, func() bool { return evaluate[bool](tb, sentBack) })
	tb.waitUntil("the banner gone", `document.querySelector(".offline-banner").hidden`)
	tb.waitUntil("its reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Welcome back.")`)
	n := 0
	for _, m := range apiMessages(t, s2, gail, runID) {
		if d, _ := m["data"].(map[string]any); m["type"] == "message.user" && d["content"] == "sent while Usher was down" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the run holds the message %d times, want once", n)
	}
	tb.checkClean()
}

package browser

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/assistant/model/modeltest"
)

// TestBrowserModelPicker: with two models offered, the picker by the
// message box chooses the model of a new session, and changes it for the
// session's later turns; the model server sees each name. The choice is
// the run's, shown again after a reload.
func TestBrowserModelPicker(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv("USHER_MODEL_MODELS", "scripted,scripted-large"))
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	picker := `#main .composer .model-picker select`
	tb.waitUntil("the picker", `document.querySelector(`+js(picker)+`)?.options.length === 2`)
	if got := evaluate[string](tb, `[...document.querySelector(`+js(picker)+`).options].map((o) => o.textContent).join(", ") + " / " + document.querySelector(`+js(picker)+`).value`); got != "scripted (default), scripted-large / scripted" {
		t.Errorf("the picker offers %q", got)
	}
	checkAxe(t, tb, "the new-session view with the model picker")
	lastModel := func() string {
		reqs := ms.Requests()
		if len(reqs) == 0 {
			return ""
		}
		return reqs[len(reqs)-1].Model
	}

	choose := func(name string) {
		t.Helper()
		evaluate[bool](tb, `(() => { const s = document.querySelector(`+js(picker)+`); s.value = `+js(name)+`; return s.dispatchEvent(new Event("change")); })()`)
	}

	// A new session on the larger model.
	choose("scripted-large")
	ms.Reply("Large hello.")
	tb.startSession("hello")
	tb.waitUntil("the reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Large hello.")`)
	if got := lastModel(); got != "scripted-large" {
		t.Errorf("the first turn asked for %q, want scripted-large", got)
	}
	tb.waitBadge("Active")
	tb.waitUntil("the session's picker on its model", `document.querySelector(`+js(picker)+`)?.value === "scripted-large"`)

	// Changed for the next turn.
	choose("scripted")
	tb.waitUntil("the change recorded", `!document.querySelector(`+js(picker)+`).disabled && document.querySelector("#announcer").textContent === "Model: scripted."`)
	ms.Reply("Small hello.")
	tb.send("again")
	tb.waitUntil("the second reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Small hello.")`)
	if got := lastModel(); got != "scripted" {
		t.Errorf("the turn after the change asked for %q, want scripted", got)
	}
	tb.waitBadge("Active")
	tb.do(chromedp.Reload())
	tb.waitUntil("the picker after a reload", `document.querySelector(`+js(picker)+`)?.value === "scripted"`)
	checkAxe(t, tb, "a conversation with the model picker")
	tb.checkClean()
}

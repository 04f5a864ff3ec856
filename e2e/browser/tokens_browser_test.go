package browser

import (
	"testing"
)

// TestBrowserDailyTokenLimit: with a daily token limit that one turn of
// the demo model uses up, the person's first message is answered; then
// the message box says the day's tokens are used and when more come,
// a second message is refused with that reason and stays in the box,
// and Settings tells today's count against the limit.
func TestBrowserDailyTokenLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ASSISTANT_DAILY_TOKENS": "40"})
	tb := startBrowser(t)
	tb.signIn(s.url, "hana")
	tb.waitUntil("the home screen", `document.querySelector("#home-title") && !document.querySelector(".skeleton")`)
	if hidden := evaluate[bool](tb, `document.querySelector(".composer .usage-note").hidden`); !hidden {
		t.Error("the usage note shows before any token was used")
	}
	tb.send("Hello there")
	tb.waitUntil("the reply", `document.querySelectorAll(".msg-assistant").length === 1`)
	tb.waitUntil("the note at the limit", `document.querySelector(".composer .usage-note.at-limit:not([hidden])")?.textContent.startsWith("You have used today’s 40 model tokens, your daily limit. Usher can ask the model again after 00:00 UTC, in ")`)
	checkAxe(t, tb, "the conversation at the daily token limit")

	tb.expectLog("429")
	tb.trySend("One more question")
	tb.waitUntil("the refusal", `document.querySelector(".composer .form-error")?.textContent.startsWith("You cannot ask the assistant more today: you have used today's 40 model tokens, your daily limit.")`)
	if kept := evaluate[string](tb, `document.querySelector(`+js(composerInput)+`).value`); kept != "One more question" {
		t.Errorf("the message box holds %q after the refusal, want the message kept", kept)
	}
	if n := evaluate[int](tb, `document.querySelectorAll(".msg-user").length`); n != 1 {
		t.Errorf("%d user messages on the page, want the first alone", n)
	}

	tb.click(`.sidebar .open-settings`)
	tb.waitUntil("today's count in Settings", `/^You have used today’s 40 model tokens, your daily limit\./.test(document.querySelector("dialog.settings-dialog[open] .settings-usage")?.textContent ?? "")`)
	tb.checkClean()
}

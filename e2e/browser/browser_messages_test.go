package browser

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserMessages: a reply with a code block is highlighted (the
// highlighter loaded only then, and only its language), labelled, and
// copied by its Copy button — to the real clipboard, granted to the page —
// as is the reply's Markdown; a tool's JSON result shows indented, folded
// when long. An approval is brought into view when it arrives, at
// 1280×800 and at 390×844 (also after a reload), shows its arguments once
// and "Waiting for your decision" rather than the text meant for the
// model; approved from the keyboard, the focus stays on the card, folded
// to its outcome. The inbox lists the decisions, to this person only.
func TestBrowserMessages(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	tb := startBrowser(t)
	tb.do(chromedp.EmulateViewport(1280, 800))
	// Sessions for sessions_list to list: a long JSON result.
	for _, title := range []string{"Quarterly report", "Team offsite"} {
		if code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", userToken(t, s, "erin"), fmt.Sprintf(`{"title":%s}`, js(title))); code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
	}
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		call(tb, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: s.url,
			BrowserContextID: tb.browserContext(),
		})
	}
	tb.signIn(s.url, "erin")
	vendored := `performance.getEntriesByType("resource").map((e) => new URL(e.name).pathname).filter((p) => p.includes("/vendor/")).sort().join(" ")`
	// The highlighter comes from under the build's prefix, as every asset
	// the page loads (cached for good).
	build := evaluate[string](tb, `new URL(document.querySelector('script[type="module"]').src).pathname.replace(/js\/app\.js$/, "")`)
	if !strings.HasPrefix(build, "/static/v/") {
		t.Fatalf("the page's script is at %s, want it under the build's prefix", build)
	}

	// A reply with code: highlighted, labelled, copied.
	const code = "func main() {\n\tfmt.Println(\"<b>hi</b>\") // greet\n}"
	const page = `<p onclick="alert(1)">hi</p><script>alert(2)</script>`
	reply := "Here it is:\n\n```go\n" + code + "\n```\n\nAnd a page:\n\n```html\n" + page + "\n```\n\nRun it with `go run`."
	ms.Reply("Hello.")
	tb.waitUntil("the new-session view", `document.querySelector("#home-title")`)
	tb.send("hello")
	tb.waitUntil("the first reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Hello.")`)
	if got := evaluate[string](tb, vendored); got != "" {
		t.Errorf("the highlighter was loaded before any code block: %s", got)
	}
	ms.Reply(reply)
	tb.send("show me a Go program")
	block := `article.msg-assistant .code-block`
	tb.waitUntil("the highlighted code", `document.querySelector(`+js(block+` code.hljs .hljs-keyword`)+`)`)
	tb.waitUntil("the highlighted page", `document.querySelectorAll(`+js(block+` code.hljs .hljs-tag`)+`).length > 0`)
	if got := evaluate[string](tb, vendored); got != build+"vendor/highlight/core.min.js "+build+"vendor/highlight/languages/go.min.js "+build+"vendor/highlight/languages/xml.min.js" {
		t.Errorf("loaded for a Go and an HTML block: %q, want the core, Go and XML alone", got)
	}
	if got := evaluate[string](tb, `(() => { const b = document.querySelectorAll(`+js(block)+`)[1]; return getComputedStyle(b.querySelector(".code-lang"), "::before").content + " " + b.querySelector("code").textContent; })()`); got != `"HTML" `+page {
		t.Errorf("the HTML block shows %s", got)
	}
	checkNoMarkupFrom(t, tb)
	type codeView struct {
		Text, Label, Keywords, Button, ButtonName, Strings string
		BodyHasMarkup                                      bool
	}
	v := evaluate[codeView](tb, `(() => {
		const b = document.querySelector(`+js(block)+`);
		const btn = b.querySelector("button.code-copy");
		return {
			Text: b.textContent,
			Label: getComputedStyle(b.querySelector(".code-lang"), "::before").content,
			Keywords: [...b.querySelectorAll(".hljs-keyword")].map((e) => e.textContent).join(","),
			Strings: [...b.querySelectorAll(".hljs-string")].map((e) => e.textContent).join(","),
			Button: getComputedStyle(btn, "::before").content,
			ButtonName: btn.getAttribute("aria-label"),
			BodyHasMarkup: Boolean(b.querySelector("b, script, img")),
		};
	})()`)
	if v.Text != code {
		t.Errorf("the code block's text = %q, want the code alone %q", v.Text, code)
	}
	if v.Label != `"Go"` || v.Button != `"Copy"` || v.ButtonName != "Copy code (Go)" {
		t.Errorf("the code block's label %s, button %s named %q", v.Label, v.Button, v.ButtonName)
	}
	if v.Keywords != "func" || v.Strings != `"<b>hi</b>"` || v.BodyHasMarkup {
		t.Errorf("highlighted keywords %q, strings %q, markup from the code: %v", v.Keywords, v.Strings, v.BodyHasMarkup)
	}
	evaluate[bool](tb, `navigator.clipboard.writeText("before").then(() => true)`)
	// With the keyboard: the button is reachable and works with Enter.
	evaluate[bool](tb, `(document.querySelector(`+js(block+` button.code-copy`)+`).focus(), true)`)
	tb.do(pressEnter)
	tb.waitUntil("the code on the clipboard", `navigator.clipboard.readText().then((t) => t === `+js(code)+`)`)
	tb.waitUntil("Copied, shown and announced", `getComputedStyle(document.querySelector(`+js(block+` button.code-copy`)+`), "::before").content === '"Copied"' && document.querySelector("#announcer").textContent === "Copied"`)
	// The reply's Copy: its Markdown source.
	replyCopy := `article.msg-assistant:has(.code-block) .msg-meta button.msg-copy`
	tb.click(replyCopy)
	tb.waitUntil("Copied on the reply's button", `document.querySelector(`+js(replyCopy)+`).textContent === "Copied"`)
	tb.waitUntil("the reply's Markdown on the clipboard", `navigator.clipboard.readText().then((t) => t === `+js(reply)+`)`)
	// And one of the person's own messages.
	tb.click(`article.msg-user .msg-meta button.msg-copy`)
	tb.waitUntil("the message on the clipboard", `navigator.clipboard.readText().then((t) => t === "hello")`)

	// A tool's JSON result: indented, exact, folded when long.
	ms.ReplyToolCalls(model.ToolCall{ID: "call-sessions", Name: "sessions_list", Arguments: json.RawMessage(`{}`)})
	ms.Reply("You have three sessions.")
	tb.send("list my sessions")
	result := `.tool-card[data-call="call-sessions"][data-status=succeeded] .tool-result`
	tb.waitUntil("the tool's result", `document.querySelector(`+js(result+` pre.result-json code.hljs`)+`)`)
	type resultView struct {
		Text     string
		Folded   bool
		Toggle   string
		Expanded string
	}
	rv := evaluate[resultView](tb, `(() => {
		const r = document.querySelector(`+js(result)+`);
		const b = r.querySelector("button.result-toggle");
		return { Text: r.querySelector("pre").textContent, Folded: r.querySelector("pre").classList.contains("folded"), Toggle: b ? b.textContent : "", Expanded: b ? b.getAttribute("aria-expanded") : "" };
	})()`)
	if !strings.HasPrefix(rv.Text, "{\n  \"sessions\": [\n    {\n      \"id\": ") || strings.Contains(rv.Text, `\"`) || !strings.Contains(rv.Text, `"title": "Quarterly report"`) {
		t.Errorf("the JSON result shows %q, want it indented, its strings unescaped", rv.Text)
	}
	if !rv.Folded || !strings.HasPrefix(rv.Toggle, "Show all ") || rv.Expanded != "false" {
		t.Errorf("a long result: folded %v, toggle %q (aria-expanded %s)", rv.Folded, rv.Toggle, rv.Expanded)
	}
	tb.click(`.tool-card[data-call="call-sessions"] > summary`)
	tb.click(result + " button.result-toggle")
	tb.waitUntil("the whole result", `!document.querySelector(`+js(result+" pre")+`).classList.contains("folded") && document.querySelector(`+js(result+" button.result-toggle")+`).getAttribute("aria-expanded") === "true"`)
	tb.waitBadge("Active")

	// An approval, at 1280×800: in view when it arrives, its arguments
	// once, no text meant for the model.
	const pending = `.tool-card[data-status=approval_pending] .approval-card.is-pending`
	approve := pending + ` button[value=approve]`
	inView := func(what string) {
		t.Helper()
		tb.waitUntil(what+": Approve in view", `(() => {
			const b = document.querySelector(`+js(approve)+`);
			if (!b) return false;
			const r = b.getBoundingClientRect(), s = document.querySelector(".messages").getBoundingClientRect();
			return r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth && r.top >= s.top && r.bottom <= s.bottom;
		})()`)
	}
	write := func(id, name string) {
		t.Helper()
		ms.ReplyToolCalls(model.ToolCall{ID: id, Name: "notes_write", Arguments: json.RawMessage(`{"name":` + js(name) + `,"body":"milk, eggs"}`)})
	}
	write("call-write-1", "groceries")
	tb.send("remember my groceries")
	inView("1280×800")
	type approvalView struct {
		ArgsShown int
		Waiting   string
		Result    string
	}
	checkOnce := func(size string) {
		t.Helper()
		av := evaluate[approvalView](tb, `(() => {
			const card = document.querySelector(".tool-card[data-status=approval_pending]");
			const shown = [...card.querySelectorAll("pre")].filter((p) => p.offsetParent !== null && p.textContent.includes("milk, eggs"));
			return { ArgsShown: shown.length, Waiting: card.querySelector(".tool-result").textContent, Result: card.textContent };
		})()`)
		if av.ArgsShown != 1 {
			t.Errorf("%s: the arguments are shown %d times, want once (the approval's)", size, av.ArgsShown)
		}
		if av.Waiting != "Waiting for your decision." || strings.Contains(av.Result, "retry exactly") || strings.Contains(av.Result, "ask the user") {
			t.Errorf("%s: the pending result shows %q", size, av.Waiting)
		}
	}
	checkOnce("1280×800")
	if args := tb.text(pending + " pre.arguments"); squash(args) != squash(`{"body": "milk, eggs", "name": "groceries"}`) {
		t.Errorf("the approval's arguments = %q", args)
	}
	// Approved from the keyboard: the focus stays on the card, folded to
	// its outcome, while the call runs and the turn ends.
	ms.Reply("Saved your groceries.")
	evaluate[bool](tb, `(document.querySelector(`+js(approve)+`).focus(), true)`)
	tb.do(pressEnter)
	tb.waitUntil("the reply after the approval", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Saved your groceries.")`)
	tb.waitUntil("the approval approved and used", `document.querySelector('.tool-card[data-call="call-write-1"] .approval-card .approval-head .badge')?.textContent === "Approved and used"`)
	tb.waitBadge("Active")
	type decided struct {
		Focus, Active string
		Folded        bool
		Open          bool
		Args          bool
	}
	d := evaluate[decided](tb, `(() => {
		const card = document.querySelector('.tool-card[data-call="call-write-1"] .approval-card');
		return {
			Focus: document.activeElement.closest(".approval-card")?.dataset.approval || "",
			Active: card.dataset.approval,
			Folded: card.classList.contains("is-decided"),
			Open: card.querySelector("details.approval-more").open,
			Args: !document.querySelector('.tool-card[data-call="call-write-1"] .tool-args').hidden,
		};
	})()`)
	if d.Focus == "" || d.Focus != d.Active {
		t.Errorf("after approving, the focus is on %q (in approval card %q), want the decided card %q", evaluate[string](tb, `document.activeElement.outerHTML.slice(0, 120)`), d.Focus, d.Active)
	}
	if !d.Folded || d.Open || !d.Args {
		t.Errorf("the decided card: folded %v, details open %v; the tool card's arguments back: %v", d.Folded, d.Open, d.Args)
	}

	// At 390×844: in view when it arrives, and after a reload; denied.
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	tb.waitUntil("the phone's width", `innerWidth === 390`)
	write("call-write-2", "chores")
	tb.send("and my chores")
	inView("390×844")
	checkOnce("390×844")
	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the reload", `document.querySelector(`+js(liveConnection)+`)`)
	inView("390×844, after a reload")
	checkOnce("390×844, after a reload")
	ms.Reply("I did not save your chores.")
	tb.click(pending + ` button[value=deny]`)
	tb.waitUntil("the denial", `document.querySelector('.tool-card[data-call="call-write-2"] .approval-card.is-decided .approval-head .badge')?.textContent === "Denied"`)
	tb.waitUntil("the reply after the denial", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "I did not save your chores.")`)
	tb.waitBadge("Active")
	tb.do(chromedp.EmulateViewport(1280, 800))

	// A third, decided in the inbox: it moves to Recent decisions, with
	// the focus; the two before are there too, newest first.
	write("call-write-3", "errands")
	ms.Reply("Saved your errands.")
	tb.send("and my errands")
	tb.waitUntil("the third approval", `document.querySelector(`+js(approve)+`)`)
	tb.click(`a.inbox-link`)
	tb.waitUntil("the inbox", `document.querySelector("#inbox-title") && document.querySelector(".inbox .approval-card.is-pending button[value=approve]")`)
	checkAxe(t, tb, "the approvals inbox")
	tb.waitUntil("its history", `document.querySelectorAll(".approval-history .approval-card").length === 2`)
	tb.click(`.inbox .approval-card.is-pending button[value=approve]`)
	tb.waitUntil("three decisions in the history", `document.querySelectorAll(".approval-history .approval-card.is-decided").length === 3`)
	tb.waitUntil("nothing waiting", `document.querySelector(".inbox .empty-state")?.textContent === "Nothing is waiting for you."`)
	tb.waitUntil("the focus on the decided card", `document.activeElement.matches(".approval-history .approval-card .approval-title")`)
	history := evaluate[[]string](tb, `[...document.querySelectorAll(".approval-history .approval-card")].map((c) => c.querySelector(".approval-head .badge").textContent + " " + c.querySelector("pre.arguments").textContent.match(/"name": "(\w+)"/)[1])`)
	if got := strings.Join(history, ", "); !strings.HasPrefix(got, "Approved errands, Denied chores, Approved and used groceries") &&
		!strings.HasPrefix(got, "Approved and used errands, Denied chores, Approved and used groceries") {
		t.Errorf("the inbox's history = %q", got)
	}

	// The page of one decided approval (the link an MCP client is given)
	// shows it with its details unfolded.
	decidedID := evaluate[string](tb, `document.querySelector(".approval-history .approval-card").dataset.approval`)
	tb.do(chromedp.Navigate(s.url + "/approvals/" + decidedID))
	tb.waitUntil("the approval's page", `document.querySelector(".approval-card.is-decided details.approval-more[open] pre.arguments")?.textContent.includes("errands")`)

	// The history is this person's: another, signed in to the same
	// browser, has none.
	tb.click(".topbar .user button")
	tb.waitUntil("signed out", `document.querySelector("main.signin a.button.primary")`)
	tb.signIn(s.url, "frank")
	tb.click(`a.inbox-link`)
	tb.waitUntil("frank's inbox", `document.querySelector(".inbox .empty-state")?.textContent === "Nothing is waiting for you." && document.querySelector(".approval-history .empty-state")?.textContent === "No decisions yet."`)
	tb.checkClean()
}

package browser

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// Selectors of the pinned approval bar.
const (
	approvalBar        = `.conversation .approval-bar`
	approvalBarOpen    = approvalBar + ` button.approval-bar-open`
	approvalBarApprove = approvalBar + ` button.approval-bar-approve`
	approvalBarDeny    = approvalBar + ` button.approval-bar-deny`
)

// barShown is a condition: the approval bar is shown, every one of its
// buttons inside the viewport, and so is the message box.
const barShown = `(() => {
	const bar = document.querySelector(` + "`" + approvalBar + "`" + `);
	if (!bar || bar.hidden) return false;
	const inside = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth; };
	const buttons = [...bar.querySelectorAll(".approval-bar-actions button:not([hidden])")];
	return buttons.length === 3 && buttons.every(inside) && inside(document.querySelector("#main .composer textarea"));
})()`

// scrollToTop scrolls the messages to the conversation's start.
func (tb *tab) scrollToTop() {
	tb.t.Helper()
	evaluate[bool](tb, `(document.querySelector(".messages").scrollTop = 0, true)`)
}

// TestBrowserApprovalBar: while an approval of the conversation waits and
// its card's Approve and Deny are out of view, a bar pinned above the
// message box names the call and offers Approve, Deny and Open, inside
// the viewport at 1280×800 and 390×844, light and dark, with no serious
// axe finding. Open brings the card into view with the focus; Approve
// from the bar decides that approval, once; with two waiting, the bar
// shows the first and the count, its Deny sends the reason typed in the
// card, and the focus goes to the decided card.
func TestBrowserApprovalBar(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	dana := userToken(t, s, "dana")
	tb := startBrowser(t)
	tb.signIn(s.url, "dana")

	// A long answer, then a call that waits for a decision below it.
	var long strings.Builder
	for i := range 30 {
		fmt.Fprintf(&long, "Paragraph %d: notes are kept per person, newest first, and each has a name and a body.\n\n", i+1)
	}
	ms.Reply(long.String())
	runID := tb.startSession("tell me about notes")
	tb.waitUntil("the long answer", `document.querySelector("article.msg-assistant .msg-body")?.textContent.includes("Paragraph 30")`)
	tb.waitBadge("Active")
	ms.ReplyToolCalls(model.ToolCall{ID: "call-bar-1", Name: "notes_write", Arguments: json.RawMessage(`{"name":"groceries","body":"milk, eggs"}`)})
	tb.send("save my groceries")
	pending := `.tool-card[data-call="call-bar-1"] .approval-card.is-pending`
	tb.waitUntil("the approval's Approve in view", `(() => {
		const b = document.querySelector(`+js(pending+` button[value=approve]`)+`);
		if (!b) return false;
		const r = b.getBoundingClientRect(), s = document.querySelector(".messages").getBoundingClientRect();
		return r.top >= s.top && r.bottom <= s.bottom;
	})()`)
	tb.waitBadge("Awaiting approval")
	// Its card's buttons in view: no bar.
	evaluate[bool](tb, `new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))))`)
	if !evaluate[bool](tb, `document.querySelector(`+js(approvalBar)+`).hidden`) {
		t.Errorf("the approval bar shows while the card's Approve and Deny are in view")
	}
	approvalID := evaluate[string](tb, `document.querySelector(`+js(pending)+`).dataset.approval`)

	// Scrolled away, at each size and theme: the bar, inside the
	// viewport; Open brings the card's start into view, with the focus.
	for _, v := range axeVariants {
		tb.setVariant(v)
		tb.scrollToTop()
		tb.waitUntil("the approval bar at "+v.name, barShown)
		if call := tb.text(approvalBar + ` .approval-bar-call`); call != "Allow notes_write? " && call != "Allow notes_write?" {
			t.Errorf("%s: the bar reads %q", v.name, call)
		}
		if brief := tb.text(approvalBar + ` .approval-bar-brief`); !strings.Contains(brief, `"name":"groceries"`) {
			t.Errorf("%s: the bar's arguments read %q", v.name, brief)
		}
		if !evaluate[bool](tb, `document.querySelector(`+js(approvalBar+` .approval-bar-more`)+`).hidden`) {
			t.Errorf("%s: a count shows with one approval waiting", v.name)
		}
		checkAxe(t, tb, "the approval bar at "+v.name)
		tb.click(approvalBarOpen)
		tb.waitUntil("the card in view, with the focus, at "+v.name, `(() => {
			const card = document.querySelector(`+js(pending)+`);
			const r = card.querySelector(".approval-title").getBoundingClientRect(), s = document.querySelector(".messages").getBoundingClientRect();
			return document.activeElement === card.querySelector(".approval-title") && r.top >= s.top && r.bottom <= s.bottom;
		})()`)
	}
	tb.setVariant(axeVariants[0])

	// A folded tool card hides its Approve and Deny: the bar shows, and
	// Open unfolds it.
	tb.click(`.tool-card[data-call="call-bar-1"] > summary`)
	tb.waitUntil("the bar for the folded card", barShown)
	tb.click(approvalBarOpen)
	tb.waitUntil("the tool card unfolded, the focus on the approval", `document.querySelector('.tool-card[data-call="call-bar-1"]').open && document.activeElement.matches(`+js(pending+` .approval-title`)+`)`)

	// Approve from the bar: that approval is decided, once; the focus goes
	// to its card, folded to the outcome, and the bar goes.
	ms.Reply("Saved your groceries.")
	tb.scrollToTop()
	tb.waitUntil("the approval bar", barShown)
	decision := "/api/approvals/" + approvalID + "/decision"
	tb.click(approvalBarApprove)
	// A second press while the first goes is no second decision.
	evaluate[bool](tb, `(document.querySelector(`+js(approvalBarApprove)+`).click(), true)`)
	tb.waitUntil("the approval decided", `document.querySelector('.tool-card[data-call="call-bar-1"] .approval-card.is-decided')`)
	tb.waitUntil("the focus on the decided card, in view", `(() => {
		const title = document.activeElement;
		if (!title.matches('.tool-card[data-call="call-bar-1"] .approval-card.is-decided .approval-title')) return false;
		const r = title.getBoundingClientRect(), s = document.querySelector(".messages").getBoundingClientRect();
		return r.top >= s.top && r.bottom <= s.bottom;
	})()`)
	tb.waitUntil("the bar gone", `document.querySelector(`+js(approvalBar)+`).hidden`)
	tb.waitUntil("the reply after the approval", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Saved your groceries.")`)
	tb.waitBadge("Active")
	if n := tb.sent("POST", decision); n != 1 {
		t.Errorf("the page sent %d decisions of the approval, want 1", n)
	}
	code, a := apitest.Call(t, "GET", s.url+"/api/approvals/"+approvalID, dana, "")
	if code != 200 || (a["status"] != "approved" && a["status"] != "consumed") || a["decided_by"] == nil {
		t.Errorf("the approval = %d %v, want approved", code, a)
	}
	ran := 0
	for _, ev := range apitest.Events(t, s.url, dana, runID) {
		if d, _ := ev["data"].(map[string]any); ev["type"] == "message.tool" && d["toolCallId"] == "call-bar-1" && d["status"] == "succeeded" {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("the approved call ran %d times, want once", ran)
	}

	// Two waiting: the bar shows the first and the count; its Deny sends
	// the reason typed in the first card; then it shows the second alone,
	// approved from the keyboard.
	ms.ReplyToolCalls(
		model.ToolCall{ID: "call-bar-2", Name: "notes_write", Arguments: json.RawMessage(`{"name":"chores","body":"dishes"}`)},
		model.ToolCall{ID: "call-bar-3", Name: "notes_write", Arguments: json.RawMessage(`{"name":"errands","body":"post office"}`)})
	ms.Reply("Saved your errands, not your chores.")
	tb.send("save my chores and errands")
	first := `.tool-card[data-call="call-bar-2"] .approval-card.is-pending`
	second := `.tool-card[data-call="call-bar-3"] .approval-card.is-pending`
	tb.waitUntil("two approvals waiting", `document.querySelector(`+js(first+` textarea[name=reason]`)+`) && document.querySelector(`+js(second+` button[value=approve]`)+`)`)
	tb.typeText(first+` textarea[name=reason]`, "not today")
	tb.scrollToTop()
	tb.waitUntil("the bar with the first and the count", barShown+` && document.querySelector(`+js(approvalBar+` .approval-bar-brief`)+`).textContent.includes("chores") && document.querySelector(`+js(approvalBar+` .approval-bar-more`)+`).textContent === "2 waiting"`)
	checkAxe(t, tb, "the approval bar with two waiting")
	firstID := evaluate[string](tb, `document.querySelector(`+js(first)+`).dataset.approval`)
	tb.click(approvalBarDeny)
	tb.waitUntil("the first denied", `document.querySelector('.tool-card[data-call="call-bar-2"] .approval-card.is-decided .approval-head .badge')?.textContent === "Denied"`)
	tb.waitUntil("the focus on the denied card", `document.activeElement.matches('.tool-card[data-call="call-bar-2"] .approval-card.is-decided .approval-title')`)
	code, a = apitest.Call(t, "GET", s.url+"/api/approvals/"+firstID, dana, "")
	if code != 200 || a["status"] != "denied" || a["decision_reason"] != "not today" {
		t.Errorf("the first approval = %d %v, want denied with the reason typed in its card", code, a)
	}
	tb.scrollToTop()
	tb.waitUntil("the bar with the second alone", barShown+` && document.querySelector(`+js(approvalBar+` .approval-bar-brief`)+`).textContent.includes("errands") && document.querySelector(`+js(approvalBar+` .approval-bar-more`)+`).hidden`)
	evaluate[bool](tb, `(document.querySelector(`+js(approvalBarApprove)+`).focus(), true)`)
	tb.do(pressEnter)
	tb.waitUntil("the second approved", `document.querySelector('.tool-card[data-call="call-bar-3"] .approval-card.is-decided')`)
	tb.waitUntil("the focus on the approved card", `document.activeElement.matches('.tool-card[data-call="call-bar-3"] .approval-card.is-decided .approval-title')`)
	tb.waitUntil("the reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "Saved your errands, not your chores.")`)
	tb.waitUntil("no bar", `document.querySelector(`+js(approvalBar)+`).hidden`)
	tb.waitBadge("Active")
	tb.checkClean()
}

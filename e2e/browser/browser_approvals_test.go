package browser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserApprovalHistory: the inbox's Recent decisions come from the
// server. (With one model offered, the home shows no model picker.) A decision made through the API, never shown in this browser,
// is there; one made in another tab appears live, and both stay after a
// reload, newest first, with who decided, the outcome and the reason, and
// the session, its title the link.
func TestBrowserApprovalHistory(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	request := func(name string) string { return requestApproval(t, s, alice, name) }
	denied := request("groceries")
	if code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+denied+"/decision", alice, `{"decision":"deny","reason":"not now"}`); code != 200 {
		t.Fatalf("decision = %d %v", code, body)
	}
	approved := request("chores")

	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	// One model offered: no picker by the message box.
	tb.waitUntil("the models read", `performance.getEntriesByType("resource").some((e) => new URL(e.name).pathname === "/api/assistant/models" && e.responseEnd > 0)`)
	if evaluate[bool](tb, `[...document.querySelectorAll(".model-picker")].some((p) => !p.hidden)`) {
		t.Errorf("a model picker is shown with one model offered")
	}
	tb.click(`a.inbox-link`)
	tb.waitUntil("the inbox with one request waiting", `document.querySelector(`+js(`.inbox .approval-card.is-pending[data-approval="`+approved+`"] button[value=approve]`)+`)`)
	tb.waitUntil("the decision made through the API", `document.querySelector(`+js(`.approval-history .approval-card[data-approval="`+denied+`"] .decision-note`)+`)`)
	checkAxe(t, tb, "the approvals inbox with its history")
	// Its session: the title alone is the link, when it began set apart.
	brief := `document.querySelector(` + js(`.approval-history .approval-card[data-approval="`+denied+`"] .approval-brief`) + `)`
	if got := evaluate[[]string](tb, `[`+brief+`.querySelector("a")?.textContent, `+brief+`.querySelector(".run-started")?.textContent.replace(/\d+:\d+.*M|\d+:\d+/, "TIME")]`); got[0] != "Note groceries" || got[1] != " (started TIME)" {
		t.Errorf("the denial's session reads %q, want its title as the link and when it started apart", got)
	}

	// Decided in another tab: this one shows it live.
	other := tb.newTab("tab 2")
	other.do(chromedp.Navigate(s.url + "/approvals/" + approved))
	other.waitUntil("the approval's page", `document.querySelector(".approval-card.is-pending button[value=approve]")`)
	other.typeText(".approval-card.is-pending textarea[name=reason]", "looks fine")
	other.click(".approval-card.is-pending button[value=approve]")
	other.waitUntil("approved", `document.querySelector(".approval-card.is-decided")`)
	tb.waitUntil("the other tab's decision, live", `document.querySelectorAll(".approval-history .approval-card.is-decided").length === 2`)
	tb.waitUntil("nothing waiting", `document.querySelector(".inbox .empty-state")?.textContent === "Nothing is waiting for you."`)

	type entry struct{ ID, Badge, Note string }
	history := func() []entry {
		return evaluate[[]entry](tb, `[...document.querySelectorAll(".approval-history .approval-card")].map((c) => ({
			ID: c.dataset.approval, Badge: c.querySelector(".approval-head .badge").textContent, Note: c.querySelector(".decision-note")?.textContent || "" }))`)
	}
	check := func(when string) {
		t.Helper()
		h := history()
		if len(h) != 2 || h[0].ID != approved || h[1].ID != denied {
			t.Fatalf("%s: the history = %+v, want the approval, then the denial", when, h)
		}
		if !strings.HasPrefix(h[0].Badge, "Approved") || !strings.HasPrefix(h[0].Note, "Approved ") ||
			!strings.Contains(h[0].Note, " by you") || !strings.HasSuffix(h[0].Note, "looks fine") {
			t.Errorf("%s: the approval shows %+v", when, h[0])
		}
		if h[1].Badge != "Denied" || !strings.HasPrefix(h[1].Note, "Denied ") || !strings.Contains(h[1].Note, " by you") || !strings.HasSuffix(h[1].Note, "not now") {
			t.Errorf("%s: the denial shows %+v", when, h[1])
		}
	}
	check("live")
	tb.do(chromedp.Reload())
	tb.waitUntil("the inbox after a reload", `document.querySelectorAll(".approval-history .approval-card.is-decided").length === 2`)
	check("after a reload")
	if n := evaluate[int](tb, `Object.keys(localStorage).filter((k) => k.startsWith("usher.approvals.")).length`); n != 0 {
		t.Errorf("%d approval histories kept in localStorage, want none: the server keeps it", n)
	}
	if evaluate[bool](tb, `!document.querySelector(".approval-history > button").hidden`) {
		t.Errorf("Show older is offered with two decisions")
	}
	checkAxe(t, tb, "the approvals inbox after a reload")

	// More than a page: Show older decisions reads the next one, and the
	// focus goes to the first of them.
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"Many notes"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	runID := run["runId"].(string)
	for i := range 20 {
		msg := fmt.Sprintf(`call notes_write {"name":"n%d","body":"x"}`, i)
		if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+runID+"/messages?wait=30s", alice, fmt.Sprintf(`{"content":%s}`, js(msg))); code != 200 && code != 202 {
			t.Fatalf("turn %d = %d %v", i, code, body)
		}
		code, list := apitest.Call(t, "GET", s.url+"/api/approvals", alice, "")
		pending, _ := list["approvals"].([]any)
		if code != 200 || len(pending) != 1 {
			t.Fatalf("approvals after turn %d = %d %v", i, code, list)
		}
		id := pending[0].(map[string]any)["id"].(string)
		if code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+id+"/decision", alice, `{"decision":"deny"}`); code != 200 {
			t.Fatalf("decision %d = %d %v", i, code, body)
		}
	}
	tb.do(chromedp.Reload())
	tb.waitUntil("a page of decisions and Show older", `document.querySelectorAll(".approval-history .approval-card").length === 20 && !document.querySelector(".approval-history > button").hidden`)
	tb.click(".approval-history > button")
	tb.waitUntil("the older ones", `document.querySelectorAll(".approval-history .approval-card").length === 22 && document.querySelector(".approval-history > button").hidden`)
	if h := history(); h[20].ID != approved || h[21].ID != denied {
		t.Errorf("the older decisions = %+v, want the approval, then the denial", h[20:])
	}
	tb.waitUntil("the focus on the first older one", `document.activeElement.closest("[data-approval]")?.dataset.approval === `+js(approved))
	tb.checkClean()
	other.checkClean()
}

// requestApproval starts a run of token's whose demo model calls
// notes_write, which waits for a decision, and returns that approval's id.
func requestApproval(t *testing.T, s *server, token, name string) string {
	t.Helper()
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", token, fmt.Sprintf(`{"title":%s}`, js("Note "+name)))
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	msg := fmt.Sprintf(`call notes_write {"name":%s,"body":"milk"}`, js(name))
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+run["runId"].(string)+"/messages?wait=30s", token, fmt.Sprintf(`{"content":%s}`, js(msg))); code != 200 && code != 202 {
		t.Fatalf("turn = %d %v", code, body)
	}
	code, list := apitest.Call(t, "GET", s.url+"/api/approvals", token, "")
	if code != 200 {
		t.Fatalf("approvals = %d %v", code, list)
	}
	for _, v := range list["approvals"].([]any) {
		a := v.(map[string]any)
		if args, _ := a["arguments"].(map[string]any); args["name"] == name {
			return a["id"].(string)
		}
	}
	t.Fatalf("no pending approval of %s in %v", name, list)
	return ""
}

// TestBrowserInboxKeepsWhatIsTyped: a request arriving live, or another
// one decided elsewhere, leaves the card of a request that did not
// change as it is: the reason being typed in it, and the focus.
func TestBrowserInboxKeepsWhatIsTyped(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	first := requestApproval(t, s, alice, "first")
	second := requestApproval(t, s, alice, "second")
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.click(`a.inbox-link`)
	card := func(id string) string { return `.inbox .approval-card.is-pending[data-approval="` + id + `"]` }
	tb.waitUntil("both requests waiting", `document.querySelector(`+js(card(first))+`) && document.querySelector(`+js(card(second))+`)`)
	tb.typeText(card(first)+" textarea[name=reason]", "half a thou")
	reason := `document.querySelector(` + js(card(first)+" textarea[name=reason]") + `)`

	third := requestApproval(t, s, alice, "third")
	tb.waitUntil("the new request, live", `document.querySelector(`+js(card(third))+`)`)
	if got := evaluate[string](tb, reason+`.value`); got != "half a thou" {
		t.Errorf("after a request arrived, the reason typed = %q", got)
	}
	if code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+second+"/decision", alice, `{"decision":"deny"}`); code != 200 {
		t.Fatalf("decision = %d %v", code, body)
	}
	tb.waitUntil("the request decided elsewhere gone", `!document.querySelector(`+js(card(second))+`)`)
	if got := evaluate[string](tb, reason+`.value`); got != "half a thou" {
		t.Errorf("after another request was decided, the reason typed = %q", got)
	}
	if !evaluate[bool](tb, reason+` === document.activeElement`) {
		t.Errorf("the focus left the reason being typed")
	}
	tb.checkClean()
}

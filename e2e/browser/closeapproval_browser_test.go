package browser

import (
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBrowserCompleteWithdrawsApproval: the inbox shows a request
// waiting; the session that asked for it is completed (through the API,
// as from another tab); the inbox updates live: nothing waits any more,
// and the request is in Recent decisions, withdrawn.
func TestBrowserCompleteWithdrawsApproval(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"Note to close"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_write {\"name\":\"closing\",\"body\":\"x\"}"}`)
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("approval turn = %d %v", code, body)
	}
	msgs := body["messages"].([]any)
	id := msgs[len(msgs)-1].(map[string]any)["data"].(map[string]any)["approval"].(map[string]any)["id"].(string)

	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.click(`a.inbox-link`)
	tb.waitUntil("the inbox with the request waiting", `document.querySelector(`+js(`.inbox .approval-card.is-pending[data-approval="`+id+`"] button[value=approve]`)+`)`)

	if code, body := apitest.Call(t, "POST", base+"/complete", alice, ""); code != 200 {
		t.Fatalf("complete = %d %v", code, body)
	}
	tb.waitUntil("nothing waiting", `document.querySelector(".inbox .empty-state")?.textContent === "Nothing is waiting for you."`)
	tb.waitUntil("the withdrawal in the history", `document.querySelector(`+js(`.approval-history .approval-card[data-approval="`+id+`"]`)+`)`)
	badge := evaluate[string](tb, `document.querySelector(`+js(`.approval-history .approval-card[data-approval="`+id+`"] .approval-head .badge`)+`).textContent`)
	if !strings.HasPrefix(badge, "Withdrawn") {
		t.Errorf("the withdrawn request's badge = %q, want Withdrawn…", badge)
	}
}

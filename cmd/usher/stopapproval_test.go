package main

import (
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
)

// TestStopWithdrawsTheTurnsApproval: a turn paused for the approval of
// notes_write is stopped; the approval is withdrawn at once (no longer
// pending, recorded in the audit log), a decision on it answers 409
// approval_withdrawn, and the tool never runs. On the embedded default
// and on PostgreSQL.
func TestStopWithdrawsTheTurnsApproval(t *testing.T) {
	onEachEngine(t, func(t *testing.T, s *server, cli func(...string) string) {
		alice := cli("token", "user", "--sub", "alice")

		base, id := awaitingApproval(t, s, alice, "stopme")

		if code, body := apitest.Call(t, "POST", base+"/stop", alice, ""); code != 200 {
			t.Fatalf("stop = %d %v", code, body)
		}
		code, list := apitest.Call(t, "GET", s.url+"/api/approvals", alice, "")
		if code != 200 || len(list["approvals"].([]any)) != 0 {
			t.Errorf("pending approvals after the stop = %d %v, want none", code, list)
		}
		if code, a := apitest.Call(t, "GET", s.url+"/api/approvals/"+id, alice, ""); code != 200 || a["status"] != "withdrawn" || a["can_approve"] == true {
			t.Errorf("the approval after the stop = %d %v, want withdrawn", code, a)
		}
		code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+id+"/decision", alice, `{"decision":"approve"}`)
		if code != 409 || apitest.ErrorCode(body) != "approval_withdrawn" {
			t.Errorf("approving a withdrawn approval = %d %v, want 409 approval_withdrawn", code, body)
		}

		// The tool never ran; the withdrawal is in the audit log.
		code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_read {\"name\":\"stopme\"}"}`)
		if code != 200 || strings.Contains(body["reply"].(string), `"x"`) {
			t.Errorf("reading the note = %d %v, want no such note", code, body)
		}
		withdrawn, executed := 0, 0
		for line := range strings.Lines(cli("audit", "export")) {
			if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"decision":"withdrawn"`) && strings.Contains(line, id) {
				withdrawn++
			}
			if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"kind":"execution_started"`) {
				executed++
			}
		}
		if withdrawn != 1 || executed != 0 {
			t.Errorf("audit: %d withdrawals of %s, %d notes_write executions; want 1 and 0", withdrawn, id, executed)
		}
	})
}

package main

import (
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/store/storetest"
)

// TestCloseWithdrawsTheRunsApproval: a turn paused for the approval of
// notes_write, and then its run completed, cancelled or deleted; the
// approval is withdrawn at once (no longer pending, recorded in the audit
// log with the close's reason, announced on the live-update feed that the
// inbox and the cards follow), a decision on it answers 409
// approval_withdrawn, and the tool never runs. On the embedded default
// and on PostgreSQL.
func TestCloseWithdrawsTheRunsApproval(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var env map[string]string
			var args, cliArgs []string
			if engine == "postgres" {
				dbURL := storetest.PostgresURL(t)
				env = map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
				args = []string{"--database-url", dbURL}
				cliArgs = args
			}
			s := startServer(t, env, args...)
			cli := func(a ...string) string {
				out, err := s.cli(t, append(a, cliArgs...)...)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			alice := cli("token", "user", "--sub", "alice")
			// The inbox and the cards follow the feed.
			feed := openSSE(t, s.url+"/api/assistant/updates/stream", alice, 0)
			feed.until(t, isType("connected"))
			ids := map[string]string{}
			for _, tc := range []struct{ name, method, path, reason string }{
				{"complete", "POST", "/complete", "You completed this session."},
				{"cancel", "POST", "/cancel", "You cancelled this session."},
				{"delete", "DELETE", "", "You deleted this session."},
			} {
				code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"Close me"}`)
				if code != 201 {
					t.Fatalf("create = %d %v", code, run)
				}
				base := s.url + "/api/assistant/runs/" + run["runId"].(string)
				code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_write {\"name\":\"`+tc.name+`\",\"body\":\"x\"}"}`)
				if code != 202 || body["status"] != "awaiting_approval" {
					t.Fatalf("%s: approval turn = %d %v", tc.name, code, body)
				}
				msgs := body["messages"].([]any)
				id := msgs[len(msgs)-1].(map[string]any)["data"].(map[string]any)["approval"].(map[string]any)["id"].(string)
				ids[id] = tc.name

				if code, body := apitest.Call(t, tc.method, base+tc.path, alice, ""); code != 200 && code != 204 {
					t.Fatalf("%s = %d %v", tc.name, code, body)
				}
				feed.until(t, func(m sseMessage) bool {
					return m.Event == "approval" && m.Data["id"] == id && m.Data["status"] == "withdrawn"
				})
				code, list := apitest.Call(t, "GET", s.url+"/api/approvals", alice, "")
				if code != 200 || len(list["approvals"].([]any)) != 0 {
					t.Errorf("%s: pending approvals after it = %d %v, want none", tc.name, code, list)
				}
				if code, a := apitest.Call(t, "GET", s.url+"/api/approvals/"+id, alice, ""); code != 200 || a["status"] != "withdrawn" || a["can_approve"] == true || a["decision_reason"] != tc.reason {
					t.Errorf("%s: the approval after it = %d %v, want withdrawn for %q", tc.name, code, a, tc.reason)
				}
				code, body = apitest.Call(t, "POST", s.url+"/api/approvals/"+id+"/decision", alice, `{"decision":"approve"}`)
				if code != 409 || apitest.ErrorCode(body) != "approval_withdrawn" {
					t.Errorf("%s: approving a withdrawn approval = %d %v, want 409 approval_withdrawn", tc.name, code, body)
				}
			}

			// No tool ran; each withdrawal is in the audit log.
			withdrawn, executed := map[string]int{}, 0
			for line := range strings.Lines(cli("audit", "export")) {
				for id, name := range ids {
					if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"decision":"withdrawn"`) && strings.Contains(line, id) {
						withdrawn[name]++
					}
				}
				if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"kind":"execution_started"`) {
					executed++
				}
			}
			if len(withdrawn) != 3 || withdrawn["complete"] != 1 || withdrawn["cancel"] != 1 || withdrawn["delete"] != 1 || executed != 0 {
				t.Errorf("audit: withdrawals %v, %d notes_write executions; want one of each and none", withdrawn, executed)
			}
		})
	}
}

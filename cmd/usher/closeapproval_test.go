package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/store/storetest"
)

// onEachEngine runs test, in parallel, on a server of each engine (see
// startOnEngine).
func onEachEngine(t *testing.T, test func(t *testing.T, s *server, cli func(...string) string)) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			s, cli := startOnEngine(t, engine)
			test(t, s, cli)
		})
	}
}

// awaitingApproval creates a run of token's on s whose turn calls
// notes_write on the note name, which waits for an approval; it returns
// the run's URL and the approval's id.
func awaitingApproval(t *testing.T, s *server, token, name string) (base, approvalID string) {
	t.Helper()
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", token, `{"title":"Wait for me"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	base = s.url + "/api/assistant/runs/" + run["runId"].(string)
	content, _ := json.Marshal(map[string]string{"content": `call notes_write {"name":"` + name + `","body":"x"}`})
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", token, string(content))
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("approval turn = %d %v", code, body)
	}
	msgs := body["messages"].([]any)
	return base, msgs[len(msgs)-1].(map[string]any)["data"].(map[string]any)["approval"].(map[string]any)["id"].(string)
}

// startOnEngine starts `usher serve` on engine: "sqlite", the embedded
// default, or "postgres", a database of its own. cli runs an usher
// command against it, with the engine's flags, and fails the test when
// the command fails.
func startOnEngine(t *testing.T, engine string) (s *server, cli func(args ...string) string) {
	t.Helper()
	var env map[string]string
	var args []string
	if engine == "postgres" {
		env = map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
		args = []string{"--database-url", storetest.PostgresURL(t)}
	}
	s = startServer(t, env, args...)
	return s, func(a ...string) string {
		t.Helper()
		out, err := s.cli(t, append(a, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestCloseWithdrawsTheRunsApproval: a turn paused for the approval of
// notes_write, and then its run completed, cancelled or deleted; the
// approval is withdrawn at once (no longer pending, recorded in the audit
// log with the close's reason, announced on the live-update feed that the
// inbox and the cards follow), a decision on it answers 409
// approval_withdrawn, and the tool never runs. On the embedded default
// and on PostgreSQL.
func TestCloseWithdrawsTheRunsApproval(t *testing.T) {
	onEachEngine(t, func(t *testing.T, s *server, cli func(...string) string) {
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
			base, id := awaitingApproval(t, s, alice, tc.name)
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
			code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+id+"/decision", alice, `{"decision":"approve"}`)
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

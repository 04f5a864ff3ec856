package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// auditRecords reads the audit log of the server's installation.
func auditRecords(t *testing.T, s *server, args ...string) []map[string]any {
	t.Helper()
	export, err := s.cli(t, append([]string{"audit", "export"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for line := range strings.Lines(export) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// executed counts the audit records of kind for tool, by idempotency key.
func executed(records []map[string]any, kind, tool string) map[string]int {
	out := map[string]int{}
	for _, r := range records {
		if r["kind"] == kind && r["tool"] == tool {
			d, _ := r["details"].(map[string]any)
			key, _ := d["idempotency_key"].(string)
			out[key]++
		}
	}
	return out
}

// data is an event's payload.
func data(e map[string]any) map[string]any { d, _ := e["data"].(map[string]any); return d }

// TestAssistantQueuedCommands posts 10 commands at once to one run with
// the demo model, on SQLite and on PostgreSQL: each gets a turn of its
// own, in the order posted, which runs its command once and replies.
func TestAssistantQueuedCommands(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			policyFile := t.TempDir() + "/policy.cedar"
			if err := writeTestFile(policyFile, writersPolicy); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"USHER_POLICY_FILE": policyFile}
			var args, cli []string
			if engine == "postgres" {
				dbURL := storetest.PostgresURL(t)
				env["USHER_BROKER_KEY_ENCRYPTION_KEY"] = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="
				args, cli = []string{"--database-url", dbURL}, []string{"--database-url", dbURL}
			}
			s := startServer(t, env, args...)
			tok, err := s.cli(t, append([]string{"token", "user", "--sub", "erin", "--group", "writers"}, cli...)...)
			if err != nil {
				t.Fatal(err)
			}
			_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", tok, "")
			id := run["runId"].(string)
			base := s.url + "/api/assistant/runs/" + id

			var posted []float64
			for i := range 10 {
				body, _ := json.Marshal(map[string]string{"content": fmt.Sprintf(`call notes_write {"name":"n%d","body":"body %d"}`, i, i)})
				code, r := apitest.Call(t, "POST", base+"/messages", tok, string(body))
				if code != 202 {
					t.Fatalf("post %d = %d %v", i, code, r)
				}
				posted = append(posted, r["seq"].(float64))
			}
			var events []map[string]any
			testenv.WaitFor(t, 60*time.Second, func() bool {
				events = apitest.Events(t, s.url, tok, id)
				return countType(events, "agent.turn.end") == 10
			})

			// The turns answer the messages in the order posted, one each,
			// and each completes.
			var started []float64
			for _, e := range events {
				switch e["type"] {
				case "agent.turn.start":
					started = append(started, data(e)["messageSeq"].(float64))
				case "agent.turn.end":
					if data(e)["status"] != "completed" {
						t.Errorf("a turn ended %v", data(e))
					}
				}
			}
			if fmt.Sprint(started) != fmt.Sprint(posted) {
				t.Fatalf("turns answered %v, want the messages posted %v", started, posted)
			}
			// Ten executions, one per command.
			runs := executed(auditRecords(t, s, cli...), "executed", "notes_write")
			if len(runs) != 10 {
				t.Errorf("notes_write executions by key: %v, want 10", runs)
			}
			for key, n := range runs {
				if n != 1 {
					t.Errorf("call %s executed %d times", key, n)
				}
			}
			// Each turn called its own message's command, then replied.
			for i, seq := range posted {
				var own []map[string]any
				for _, e := range events {
					if e["type"] == "message.assistant" && data(e)["messageSeq"] == seq {
						own = append(own, data(e))
					}
				}
				if len(own) != 2 {
					t.Errorf("turn %d wrote %d assistant messages, want the call and the reply: %v", i, len(own), own)
					continue
				}
				calls, _ := own[0]["toolCalls"].([]any)
				if len(calls) != 1 || fmt.Sprint(calls[0].(map[string]any)["arguments"]) != fmt.Sprintf("map[body:body %d name:n%d]", i, i) {
					t.Errorf("turn %d called %v, want notes_write of n%d", i, calls, i)
				}
				if reply := own[1]["content"].(string); !strings.Contains(reply, "notes_write returned") {
					t.Errorf("turn %d replied %q", i, reply)
				}
			}
		})
	}
}

// TestAssistantToolCallIDsUsedAgain has a model server that uses one tool
// call id for every call, across turns and across the steps of a turn:
// each call runs as itself at the MCP server (not answered with another
// call's stored result, nor refused as a different call under a used
// key), and a call that waited for an approval runs once after it,
// consuming the approval.
func TestAssistantToolCallIDsUsedAgain(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id
	call := func(name, args string) model.ToolCall {
		return model.ToolCall{ID: "call_1", Name: name, Arguments: json.RawMessage(args)}
	}

	ms.ReplyToolCalls(call("notes_list", `{}`))
	ms.Reply("no notes")
	if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"list"}`); code != 200 || body["status"] != "completed" {
		t.Fatalf("first turn = %d %v", code, body)
	}

	// Another tool under the same id: it needs an approval.
	ms.ReplyToolCalls(call("notes_write", `{"name":"groceries","body":"milk"}`))
	ms.Reply("written")
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"write"}`)
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("the write = %d %v, want it to wait for an approval", code, body)
	}
	msgs := body["messages"].([]any)
	approval := data(msgs[len(msgs)-1].(map[string]any))["approval"].(map[string]any)["id"].(string)
	if code, _ := apitest.Call(t, "POST", s.url+"/api/approvals/"+approval+"/decision", alice, `{"decision":"approve"}`); code != 200 {
		t.Fatalf("decision = %d", code)
	}
	testenv.WaitFor(t, 20*time.Second, func() bool { return countType(apitest.Events(t, s.url, alice, id), "agent.turn.end") == 2 })

	// The first call again, twice in one turn: it runs each time, and
	// sees the note written since.
	ms.ReplyToolCalls(call("notes_list", `{}`))
	ms.ReplyToolCalls(call("notes_list", `{}`))
	ms.Reply("listed")
	if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"list again"}`); code != 200 || body["status"] != "completed" {
		t.Fatalf("third turn = %d %v", code, body)
	}

	var results []map[string]any
	for _, e := range apitest.Events(t, s.url, alice, id) {
		if e["type"] == "message.tool" {
			results = append(results, data(e))
		}
	}
	var got []string
	for _, r := range results {
		got = append(got, fmt.Sprintf("%s:%s", r["name"], r["status"]))
		if r["status"] == "failed" {
			t.Errorf("a call failed: %v", r)
		}
	}
	if want := "[notes_list:succeeded notes_write:approval_pending notes_write:succeeded notes_list:succeeded notes_list:succeeded]"; fmt.Sprint(got) != want {
		t.Errorf("tool results %v, want %s", got, want)
	}
	for _, r := range results[3:] {
		if !strings.Contains(fmt.Sprint(r["content"]), "groceries") {
			t.Errorf("a later notes_list was answered %q: another call's stored result", r["content"])
		}
	}
	records := auditRecords(t, s)
	lists, writes := executed(records, "executed", "notes_list"), executed(records, "executed", "notes_write")
	if len(lists) != 3 || len(writes) != 1 {
		t.Errorf("executions: notes_list %v, notes_write %v; want 3 calls and 1, each under its own key", lists, writes)
	}
	if consumed := executed(records, "approval_consumed", "notes_write"); len(consumed) != 1 {
		t.Errorf("approvals consumed: %v, want one", consumed)
	}
}

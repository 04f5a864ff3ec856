package assistant

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
)

// conversation is the user and assistant messages of a model request, as
// "role: text" lines (the system prompt left out).
func conversation(r modeltest.RecordedRequest) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" || m.Role == "assistant" {
			out = append(out, m.Role+": "+m.Content)
		}
	}
	return out
}

// lastRequest is the conversation of the model's latest request.
func lastRequest(t *testing.T, ms *modeltest.Server) []string {
	t.Helper()
	reqs := ms.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	return conversation(reqs[len(reqs)-1])
}

// shown is GET path's messages as "role: text" lines.
func (h *harness) shown(t *testing.T, path string) []string {
	t.Helper()
	code, body := h.call(t, "GET", path, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %v", path, code, body)
	}
	var out []string
	for _, m := range body["messages"].([]any) {
		m := m.(map[string]any)
		role := strings.TrimPrefix(m["type"].(string), "message.")
		out = append(out, role+": "+m["data"].(map[string]any)["content"].(string))
	}
	return out
}

// wantCode checks an API answer's status and error code.
func wantCode(t *testing.T, what string, code int, body map[string]any, wantStatus int, wantError string) {
	t.Helper()
	var got string
	if e, ok := body["error"].(map[string]any); ok {
		got, _ = e["code"].(string)
	}
	if code != wantStatus || got != wantError {
		t.Errorf("%s: %d %q (%v), want %d %q", what, code, got, body, wantStatus, wantError)
	}
}

func jsonNumber(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// TestBranches: through the API, with the scripted model: an edit and a
// regenerate each make a branch whose new message gets its answer, from a
// model request that holds the branch's line only; switching back makes
// the next turn's request the old line's; the listing shows the
// alternatives; and the event log still holds every event, the ones
// before the branches byte for byte.
func TestBranches(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, nil)
		ctx := t.Context()

		ms.Reply("Where to?")
		code, body := h.call(t, "POST", "/runs", `{"message":"plan a trip"}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["runId"].(string)
		waitHandled(t, st, id, 1, 10*time.Second)
		ms.Reply("Lisbon it is.")
		code, body = h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"to Lisbon"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		lisbon := jsonNumber(body["seq"])
		waitHandled(t, st, id, lisbon, 10*time.Second)
		original := []string{"user: plan a trip", "assistant: Where to?", "user: to Lisbon", "assistant: Lisbon it is."}
		if got := h.shown(t, "/runs/"+id+"/messages"); !slices.Equal(got, original) {
			t.Fatalf("messages = %q, want %q", got, original)
		}
		logBefore, err := st.ListEvents(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}

		// Edit: the model sees the edited message after what came before
		// it, and nothing of the line it replaced.
		ms.Reply("Porto it is.")
		code, body = h.call(t, "POST", fmt.Sprintf("/runs/%s/messages/%d/edit", id, lisbon), `{"content":"to Porto"}`)
		if code != 202 || body["status"] != "queued" {
			t.Fatalf("edit: %d %v", code, body)
		}
		branch := body["branch"].(map[string]any)
		porto := jsonNumber(body["seq"])
		if jsonNumber(branch["id"]) != 1 || jsonNumber(branch["forkSeq"]) != lisbon || jsonNumber(branch["messageSeq"]) != porto ||
			branch["kind"] != "edit" || branch["active"] != true || jsonNumber(body["run"].(map[string]any)["activeBranch"]) != 1 {
			t.Errorf("edit's branch = %v, run %v", branch, body["run"])
		}
		if data := body["message"].(map[string]any)["data"].(map[string]any); jsonNumber(data["edits"]) != lisbon || data["content"] != "to Porto" {
			t.Errorf("edit's message = %v, want the content and edits: %d", data, lisbon)
		}
		waitHandled(t, st, id, porto, 10*time.Second)
		if got, want := lastRequest(t, ms), []string{"user: plan a trip", "assistant: Where to?", "user: to Porto"}; !slices.Equal(got, want) {
			t.Errorf("model request after the edit = %q, want %q", got, want)
		}
		edited := []string{"user: plan a trip", "assistant: Where to?", "user: to Porto", "assistant: Porto it is."}
		if got := h.shown(t, "/runs/"+id+"/messages"); !slices.Equal(got, edited) {
			t.Errorf("messages after the edit = %q, want %q", got, edited)
		}
		if got := h.shown(t, "/runs/"+id+"/messages?branch=0"); !slices.Equal(got, original) {
			t.Errorf("messages of branch 0 after the edit = %q, want %q", got, original)
		}

		// Regenerate: the same message again, a new answer; the model
		// sees the line without the reply it replaces.
		ms.Reply("Porto, again.")
		code, body = h.call(t, "POST", "/runs/"+id+"/regenerate", "")
		if code != 202 {
			t.Fatalf("regenerate: %d %v", code, body)
		}
		again := jsonNumber(body["seq"])
		if data := body["message"].(map[string]any)["data"].(map[string]any); jsonNumber(data["regenerates"]) != porto || data["content"] != "to Porto" {
			t.Errorf("regenerate's message = %v, want to Porto, regenerates: %d", data, porto)
		}
		waitHandled(t, st, id, again, 10*time.Second)
		if got, want := lastRequest(t, ms), []string{"user: plan a trip", "assistant: Where to?", "user: to Porto"}; !slices.Equal(got, want) {
			t.Errorf("model request of the regenerate = %q, want %q", got, want)
		}
		regenerated := []string{"user: plan a trip", "assistant: Where to?", "user: to Porto", "assistant: Porto, again."}
		if got := h.shown(t, "/runs/"+id+"/messages"); !slices.Equal(got, regenerated) {
			t.Errorf("messages after the regenerate = %q, want %q", got, regenerated)
		}
		code, body = h.call(t, "GET", "/runs/"+id, "")
		if code != 200 || body["gap"] != false || len(body["first"].([]any)) != 4 || jsonNumber(body["run"].(map[string]any)["branches"]) != 2 {
			t.Errorf("run view after the regenerate = %d %v", code, body)
		}

		// The listing: one message with three alternatives, the last
		// active.
		code, body = h.call(t, "GET", "/runs/"+id+"/branches", "")
		if code != 200 || jsonNumber(body["activeBranch"]) != 2 || len(body["branches"].([]any)) != 3 {
			t.Fatalf("branches: %d %v", code, body)
		}
		forks := body["forks"].([]any)
		if len(forks) != 1 {
			t.Fatalf("forks = %v, want one", forks)
		}
		var alts []string
		for _, a := range forks[0].(map[string]any)["alternatives"].([]any) {
			a := a.(map[string]any)
			alts = append(alts, fmt.Sprintf("%d@%d %s switchTo=%d active=%v", jsonNumber(a["branch"]), jsonNumber(a["messageSeq"]), a["kind"], jsonNumber(a["switchTo"]), a["active"]))
		}
		if want := []string{
			fmt.Sprintf("0@%d original switchTo=0 active=false", lisbon),
			fmt.Sprintf("1@%d edit switchTo=1 active=false", porto),
			fmt.Sprintf("2@%d regenerate switchTo=2 active=true", again),
		}; !slices.Equal(alts, want) {
			t.Errorf("alternatives = %q, want %q", alts, want)
		}

		// Switch back: the next turn's model request is the old line.
		code, body = h.call(t, "PUT", "/runs/"+id+"/branch", `{"branch":0}`)
		if code != 200 || jsonNumber(body["activeBranch"]) != 0 {
			t.Fatalf("switch: %d %v", code, body)
		}
		if got := h.shown(t, "/runs/"+id+"/messages"); !slices.Equal(got, original) {
			t.Errorf("messages after switching back = %q, want %q", got, original)
		}
		ms.Reply("Here is a hotel in Lisbon.")
		code, body = h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"and a hotel?"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		hotel := jsonNumber(body["seq"])
		waitHandled(t, st, id, hotel, 10*time.Second)
		if got, want := lastRequest(t, ms), append(slices.Clone(original), "user: and a hotel?"); !slices.Equal(got, want) {
			t.Errorf("model request after switching back = %q, want %q", got, want)
		}

		// The log: every event, gapless; those before the branches as they
		// were; every branch's messages still there.
		logAfter, err := st.ListEvents(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range logBefore {
			a := logAfter[i]
			if a.Seq != e.Seq || a.Type != e.Type || !bytes.Equal(a.Payload, e.Payload) || a.Branch != 0 || !a.CreatedAt.Equal(e.CreatedAt) {
				t.Errorf("event %d after the branches = %+v, was %+v", e.Seq, a, e)
			}
		}
		var texts, switches []string
		for i, e := range logAfter {
			if e.Seq != int64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
			if e.Type == EventBranchSwitch {
				var sw BranchSwitch
				json.Unmarshal(e.Payload, &sw)
				switches = append(switches, fmt.Sprintf("%d: %d→%d", e.Branch, sw.From, sw.Branch))
			}
			if isMessageEvent(e.Type) {
				var m struct{ Content string }
				json.Unmarshal(e.Payload, &m)
				texts = append(texts, fmt.Sprintf("%d %s", e.Branch, m.Content))
			}
		}
		if want := []string{"0 plan a trip", "0 Where to?", "0 to Lisbon", "0 Lisbon it is.", "1 to Porto", "1 Porto it is.",
			"2 to Porto", "2 Porto, again.", "0 and a hotel?", "0 Here is a hotel in Lisbon."}; !slices.Equal(texts, want) {
			t.Errorf("the log's messages = %q, want %q", texts, want)
		}
		if want := []string{"0: 2→0"}; !slices.Equal(switches, want) {
			t.Errorf("the log's branch switches = %q, want %q", switches, want)
		}
		// Every turn has its one start and end.
		if ends := turnEnds(t, st, id); len(ends) != 5 {
			t.Errorf("%d turn ends, want 5", len(ends))
		}
	})
}

// TestBranchRefusals: what the branch API refuses, and that a refusal
// writes nothing.
func TestBranchRefusals(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, &Options{MaxMessageBytes: 1000})
		ctx := t.Context()

		ms.Reply("Hello.")
		code, body := h.call(t, "POST", "/runs", `{"message":"hi"}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["runId"].(string)
		run := "/runs/" + id
		waitHandled(t, st, id, 1, 10*time.Second)
		msgs, err := st.ListMessages(ctx, id, store.MessageQuery{Limit: 10})
		if err != nil || len(msgs) != 2 {
			t.Fatalf("messages = %+v, %v", msgs, err)
		}
		reply := msgs[1].Seq
		before, err := st.ListEvents(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}

		for _, c := range []struct {
			what, method, path, body string
			status                   int
			code                     string
		}{
			{"edit of a reply", "POST", fmt.Sprintf("%s/messages/%d/edit", run, reply), `{"content":"x"}`, 400, "not_a_user_message"},
			{"edit of a missing message", "POST", run + "/messages/999/edit", `{"content":"x"}`, 404, "message_not_found"},
			{"edit of a turn record", "POST", run + "/messages/2/edit", `{"content":"x"}`, 404, "message_not_found"},
			{"edit of no number", "POST", run + "/messages/first/edit", `{"content":"x"}`, 400, "invalid_seq"},
			{"edit of the largest number", "POST", run + "/messages/9223372036854775807/edit", `{"content":"x"}`, 400, "invalid_seq"},
			{"edit with empty content", "POST", run + "/messages/1/edit", `{"content":"  "}`, 400, "invalid_message"},
			{"edit with no content", "POST", run + "/messages/1/edit", `{}`, 400, "invalid_message"},
			{"edit with oversized content", "POST", run + "/messages/1/edit", `{"content":"` + strings.Repeat("x", 1001) + `"}`, 413, "message_too_large"},
			{"edit with malformed JSON", "POST", run + "/messages/1/edit", `{"content":`, 400, "invalid_json"},
			{"edit with an unknown field", "POST", run + "/messages/1/edit", `{"content":"x","role":"system"}`, 400, "invalid_json"},
			{"regenerate with a body", "POST", run + "/regenerate", `{"content":"x"}`, 400, "invalid_json"},
			{"switch to a missing branch", "PUT", run + "/branch", `{"branch":3}`, 404, "branch_not_found"},
			{"switch to a negative branch", "PUT", run + "/branch", `{"branch":-1}`, 404, "branch_not_found"},
			{"switch with no branch", "PUT", run + "/branch", `{}`, 400, "invalid_branch"},
			{"switch with malformed JSON", "PUT", run + "/branch", `[0]`, 400, "invalid_json"},
			{"messages of a missing branch", "GET", run + "/messages?branch=1", "", 404, "branch_not_found"},
			{"messages of a bad branch", "GET", run + "/messages?branch=x", "", 400, "invalid_query"},
			{"edit of a missing run", "POST", "/runs/run_missing/messages/1/edit", `{"content":"x"}`, 404, "not_found"},
			{"branches of a missing run", "GET", "/runs/run_missing/branches", "", 404, "not_found"},
			{"branch of a run, DELETE", "DELETE", run + "/branch", "", 405, "method_not_allowed"},
		} {
			code, body := h.call(t, c.method, c.path, c.body)
			wantCode(t, c.what, code, body, c.status, c.code)
		}
		// A message too large says how large it is and what is taken.
		if _, body := h.call(t, "POST", run+"/messages/1/edit", `{"content":"`+strings.Repeat("x", 1001)+`"}`); !strings.Contains(fmt.Sprint(body["error"]), "The message is 1001 bytes; this server takes messages of up to 1000 bytes.") {
			t.Errorf("an oversized edit = %s, want its size and the limit", body)
		}

		// Another owner's run is not found, whatever the call.
		other := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "mine"})}
		if _, _, err := st.OpenRun(ctx, store.Run{ID: "run_other", Owner: "someone else"}, 5, &other); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/runs/run_other/messages/1/edit", `{"content":"theirs"}`},
			{"POST", "/runs/run_other/regenerate", ""},
			{"GET", "/runs/run_other/branches", ""},
			{"PUT", "/runs/run_other/branch", `{"branch":0}`},
			{"GET", "/runs/run_other/messages?branch=0", ""},
		} {
			code, body := h.call(t, c.method, c.path, c.body)
			wantCode(t, c.method+" "+c.path, code, body, 404, "not_found")
		}

		// The other run's opening message has a turn of its own: it ends
		// before the hold, so that the one request held is this run's.
		waitHandled(t, st, "run_other", 1, 10*time.Second)

		// While a turn is open: refused, and nothing written.
		release := ms.Hold()
		ms.Reply("Still here.")
		code, body = h.call(t, "POST", run+"/messages", `{"content":"are you there?"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		second := jsonNumber(body["seq"])
		if err := ms.WaitHeld(ctx, 1); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ what, method, path, body string }{
			{"edit during a turn", "POST", run + "/messages/1/edit", `{"content":"hello"}`},
			{"regenerate during a turn", "POST", run + "/regenerate", ""},
			{"switch during a turn", "PUT", run + "/branch", `{"branch":0}`},
		} {
			code, body := h.call(t, c.method, c.path, c.body)
			wantCode(t, c.what, code, body, 409, "run_busy")
		}
		release()
		waitHandled(t, st, id, second, 10*time.Second)
		after, err := st.ListEvents(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := st.GetRun(ctx, id); r.Branches != 0 || r.ActiveBranch != 0 {
			t.Errorf("the run after the refusals = %+v, want no branch", r)
		}
		for i, e := range before {
			if !bytes.Equal(after[i].Payload, e.Payload) || after[i].Type != e.Type {
				t.Errorf("event %d changed: %+v, was %+v", e.Seq, after[i], e)
			}
		}
		for _, e := range after[len(before):] {
			if e.Type == EventUserMessage {
				var m UserMessage
				json.Unmarshal(e.Payload, &m)
				if m.Content != "are you there?" {
					t.Errorf("a refused call wrote %s: %s", e.Type, e.Payload)
				}
			}
		}

		// A closed run takes no branch.
		if code, body := h.call(t, "POST", run+"/complete", ""); code != 200 {
			t.Fatalf("complete: %d %v", code, body)
		}
		code, body = h.call(t, "POST", run+"/messages/1/edit", `{"content":"hello"}`)
		wantCode(t, "edit of a closed run", code, body, 409, "operator_run_closed")
		code, body = h.call(t, "POST", run+"/regenerate", "")
		wantCode(t, "regenerate of a closed run", code, body, 409, "operator_run_closed")
		code, body = h.call(t, "PUT", run+"/branch", `{"branch":0}`)
		wantCode(t, "switch of a closed run", code, body, 409, "operator_run_closed")

		// A run with no message has nothing to regenerate.
		code, body = h.call(t, "POST", "/runs", `{}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		code, body = h.call(t, "POST", "/runs/"+body["runId"].(string)+"/regenerate", "")
		wantCode(t, "regenerate of an empty run", code, body, 409, "nothing_to_regenerate")
	})
}

// TestViewBranches: the forks of a run's branches — edits of one message
// (an edit of an edit among them), a regenerate of the first, a branch
// nested in it — each with its alternatives in order, the one on the
// active line, and the branch to switch to for each.
func TestViewBranches(t *testing.T) {
	t.Parallel()
	seg := func(b, until int64) store.LineSegment { return store.LineSegment{Branch: b, Until: until} }
	run := store.Run{ID: "run_x", ActiveBranch: 4, Branches: 4}
	v := viewBranches(run, []store.Branch{
		{ID: 1, Parent: 0, ForkSeq: 5, MessageSeq: 9, Kind: store.BranchEdit, Line: []store.LineSegment{seg(0, 5), seg(1, store.MaxSeq)}},
		{ID: 2, Parent: 0, ForkSeq: 5, MessageSeq: 13, Kind: store.BranchEdit, Line: []store.LineSegment{seg(0, 5), seg(2, store.MaxSeq)}},
		{ID: 3, Parent: 0, ForkSeq: 1, MessageSeq: 17, Kind: store.BranchRegenerate, Line: []store.LineSegment{seg(0, 1), seg(3, store.MaxSeq)}},
		{ID: 4, Parent: 3, ForkSeq: 21, MessageSeq: 25, Kind: store.BranchEdit, Line: []store.LineSegment{seg(0, 1), seg(3, 21), seg(4, store.MaxSeq)}},
	})
	var got []string
	for _, f := range v.Forks {
		line := fmt.Sprintf("%d@%d:", f.Parent, f.ForkSeq)
		for _, a := range f.Alternatives {
			line += fmt.Sprintf(" %d@%d %s →%d", a.Branch, a.MessageSeq, a.Kind, a.SwitchTo)
			if a.Active {
				line += " (active)"
			}
		}
		got = append(got, line)
	}
	want := []string{
		"0@1: 0@1 original →2 3@17 regenerate →4 (active)",
		"0@5: 0@5 original →0 1@9 edit →1 2@13 edit →2",
		"3@21: 3@21 original →3 4@25 edit →4 (active)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("forks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(v.Branches) != 5 || v.Branches[0].Kind != "original" || v.Branches[0].Parent != nil || !v.Branches[4].Active ||
		v.Branches[4].Line[2].UntilSeq != nil || *v.Branches[4].Line[1].UntilSeq != 21 {
		t.Errorf("branches = %+v", v.Branches)
	}
}

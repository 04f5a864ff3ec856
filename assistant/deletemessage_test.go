package assistant

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// TestDeleteMessage: through the API, with the scripted model: deleting
// the first user message makes a branch without it and its answer, the
// next turn's model request holds the new line only, the old line stays
// and is switched back to, the listing offers both, and a retry with the
// Idempotency-Key answers the same deletion.
func TestDeleteMessage(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, nil)

		ms.Reply("Where to?")
		code, body := h.call(t, "POST", "/runs", `{"message":"plan a trip"}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["runId"].(string)
		run := "/runs/" + id
		waitHandled(t, st, id, 1, 10*time.Second)
		ms.Reply("Lisbon it is.")
		code, body = h.call(t, "POST", run+"/messages", `{"content":"to Lisbon"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		lisbon := jsonNumber(body["seq"])
		waitHandled(t, st, id, lisbon, 10*time.Second)
		original := []string{"user: plan a trip", "assistant: Where to?", "user: to Lisbon", "assistant: Lisbon it is."}

		code, body = h.call(t, "DELETE", run+"/messages/1", "", "Idempotency-Key", "del-1")
		if code != 200 {
			t.Fatalf("delete: %d %v", code, body)
		}
		branch := body["branch"].(map[string]any)
		if jsonNumber(branch["id"]) != 1 || jsonNumber(branch["forkSeq"]) != 1 || branch["kind"] != "delete" || branch["active"] != true ||
			jsonNumber(body["run"].(map[string]any)["activeBranch"]) != 1 {
			t.Errorf("delete's branch = %v, run %v", branch, body["run"])
		}
		event := body["event"].(map[string]any)
		if data := event["data"].(map[string]any); event["type"] != EventBranchDelete || jsonNumber(data["deletes"]) != 1 ||
			jsonNumber(data["untilSeq"]) != lisbon || jsonNumber(data["from"]) != 0 {
			t.Errorf("delete's event = %v", event)
		}
		deleted := []string{"user: to Lisbon", "assistant: Lisbon it is."}
		if got := h.shown(t, run+"/messages"); !slices.Equal(got, deleted) {
			t.Errorf("messages after the delete = %q, want %q", got, deleted)
		}
		if got := h.shown(t, run+"/messages?branch=0"); !slices.Equal(got, original) {
			t.Errorf("the kept line = %q, want %q", got, original)
		}

		// A retry with the key answers the same deletion and makes none.
		code, again := h.call(t, "DELETE", run+"/messages/1", "", "Idempotency-Key", "del-1")
		if code != 200 || jsonNumber(again["branch"].(map[string]any)["id"]) != 1 || jsonNumber(again["event"].(map[string]any)["seq"]) != jsonNumber(event["seq"]) {
			t.Errorf("delete again with its key: %d %v", code, again)
		}

		// The next turn's model request is the new line's.
		ms.Reply("Porto too.")
		code, body = h.call(t, "POST", run+"/messages", `{"content":"and Porto?"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		waitHandled(t, st, id, jsonNumber(body["seq"]), 10*time.Second)
		if got, want := lastRequest(t, ms), []string{"user: to Lisbon", "assistant: Lisbon it is.", "user: and Porto?"}; !slices.Equal(got, want) {
			t.Errorf("model request after the delete = %q, want %q", got, want)
		}

		// The listing offers the message's versions: the original, and
		// its deletion, active.
		code, body = h.call(t, "GET", run+"/branches", "")
		if code != 200 {
			t.Fatalf("branches: %d %v", code, body)
		}
		forks := body["forks"].([]any)
		if len(forks) != 1 {
			t.Fatalf("forks = %v, want one", forks)
		}
		var alts []string
		for _, a := range forks[0].(map[string]any)["alternatives"].([]any) {
			a := a.(map[string]any)
			alts = append(alts, fmt.Sprintf("%s →%d %v", a["kind"], jsonNumber(a["switchTo"]), a["active"]))
		}
		if want := []string{"original →0 false", "delete →1 true"}; !slices.Equal(alts, want) {
			t.Errorf("alternatives = %q, want %q", alts, want)
		}

		// Switching back shows the kept line, and the model gets it.
		if code, body := h.call(t, "PUT", run+"/branch", `{"branch":0}`); code != 200 {
			t.Fatalf("switch: %d %v", code, body)
		}
		if got := h.shown(t, run+"/messages"); !slices.Equal(got, original) {
			t.Errorf("messages after switching back = %q, want %q", got, original)
		}
		ms.Reply("Back.")
		code, body = h.call(t, "POST", run+"/messages", `{"content":"again"}`)
		if code != 202 {
			t.Fatalf("post: %d %v", code, body)
		}
		waitHandled(t, st, id, jsonNumber(body["seq"]), 10*time.Second)
		if got, want := lastRequest(t, ms), append(slices.Clone(original), "user: again"); !slices.Equal(got, want) {
			t.Errorf("model request on the kept line = %q, want %q", got, want)
		}
	})
}

// TestDeleteMessageRefusals: another owner's run, a missing run, a
// malformed seq, a turn record or a message off the active line, a body,
// a running turn, and a closed run are refused with their codes, and
// write nothing.
func TestDeleteMessageRefusals(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, nil)
		ctx := t.Context()

		ms.Reply("Hello.")
		code, body := h.call(t, "POST", "/runs", `{"message":"hi"}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["runId"].(string)
		run := "/runs/" + id
		waitHandled(t, st, id, 1, 10*time.Second)
		other := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "mine"})}
		if _, _, err := st.OpenRun(ctx, store.Run{ID: "run_other", Owner: "someone else"}, 5, &other); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what, path, body string
			status           int
			code             string
		}{
			{"another owner's run", "/runs/run_other/messages/1", "", 404, "not_found"},
			{"a missing run", "/runs/run_missing/messages/1", "", 404, "not_found"},
			{"no number", run + "/messages/first", "", 400, "invalid_seq"},
			{"zero", run + "/messages/0", "", 400, "invalid_seq"},
			{"too large", run + "/messages/9007199254740993", "", 400, "invalid_seq"},
			{"a turn record", run + "/messages/2", "", 404, "message_not_found"},
			{"beyond the log", run + "/messages/999", "", 404, "message_not_found"},
			{"a body", run + "/messages/1", `{"content":"x"}`, 400, "invalid_json"},
		} {
			code, body := h.call(t, "DELETE", c.path, c.body)
			wantCode(t, "delete of "+c.what, code, body, c.status, c.code)
		}
		if r, _ := st.GetRun(ctx, "run_other"); r.Branches != 0 {
			t.Errorf("another owner's run after the refusals = %+v", r)
		}

		// The other run's opening message has a turn of its own: it ends
		// before the hold, so that the one request held is this run's.
		waitHandled(t, st, "run_other", 1, 10*time.Second)

		// During a turn: run_busy, as an edit.
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
		code, body = h.call(t, "DELETE", run+"/messages/1", "")
		wantCode(t, "delete during a turn", code, body, 409, "run_busy")
		release()
		waitHandled(t, st, id, second, 10*time.Second)
		if r, _ := st.GetRun(ctx, id); r.Branches != 0 {
			t.Errorf("the run after the refusals = %+v, want no branch", r)
		}

		// A message off the active line: not found on it.
		if code, body := h.call(t, "DELETE", run+"/messages/1", ""); code != 200 {
			t.Fatalf("delete: %d %v", code, body)
		}
		code, body = h.call(t, "DELETE", run+"/messages/1", "")
		wantCode(t, "delete of a deleted message", code, body, 404, "message_not_found")

		if code, body := h.call(t, "POST", run+"/complete", ""); code != 200 {
			t.Fatalf("complete: %d %v", code, body)
		}
		code, body = h.call(t, "DELETE", fmt.Sprintf("%s/messages/%d", run, second), "")
		wantCode(t, "delete of a closed run", code, body, 409, "operator_run_closed")
	})
}

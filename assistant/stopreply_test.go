package assistant

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// TestStopKeepsThePartialReply: a turn stopped while its reply streams
// keeps what was streamed as its assistant message, marked stopped (in the
// API), and the next turn's model request holds it, in the stopped turn's
// place.
func TestStopKeepsThePartialReply(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		const full = "Here is the first half of a long answer"
		ms, provider := scriptedModel(t)
		ms.ReplyPartial(full)
		ms.Reply("Noted.")
		feed, err := st.Updates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, st, provider, &Options{Lease: time.Minute})
		code, out := h.call(t, "POST", "/runs", `{"message": "tell me everything"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		next := func(what string, ok func(store.Notification) bool) {
			t.Helper()
			timeout := time.After(20 * time.Second)
			for {
				select {
				case n := <-feed:
					if n.RunID == runID && ok(n) {
						return
					}
				case <-timeout:
					t.Fatalf("no %s within 20 s", what)
				}
			}
		}
		next("delta", func(n store.Notification) bool { return n.Kind == store.NotifyDelta && n.Text != "" })
		if code, out := h.call(t, "POST", "/runs/"+runID+"/stop", ""); code != http.StatusOK {
			t.Fatalf("POST stop = %d %v", code, out)
		}
		// The stopped reply follows the turn's end.
		var kept AssistantMessage
		next("stopped reply", func(n store.Notification) bool {
			if n.Kind != store.NotifyEvent {
				return false
			}
			events, err := st.ListEvents(ctx, runID, n.Seq-1, 1)
			if err != nil || len(events) != 1 || events[0].Type != EventAssistantMessage {
				return false
			}
			return json.Unmarshal(events[0].Payload, &kept) == nil
		})
		if !kept.Stopped || kept.Content == "" || !strings.HasPrefix(full, kept.Content) || kept.MessageSeq != 1 {
			t.Fatalf("kept reply = %+v, want a stopped prefix of %q for message 1", kept, full)
		}
		code, page := h.call(t, "GET", "/runs/"+runID+"/messages", "")
		if code != http.StatusOK {
			t.Fatalf("GET messages = %d %v", code, page)
		}
		msgs := page["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)["data"].(map[string]any)
		if last["stopped"] != true || last["content"] != kept.Content {
			t.Errorf("the API shows the last message as %v, want it marked stopped", last)
		}

		h.sayAPI(t, runID, "go on")
		reqs := ms.Requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2", len(reqs))
		}
		var roles []string
		for _, m := range reqs[1].Messages {
			roles = append(roles, m.Role+":"+m.Content)
		}
		want := []string{"assistant:" + kept.Content, "user:go on"}
		if got := roles[len(roles)-2:]; got[0] != want[0] || got[1] != want[1] {
			t.Errorf("the next turn's request ends %q, want %q", got, want)
		}
	})
}

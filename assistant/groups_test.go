package assistant

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/store"
)

// manyGroups are more groups than a broker token carries, fewer than
// Entra lists in a token (200).
func manyGroups() []string {
	groups := make([]string, broker.MaxGroups+1)
	for i := range groups {
		groups[i] = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
	}
	return groups
}

// TestSenderWithTooManyGroups: a person in more groups than the turn's
// broker tokens carry is refused at once — 403 too_many_groups, saying
// how many and the limit — by every write that would start a turn, and
// nothing is stored; a stored message that names such a sender ends its
// turn at once, failed with the same words, without asking the model or
// retrying.
func TestSenderWithTooManyGroups(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		// A stored message that names the crowded sender, written to the
		// store directly: the API refuses to store one.
		crowd := Sender{Tenant: testOwner.Tenant, Groups: manyGroups()}
		first := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "hello", Sender: &crowd}), Preview: "hello"}
		if _, _, err := st.OpenRun(t.Context(), store.Run{ID: "run_crowd", Owner: testOwner.ID()}, DefaultMaxActiveRuns, &first); err != nil {
			t.Fatal(err)
		}
		ms, provider := scriptedModel(t)
		ms.Reply("not asked")
		h := newHarness(t, st, provider, nil)
		want := fmt.Sprintf("Your account is in %d groups, more than the %d the assistant's tool calls can carry", broker.MaxGroups+1, broker.MaxGroups)
		r := waitHandled(t, st, "run_crowd", 1, 20*time.Second)
		ends := turnEnds(t, st, "run_crowd")
		if len(ends) != 1 || ends[0].Status != TurnFailed || !strings.HasPrefix(ends[0].Error, want) {
			t.Fatalf("turn ends = %+v; want one, failed, saying %q", ends, want)
		}
		if n := len(ms.Requests()); n != 0 || r.Failures != 0 {
			t.Errorf("%d model requests, %d failures in a row; want the turn ended at once, nothing asked or retried", n, r.Failures)
		}

		// The API refuses the crowded sender every write that would start
		// a turn.
		p := testOwner
		p.Groups = manyGroups()
		api := signedInAs(t, h.rt, p)
		for _, w := range []struct{ method, path, body string }{
			{"POST", "/runs", `{"message": "a new one"}`},
			{"POST", "/runs/run_crowd/messages", `{"content": "and now?"}`},
			{"POST", "/runs/run_crowd/regenerate", ``},
			{"POST", "/runs/run_crowd/messages/1/edit", `{"content": "edited"}`},
			{"POST", "/runs/run_crowd/compact", ``},
		} {
			code, out := apitest.Call(t, w.method, api+w.path, "", w.body, "Content-Type", "application/json")
			e, _ := out["error"].(map[string]any)
			if code != http.StatusForbidden || e["code"] != "too_many_groups" || !strings.HasPrefix(fmt.Sprint(e["message"]), want) {
				t.Errorf("%s %s = %d %v; want 403 too_many_groups saying %q", w.method, w.path, code, out, want)
			}
		}
		if runs, err := st.ListRuns(t.Context(), testOwner.ID()); err != nil || len(runs) != 1 {
			t.Errorf("runs after the refusals: %d, %v; want only the first", len(runs), err)
		}
		if msgs := messageTypes(t, st, "run_crowd"); len(msgs) != 1 {
			t.Errorf("messages after the refusals = %v; want none added", msgs)
		}

		// At the limit, the same person is answered.
		p.Groups = p.Groups[:broker.MaxGroups]
		ms.Forget()
		ms.Reply("answered")
		code, out := apitest.Call(t, "POST", signedInAs(t, h.rt, p)+"/runs/run_crowd/messages", "", `{"content": "and now?"}`, "Content-Type", "application/json")
		if code != http.StatusAccepted {
			t.Fatalf("POST with %d groups: %d %v", broker.MaxGroups, code, out)
		}
		waitHandled(t, st, "run_crowd", int64(out["seq"].(float64)), 20*time.Second)
		if ends := turnEnds(t, st, "run_crowd"); len(ends) != 2 || ends[1].Status != TurnCompleted {
			t.Errorf("turn ends = %+v; want the second completed", ends)
		}
	})
}

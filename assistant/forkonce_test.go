package assistant

import (
	"net/http"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestForkIdempotent: an edit or a regenerate sent again with its
// Idempotency-Key makes no second branch, even once the first one's turn
// has run: the retry answers with the first one's branch and message.
func TestForkIdempotent(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		code, out := h.call(t, "POST", "/runs", "")
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		h.sayAPI(t, runID, "plan a trip")
		for _, tc := range []struct{ name, path, body, key string }{
			{"edit", "/runs/" + runID + "/messages/1/edit", `{"content": "plan a hike"}`, "edit-1"},
			{"regenerate", "/runs/" + runID + "/regenerate", "", "regen-1"},
		} {
			code, first := h.call(t, "POST", tc.path, tc.body, "Idempotency-Key", tc.key)
			if code != http.StatusAccepted {
				t.Fatalf("%s = %d %v", tc.name, code, first)
			}
			seq := int64(first["seq"].(float64))
			waitHandled(t, st, runID, seq, 10*time.Second)
			code, again := h.call(t, "POST", tc.path, tc.body, "Idempotency-Key", tc.key)
			b1, _ := first["branch"].(map[string]any)
			b2, _ := again["branch"].(map[string]any)
			if code != http.StatusAccepted || again["seq"] != first["seq"] || b1["id"] == nil || b1["id"] != b2["id"] {
				t.Errorf("%s again = %d %v, want branch %v and message %v", tc.name, code, again, b1["id"], first["seq"])
			}
		}
		if bs, err := st.ListBranches(t.Context(), runID); err != nil || len(bs) != 2 {
			t.Errorf("ListBranches = %d branches, %v; want the edit's and the regenerate's", len(bs), err)
		}
	})
}

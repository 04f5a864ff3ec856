package assistant

import (
	"net/http"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestRenameRun: PATCH …/runs/{id} sets the title, trimmed; a blank,
// overlong or control-character title, a malformed body, someone else's
// run or a missing one is refused and changes nothing. New runs take a
// plain-text title and preview from their Markdown.
func TestRenameRun(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		code, out := h.call(t, "POST", "/runs", `{"message": "## Plan the **offsite**\n\nfor May"}`)
		if code != http.StatusCreated || out["title"] != "Plan the offsite" || out["preview"] != "Plan the offsite for May" {
			t.Fatalf("POST /runs = %d %v, want the plain-text title and preview", code, out)
		}
		runID := out["runId"].(string)
		code, out = h.call(t, "PATCH", "/runs/"+runID, `{"title": "  Offsite, May  "}`)
		if code != http.StatusOK || out["title"] != "Offsite, May" {
			t.Fatalf("PATCH = %d %v", code, out)
		}
		for _, tc := range []struct {
			name, path, body string
			code             int
			err              string
		}{
			{"blank", "/runs/" + runID, `{"title": "   "}`, http.StatusBadRequest, "invalid_title"},
			{"too long", "/runs/" + runID, `{"title": "` + strings.Repeat("a", 201) + `"}`, http.StatusBadRequest, "invalid_title"},
			{"a control character", "/runs/" + runID, `{"title": "a\u0007b"}`, http.StatusBadRequest, "invalid_title"},
			{"no title", "/runs/" + runID, `{}`, http.StatusBadRequest, "invalid_title"},
			{"unknown member", "/runs/" + runID, `{"title": "x", "status": "Completed"}`, http.StatusBadRequest, "invalid_json"},
			{"not JSON", "/runs/" + runID, `title=x`, http.StatusBadRequest, "invalid_json"},
			{"another owner's", "/runs/" + otherOwnersRun(t, st), `{"title": "mine now"}`, http.StatusNotFound, "not_found"},
			{"missing", "/runs/run_00000000000000000000000000000000", `{"title": "x"}`, http.StatusNotFound, "not_found"},
		} {
			code, out := h.call(t, "PATCH", tc.path, tc.body)
			if e, _ := out["error"].(map[string]any); code != tc.code || e["code"] != tc.err {
				t.Errorf("%s: %d %v, want %d %s", tc.name, code, out, tc.code, tc.err)
			}
		}
		if r, _ := st.GetRun(t.Context(), runID); r.Title != "Offsite, May" {
			t.Errorf("title = %q after the refusals", r.Title)
		}
	})
}

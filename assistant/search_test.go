package assistant

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestSearch: GET /api/assistant/search finds the caller's runs by the
// words of their messages or titles, the latest updated first, with a
// plain-text snippet of the latest matching message; someone else's runs
// never; a query without words is refused.
func TestSearch(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		open := func(body string) string {
			t.Helper()
			code, out := h.call(t, "POST", "/runs", body)
			if code != http.StatusCreated {
				t.Fatalf("POST /runs = %d %v", code, out)
			}
			return out["runId"].(string)
		}
		trip := open(`{"title": "Trip"}`)
		h.sayAPI(t, trip, "Book the **train** to Lisbon for "+strings.Repeat("the whole family and ", 12)+"then find a quiet hotel near the old town")
		notes := open(`{"title": "Quarterly notes"}`)
		other := otherOwnersRun(t, st) // "mine", someone else's
		_ = other

		search := func(q string) (int, []map[string]any) {
			t.Helper()
			code, out := h.call(t, "GET", "/search?q="+url.QueryEscape(q), "")
			var results []map[string]any
			for _, r := range out["results"].([]any) {
				results = append(results, r.(map[string]any))
			}
			return code, results
		}
		code, got := search("LISB hotel")
		if code != http.StatusOK || len(got) != 1 || got[0]["run"].(map[string]any)["runId"] != trip || got[0]["seq"] != 1.0 {
			t.Fatalf("search for words of a message = %d %v", code, got)
		}
		if sn := got[0]["snippet"].(string); !strings.Contains(sn, "train to Lisbon") || strings.Contains(sn, "**") || len([]rune(sn)) > snippetRunes+2 || !strings.HasSuffix(sn, "…") {
			t.Errorf("snippet = %q", sn)
		}
		// The demo's answer quotes the message: the latest match is it.
		if code, got := search("demo model"); code != http.StatusOK || len(got) != 1 || got[0]["seq"].(float64) <= 1 {
			t.Errorf("search for the answer's words = %d %v", code, got)
		}
		if code, got := search("quart"); code != http.StatusOK || len(got) != 1 || got[0]["run"].(map[string]any)["runId"] != notes || got[0]["seq"] != nil {
			t.Errorf("search by title = %d %v", code, got)
		}
		for _, q := range []string{"mine", "ain", "lisbon quarterly"} {
			if code, got := search(q); code != http.StatusOK || len(got) != 0 {
				t.Errorf("search %q = %d %v, want nothing", q, code, got)
			}
		}
		for _, q := range []string{"", "  ?! ", strings.Repeat("a", 1001)} {
			code, out := h.call(t, "GET", "/search?q="+url.QueryEscape(q), "")
			if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "invalid_query" {
				t.Errorf("search %.10q = %d %v, want 400 invalid_query", q, code, out)
			}
		}
	})
}

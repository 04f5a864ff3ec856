package assistant

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// chunked is a request body of unknown length: net/http sends a body it
// cannot measure with Transfer-Encoding: chunked, and the server sees no
// Content-Length (-1).
type chunked struct{ io.Reader }

// TestOptionalBodies: the requests whose body may be left out (a new run,
// compaction, regenerate) take an empty body alike, whether it is sent
// with Content-Length: 0 or chunked with no bytes, and refuse one with
// members either way.
func TestOptionalBodies(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, nil)
		ms.Reply("Hello.")
		code, body := h.call(t, "POST", "/runs", `{"message":"hi"}`)
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["runId"].(string)
		run := "/runs/" + id
		waitHandled(t, st, id, 1, 10*time.Second)

		send := func(method, path, text string) int {
			t.Helper()
			req, err := http.NewRequest(method, h.api+path, chunked{strings.NewReader(text)})
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%s %s %q (chunked) = %d %s", method, path, text, resp.StatusCode, raw)
			return resp.StatusCode
		}
		for _, c := range []struct{ method, path string }{
			{"POST", "/runs"}, {"POST", run + "/regenerate"}, {"POST", run + "/compact"},
		} {
			if code := send(c.method, c.path, `{"unknown": 1}`); code != http.StatusBadRequest {
				t.Errorf("%s %s with an unknown member, chunked = %d, want 400", c.method, c.path, code)
			}
			ms.Reply("Again.")
			if code := send(c.method, c.path, ""); code == http.StatusBadRequest || code >= 500 {
				t.Errorf("%s %s with an empty chunked body = %d, want it taken as no body", c.method, c.path, code)
			}
			waitIdle(t, st, id)
		}
	})
}

package assistant

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestModelChoice: a run chooses one of the offered models when it is
// created and another for later turns, and the model server sees each
// name; a model not offered is refused with 400 and changes nothing; a
// run that chose none names none (the provider's own, the default).
func TestModelChoice(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms := modeltest.NewServer(t)
		ms.SetDefaultReply("ok")
		provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "small"})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, st, provider, &Options{ModelName: "small", Models: []string{"large", "small"}})
		code, out := h.call(t, "GET", "/models", "")
		if b, _ := json.Marshal(out); code != 200 || string(b) != `{"models":[{"default":true,"name":"small"},{"default":false,"name":"large"}]}` {
			t.Fatalf("GET /models = %d %s", code, b)
		}
		lastModel := func() string {
			t.Helper()
			reqs := ms.Requests()
			return reqs[len(reqs)-1].Model
		}
		turn := func(runID, text string) {
			t.Helper()
			if code, out := h.call(t, "POST", "/runs/"+runID+"/messages?wait=30s", `{"content":"`+text+`"}`); code != 200 {
				t.Fatalf("turn = %d %v", code, out)
			}
		}

		code, out = h.call(t, "POST", "/runs", `{"model":"large"}`)
		if code != 201 || out["metadata"].(map[string]any)["model"] != "large" {
			t.Fatalf("POST /runs with a model = %d %v", code, out)
		}
		runID := out["runId"].(string)
		turn(runID, "hello")
		if got := lastModel(); got != "large" {
			t.Errorf("the first turn asked %q, want large", got)
		}
		code, out = h.call(t, "PATCH", "/runs/"+runID, `{"model":"small"}`)
		if code != 200 || out["metadata"].(map[string]any)["model"] != "small" {
			t.Fatalf("PATCH model = %d %v", code, out)
		}
		turn(runID, "again")
		if got := lastModel(); got != "small" {
			t.Errorf("the turn after the change asked %q, want small", got)
		}
		// Settings beside the model stay; a title and a model at once.
		code, out = h.call(t, "POST", "/runs", `{"metadata":{"compactThreshold":0.5,"model":"large"}}`)
		if code != 201 {
			t.Fatalf("POST /runs with metadata = %d %v", code, out)
		}
		other := out["runId"].(string)
		code, out = h.call(t, "PATCH", "/runs/"+other, `{"title":"Both","model":"small"}`)
		if md, _ := out["metadata"].(map[string]any); code != 200 || out["title"] != "Both" || md["model"] != "small" || md["compactThreshold"] != 0.5 {
			t.Errorf("PATCH title and model = %d %v", code, out)
		}

		// No choice: the request names none, and the provider asks for its own.
		code, out = h.call(t, "POST", "/runs", `{}`)
		if code != 201 {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		plain := out["runId"].(string)
		turn(plain, "hi")
		if got := lastModel(); got != "small" {
			t.Errorf("a run without a choice asked %q, want the default", got)
		}

		// A model the operator no longer offers: the default.
		if _, err := st.SetRunMetadata(t.Context(), plain, `{"model":"retired"}`); err != nil {
			t.Fatal(err)
		}
		turn(plain, "and now?")
		if got := lastModel(); got != "small" {
			t.Errorf("a run whose model is no longer offered asked %q, want the default", got)
		}

		for _, tc := range []struct {
			name, method, path, body, code string
		}{
			{"create with a model not offered", "POST", "/runs", `{"model":"huge"}`, "invalid_model"},
			{"create with an empty model", "POST", "/runs", `{"model":""}`, "invalid_model"},
			{"create with a model in the metadata not offered", "POST", "/runs", `{"metadata":{"model":"huge"}}`, "invalid_model"},
			{"create with an empty model in the metadata", "POST", "/runs", `{"metadata":{"model":""}}`, "invalid_metadata"},
			{"create with a model not a string", "POST", "/runs", `{"metadata":{"model":5}}`, "invalid_metadata"},
			{"create with two models", "POST", "/runs", `{"model":"small","metadata":{"model":"large"}}`, "invalid_model"},
			{"create with a model too long", "POST", "/runs", `{"model":"` + strings.Repeat("m", 300) + `"}`, "invalid_model"},
			{"change to a model not offered", "PATCH", "/runs/" + runID, `{"model":"huge"}`, "invalid_model"},
			{"change to a model not offered, with a title", "PATCH", "/runs/" + runID, `{"title":"renamed","model":"huge"}`, "invalid_model"},
			{"change to no model", "PATCH", "/runs/" + runID, `{"model":null}`, "invalid_title"},
			{"change to a number", "PATCH", "/runs/" + runID, `{"model":5}`, "invalid_json"},
			{"change another owner's", "PATCH", "/runs/" + otherOwnersRun(t, st), `{"model":"small"}`, "not_found"},
		} {
			code, out := h.call(t, tc.method, tc.path, tc.body)
			if e, _ := out["error"].(map[string]any); code/100 != 4 || e["code"] != tc.code {
				t.Errorf("%s: %d %v, want %s", tc.name, code, out, tc.code)
			}
		}
		if code, out := h.call(t, "POST", "/runs", `{"model":"huge"}`); code != 400 ||
			!strings.Contains(out["error"].(map[string]any)["message"].(string), "choose one of small, large") {
			t.Errorf("the refusal says %v", out)
		}
		if r, _ := st.GetRun(t.Context(), runID); r.Title == "renamed" || !strings.Contains(r.Metadata, `"small"`) {
			t.Errorf("after the refusals: %q %s", r.Title, r.Metadata)
		}
	})
}

// Without a list of models, the one configured is offered alone, a run
// may name only it, and requests name none.
func TestModelSingle(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, st, provider, &Options{ModelName: "scripted"})
	code, out := h.call(t, "GET", "/models", "")
	if b, _ := json.Marshal(out); code != 200 || string(b) != `{"models":[{"default":true,"name":"scripted"}]}` {
		t.Fatalf("GET /models = %d %s", code, b)
	}
	if code, out := h.call(t, "POST", "/runs", `{"model":"other"}`); code != 400 {
		t.Errorf("POST /runs with another model = %d %v", code, out)
	}
	if code, out := h.call(t, "POST", "/runs", `{"model":"scripted","message":"hi"}`); code != 201 {
		t.Errorf("POST /runs with the model = %d %v", code, out)
	}
	if _, err := New(&Options{Store: st, Model: provider, MCPURL: "http://x", Tokens: h.rt.o.Tokens, ModelName: "a", Models: []string{"b", "b"}}); err == nil ||
		!strings.Contains(err.Error(), "want distinct names") || !strings.Contains(err.Error(), "want one of Models") {
		t.Errorf("New with bad Models = %v", err)
	}
}

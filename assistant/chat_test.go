package assistant

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// TestParkAtTheLimit: at the active limit a new run is refused (429); the
// oldest quiet run is parked (POST …/park), which frees its place, so the
// new run opens; the parked run answers its next message. A run with
// work, another owner's, or a malformed body is refused and parks
// nothing.
func TestParkAtTheLimit(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		ms.SetDefaultReply("ok")
		h := newHarness(t, st, provider, &Options{MaxActiveRuns: 2})
		var ids []string
		for _, text := range []string{"first", "second"} {
			code, out := h.call(t, "POST", "/runs", `{"message":"`+text+`"}`)
			if code != http.StatusCreated {
				t.Fatalf("POST /runs: %d %v", code, out)
			}
			ids = append(ids, out["runId"].(string))
			waitHandled(t, st, ids[len(ids)-1], 1, 10*time.Second)
		}
		code, out := h.call(t, "POST", "/runs", `{"message":"third"}`)
		wantCode(t, "a third run", code, out, http.StatusTooManyRequests, "too_many_active_runs")

		// Refusals first: none of them parks anything.
		release := ms.Hold()
		code, out = h.call(t, "POST", "/runs/"+ids[1]+"/messages", `{"content":"more"}`)
		if code != http.StatusAccepted {
			t.Fatalf("post: %d %v", code, out)
		}
		code, out = h.call(t, "POST", "/runs/"+ids[1]+"/park", "")
		wantCode(t, "park a working run", code, out, http.StatusConflict, "run_not_quiet")
		release()
		waitHandled(t, st, ids[1], 3, 10*time.Second)
		code, out = h.call(t, "POST", "/runs/"+otherOwnersRun(t, st)+"/park", "")
		wantCode(t, "park another owner's run", code, out, http.StatusNotFound, "not_found")
		code, out = h.call(t, "POST", "/runs/"+ids[0]+"/park", `{"now":true}`)
		wantCode(t, "park with a body", code, out, http.StatusBadRequest, "invalid_json")
		if r, _ := st.GetRun(t.Context(), ids[0]); r.Status != store.RunInProgress {
			t.Fatalf("after the refusals, run 1 is %s", r.Status)
		}

		code, out = h.call(t, "POST", "/runs/"+ids[0]+"/park", "")
		if code != http.StatusOK || out["status"] != "Idle" {
			t.Fatalf("park: %d %v, want Idle", code, out)
		}
		code, out = h.call(t, "POST", "/runs", `{"message":"third"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs after parking: %d %v", code, out)
		}
		waitHandled(t, st, out["runId"].(string), 1, 10*time.Second)
		ms.Reply("welcome back")
		h.sayAPI(t, ids[0], "again")
		if got := lastRequest(t, ms); got[len(got)-1] != "user: again" {
			t.Fatalf("the parked run's next request = %q, want its new message last", got)
		}
		if r, _ := st.GetRun(t.Context(), ids[0]); r.Status != store.RunInProgress {
			t.Fatalf("the parked run after its message is %s, want InProgress", r.Status)
		}
	})
}

// TestPins: PUT …/pin pins a run, which the list shows first and marked,
// the latest pinned first; DELETE unpins it; another owner's run is not
// found.
func TestPins(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		var ids []string
		for _, title := range []string{"a", "b", "c"} {
			_, out := h.call(t, "POST", "/runs", `{"title":"`+title+`"}`)
			ids = append(ids, out["runId"].(string))
		}
		listed := func() (out []string) {
			_, body := h.call(t, "GET", "/runs", "")
			for _, r := range body["runs"].([]any) {
				r := r.(map[string]any)
				mark := ""
				if r["pinned"] == true {
					mark = "*"
				}
				out = append(out, r["title"].(string)+mark)
			}
			return out
		}
		before := listed()
		for _, i := range []int{0, 1} {
			if code, out := h.call(t, "PUT", "/runs/"+ids[i]+"/pin", ""); code != http.StatusOK || out["pinned"] != true {
				t.Fatalf("pin: %d %v", code, out)
			}
		}
		if got, want := listed(), []string{"b*", "a*", "c"}; !slices.Equal(got, want) {
			t.Fatalf("list = %v, want %v (before: %v)", got, want, before)
		}
		if code, out := h.call(t, "DELETE", "/runs/"+ids[1]+"/pin", ""); code != http.StatusOK || out["pinned"] == true {
			t.Fatalf("unpin: %d %v", code, out)
		}
		if got := listed(); got[0] != "a*" || slices.Contains(got, "b*") {
			t.Fatalf("list after unpinning b = %v", got)
		}
		code, out := h.call(t, "PUT", "/runs/"+otherOwnersRun(t, st)+"/pin", "")
		wantCode(t, "pin another owner's run", code, out, http.StatusNotFound, "not_found")
	})
}

// settingsAPI serves the runtime's API signed in as who, and returns the
// URL of its settings.
func settingsAPI(t *testing.T, rt *Runtime, who identity.Principal) string {
	return signedInAs(t, rt, who) + "/settings"
}

// TestSettings: GET /api/assistant/settings is the defaults until PUT saves; a
// field left out keeps its value; each bad field is refused with its code
// and stores nothing; another person's settings are their own; and the
// next model request of the owner's turn carries the instructions after
// the system prompt.
func TestSettings(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		ms.SetDefaultReply("ok")
		h := newHarness(t, st, provider, &Options{ModelName: "small", Models: []string{"large", "small"}})
		url := settingsAPI(t, h.rt, testOwner)
		call := func(method, body string) (int, map[string]any) {
			return apitest.Call(t, method, url, "", body, "Content-Type", "application/json")
		}
		if code, out := call("GET", ""); code != 200 || out["theme"] != "system" || out["sendKey"] != "enter" || out["instructions"] != "" || out["updatedAt"] != nil {
			t.Fatalf("GET before any: %d %v", code, out)
		}
		code, out := call("PUT", `{"instructions":"Always answer in French.","theme":"dark","sendKey":"ctrl-enter","defaultModel":"large"}`)
		if code != 200 || out["theme"] != "dark" || out["updatedAt"] == nil {
			t.Fatalf("PUT: %d %v", code, out)
		}
		if code, out := call("PUT", `{"theme":"light"}`); code != 200 || out["instructions"] != "Always answer in French." || out["theme"] != "light" || out["sendKey"] != "ctrl-enter" {
			t.Fatalf("PUT of one field: %d %v, want the others kept", code, out)
		}
		for _, tc := range []struct{ name, body, code string }{
			{"unknown theme", `{"theme":"sepia"}`, "invalid_theme"},
			{"unknown send key", `{"sendKey":"shift"}`, "invalid_send_key"},
			{"a model not offered", `{"defaultModel":"gpt-9"}`, "invalid_model"},
			{"a control character", `{"instructions":"a\u0007b"}`, "invalid_instructions"},
			{"too long", `{"instructions":"` + strings.Repeat("é", maxInstructions+1) + `"}`, "invalid_instructions"},
			{"an unknown field", `{"colour":"red"}`, "invalid_json"},
			{"not JSON", `theme=dark`, "invalid_json"},
		} {
			code, out := call("PUT", tc.body)
			wantCode(t, tc.name, code, out, http.StatusBadRequest, tc.code)
		}
		if s, _ := st.GetSettings(t.Context(), testOwner.ID()); s.Theme != "light" || s.Instructions != "Always answer in French." || s.DefaultModel != "large" {
			t.Fatalf("stored after the refusals: %+v", s)
		}
		bob := identity.Principal{Issuer: testOwner.Issuer, Tenant: testOwner.Tenant, ObjectID: "bob"}
		if code, out := apitest.Call(t, "GET", settingsAPI(t, h.rt, bob), "", ""); code != 200 || out["instructions"] != "" {
			t.Fatalf("bob's settings: %d %v", code, out)
		}

		code, out = h.call(t, "POST", "/runs", `{"message":"bonjour"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs: %d %v", code, out)
		}
		waitHandled(t, st, out["runId"].(string), 1, 10*time.Second)
		reqs := ms.Requests()
		system := reqs[len(reqs)-1].Messages[0]
		if system.Role != "system" || !strings.HasPrefix(system.Content, DefaultSystemPrompt) || !strings.HasSuffix(system.Content, instructionsIntro+"Always answer in French.") {
			t.Fatalf("system message = %+v, want the system prompt and then the instructions", system)
		}
	})
}

// TestWithInstructions: instructions with no text add nothing; others
// follow the prompt after their introduction, as written.
func TestWithInstructions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ instructions, want string }{
		{"", "P"},
		{" \n\t ", "P"},
		{"Be brief.\n", "P" + instructionsIntro + "Be brief.\n"},
	} {
		if got := withInstructions("P", tc.instructions); got != tc.want {
			t.Errorf("withInstructions(%q) = %q, want %q", tc.instructions, got, tc.want)
		}
	}
}

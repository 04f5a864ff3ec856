package assistant

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// recordingProvider passes requests to a provider and keeps them.
type recordingProvider struct {
	model.Provider
	mu   sync.Mutex
	reqs []model.Request
	// fail, when set, fails the summariser's requests.
	fail bool
}

func (p *recordingProvider) Complete(ctx context.Context, req model.Request, onDelta func(string)) (model.Response, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	fail := p.fail && req.Summarize
	p.mu.Unlock()
	if fail {
		return model.Response{}, &model.Error{Provider: "demo", StatusCode: http.StatusServiceUnavailable, Message: "the model server answered 503"}
	}
	return p.Provider.Complete(ctx, req, onDelta)
}

func (p *recordingProvider) last() model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs[len(p.reqs)-1]
}

// sayAPI posts text to the run through the API and waits for its turn.
func (h *harness) sayAPI(t *testing.T, runID, text string) {
	t.Helper()
	code, out := h.call(t, "POST", "/runs/"+runID+"/messages?wait=30s", `{"content": `+string(mustJSON(text))+`}`)
	if code != http.StatusOK || out["status"] != TurnCompleted {
		t.Fatalf("POST message %q = %d %v", text, code, out)
	}
}

// TestContinueRun: POST …/compact summarises the run with the demo model
// (the embedded default) into a manual snapshot, opens a child that
// starts from the summary and names the run, and completes the run, whose
// log stays whole; the user carries on in the child, whose model context
// holds the summary; a retry with the key returns the child; what cannot
// be compacted is refused, and a failing summariser writes nothing.
func TestContinueRun(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		m := &recordingProvider{Provider: model.NewDemo()}
		h := newHarness(t, st, m, nil)
		code, out := h.call(t, "POST", "/runs", `{"title": "Trip", "metadata": {"compactRecentMessages": 6}}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		for _, text := range []string{"plan a trip to Lisbon in May", `call echo {"text": "flights booked: TP1234"}`, "what is left?"} {
			h.sayAPI(t, runID, text)
		}
		before, err := st.ListEvents(ctx, runID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}

		code, out = h.call(t, "POST", "/runs/"+runID+"/compact", "", "Idempotency-Key", "compact-1")
		if code != http.StatusCreated {
			t.Fatalf("POST compact = %d %v", code, out)
		}
		childID := out["runId"].(string)
		if from, _ := out["continuedFrom"].(map[string]any); from["runId"] != runID || from["snapshotVersion"] != 1.0 ||
			out["title"] != "Continued: Trip" || out["status"] != string(store.RunInProgress) || out["working"] != false {
			t.Errorf("child = %v", out)
		}
		if md, _ := json.Marshal(out["metadata"]); string(md) != `{"compactRecentMessages":6}` {
			t.Errorf("child metadata = %s, want the run's", md)
		}
		if req := m.last(); !req.Summarize || len(req.Tools) != 0 || !strings.Contains(req.Messages[1].Content, "TP1234") {
			t.Errorf("the summariser's request = %+v", req)
		}

		// The run: completed, whole, naming the child and its snapshot.
		code, out = h.call(t, "GET", "/runs/"+runID, "")
		run := out["run"].(map[string]any)
		snap, _ := out["snapshot"].(map[string]any)
		if code != http.StatusOK || run["status"] != string(store.RunCompleted) || !equalJSON(out["continuedIn"], []string{childID}) ||
			snap["kind"] != "manual" || snap["toSeq"] != float64(lastMessageSeq(t, before)) {
			t.Errorf("GET run = %d %v", code, out)
		}
		after, err := st.ListEvents(ctx, runID, 0, 1000)
		if err != nil || len(after) != len(before)+1 || after[len(before)].Type != EventRunContinued {
			t.Fatalf("the run's events: %d, was %d (%v)", len(after), len(before), err)
		}
		for i, e := range before {
			if a := after[i]; a.Seq != e.Seq || a.Type != e.Type || !bytes.Equal(a.Payload, e.Payload) {
				t.Errorf("event %d = %+v, was %+v", e.Seq, a, e)
			}
		}
		summary := snap["summary"].(string)
		if !strings.Contains(summary, "[user] plan a trip to Lisbon in May") {
			t.Errorf("summary = %q, want the demo's extract of the conversation", summary)
		}

		// The child opens with the summary; the user carries on in it,
		// and its model context holds the summary.
		code, out = h.call(t, "GET", "/runs/"+childID, "")
		first, _ := out["first"].([]any)
		if code != http.StatusOK || len(first) != 1 {
			t.Fatalf("GET child = %d %v", code, out)
		}
		if e := first[0].(map[string]any); e["type"] != EventSummaryMessage || e["data"].(map[string]any)["content"] != summary ||
			e["data"].(map[string]any)["fromRun"] != runID {
			t.Errorf("child's first message = %v", e)
		}
		h.sayAPI(t, childID, "and the hotel?")
		req := m.last()
		if len(req.Messages) != 3 || req.Messages[1].Role != model.RoleSystem ||
			req.Messages[1].Content != payload.SummaryMarker+"\n"+summaryHeading+summary || req.Messages[2].Content != "and the hotel?" {
			t.Errorf("the child's model request = %+v", req.Messages)
		}

		// A retry with the key: the child, and nothing more.
		code, out = h.call(t, "POST", "/runs/"+runID+"/compact", "", "Idempotency-Key", "compact-1")
		if code != http.StatusOK || out["runId"] != childID {
			t.Errorf("retried compact = %d %v, want the child", code, out)
		}

		// Refused.
		code, out = h.call(t, "POST", "/runs", "")
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		empty := out["runId"].(string)
		for _, tc := range []struct {
			name, path, body string
			code             int
			err              string
		}{
			{"no messages", "/runs/" + empty + "/compact", "", http.StatusConflict, "nothing_to_compact"},
			{"another owner's", "/runs/" + otherOwnersRun(t, st) + "/compact", "", http.StatusNotFound, "not_found"},
			{"missing", "/runs/run_00000000000000000000000000000000/compact", "", http.StatusNotFound, "not_found"},
			{"a body with members", "/runs/" + childID + "/compact", `{"force": true}`, http.StatusBadRequest, "invalid_json"},
			{"GET", "/runs/" + childID + "/compact", "", http.StatusMethodNotAllowed, "method_not_allowed"},
		} {
			method := "POST"
			if tc.name == "GET" {
				method = "GET"
			}
			code, out := h.call(t, method, tc.path, tc.body)
			if e, _ := out["error"].(map[string]any); code != tc.code || e["code"] != tc.err {
				t.Errorf("%s: %d %v, want %d %s", tc.name, code, out, tc.code, tc.err)
			}
		}

		// A failing summariser: 502, and nothing written.
		m.mu.Lock()
		m.fail = true
		m.mu.Unlock()
		childBefore, _ := st.ListEvents(ctx, childID, 0, 1000)
		code, out = h.call(t, "POST", "/runs/"+childID+"/compact", "")
		if e, _ := out["error"].(map[string]any); code != http.StatusBadGateway || e["code"] != "compaction_failed" ||
			!strings.Contains(e["message"].(string), "503") {
			t.Errorf("compact with a failing model = %d %v", code, out)
		}
		if r, _ := st.GetRun(ctx, childID); r.Status != store.RunInProgress {
			t.Errorf("the child is %s after a failed compaction", r.Status)
		}
		if snaps, _ := st.ListSnapshots(ctx, childID); len(snaps) != 1 {
			t.Errorf("the child has %d snapshots after a failed compaction, want its first", len(snaps))
		}
		if ev, _ := st.ListEvents(ctx, childID, 0, 1000); len(ev) != len(childBefore) {
			t.Errorf("a failed compaction wrote %d events", len(ev)-len(childBefore))
		}
		if got := h.rt.Compactions(); got.Written != 1 || got.Failed != 1 {
			t.Errorf("Compactions() = %+v, want one written and one failed", got)
		}
	})
}

// TestContinueRunDuringATurn: a run whose turn is queued or open is not
// compacted.
func TestContinueRunDuringATurn(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	release := make(chan struct{})
	called := make(chan struct{}, 1)
	slow := providerFunc(func(ctx context.Context, req model.Request) (model.Response, error) {
		if req.Summarize {
			t.Error("the run was summarised during its turn")
		}
		select {
		case called <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "done"}}, nil
	})
	h := newHarness(t, st, slow, nil)
	code, out := h.call(t, "POST", "/runs", `{"message": "take your time"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /runs = %d %v", code, out)
	}
	runID := out["runId"].(string)
	// Queued, claimed or running: never summarised.
	for i := 0; i < 2; i++ {
		code, out = h.call(t, "POST", "/runs/"+runID+"/compact", "")
		if e, _ := out["error"].(map[string]any); code != http.StatusConflict || e["code"] != "turn_in_progress" {
			t.Errorf("compact during a turn = %d %v", code, out)
		}
		if i == 0 {
			<-called
		}
	}
	close(release)
	waitHandled(t, st, runID, 1, 10*time.Second)
}

// lastMessageSeq is the sequence of the last message event of events.
func lastMessageSeq(t *testing.T, events []store.Event) int64 {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		if isMessageEvent(events[i].Type) {
			return events[i].Seq
		}
	}
	t.Fatal("no message")
	return 0
}

// otherOwnersRun opens a run of someone else, with a message.
func otherOwnersRun(t *testing.T, st store.Store) string {
	t.Helper()
	first := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "mine"})}
	r, _, err := st.OpenRun(t.Context(), store.Run{ID: newRunID(), Owner: "https://issuer.test|t|mallory"}, 5, &first)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// equalJSON reports whether a decoded JSON value equals want, encoded.
func equalJSON(got any, want any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	return bytes.Equal(a, b)
}

package assistant

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// runaway scripts a model that asks for one more tool call at every step,
// n times: with one call per slice, a turn of n slices.
func runaway(ms *modeltest.Server, n int) {
	for i := range n {
		ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "count", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
}

// checkBudgetStop runs a turn that would take 300 slices on a runtime
// whose budget is maxSlices: the run stops, failed, after exactly
// maxSlices slices, each with its step and its agent.step.end, and the
// reason is in the log (agent.run.budget) and in the turn's end.
func checkBudgetStop(t *testing.T, st store.Store, o Options, maxSlices int) {
	t.Helper()
	ctx := t.Context()
	ms := modeltest.NewServer(t)
	tools := newCountingTools(t, st)
	o.MaxToolCallsPerSlice, o.MaxSteps = 1, 1000
	rt, runID := startRuntime(t, st, ms, tools, o)
	runaway(ms, 300)
	e, _, _, err := rt.PostMessage(ctx, "owner", Sender{}, runID, "count for ever", "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := waitTurn(ctx, rt, "owner", runID, e.Seq, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := budgetMessage(maxSlices)
	if out.Status != TurnFailed || out.End == nil || out.End.Error != want {
		t.Fatalf("the turn = %s %+v, want failed: %q", out.Status, out.End, want)
	}
	r, err := st.GetRun(ctx, runID)
	if err != nil || r.Status != store.RunFailed {
		t.Fatalf("the run = %s, %v; want Failed", r.Status, err)
	}
	if n := len(tools.executions()); n != maxSlices {
		t.Errorf("%d tool calls ran, want %d: one per slice of the budget", n, maxSlices)
	}
	steps, err := st.ListSteps(ctx, runID, 0, store.MaxStepsPage)
	if err != nil || len(steps) != maxSlices {
		t.Fatalf("%d steps (%v), want %d", len(steps), err, maxSlices)
	}
	for i, s := range steps {
		kind := store.StepResume
		if i == 0 {
			kind = store.StepTurn
		}
		if s.Sequence != int64(i+1) || s.Kind != kind || s.Outcome != store.StepYielded || s.ModelSteps != 1 || s.ToolCalls != 1 || s.Attempts != 1 {
			t.Fatalf("step %d = %+v, want %s, yielded after one model step and one tool call", i+1, s, kind)
		}
	}
	var ends, budgets int
	for after := int64(0); ; {
		events, err := st.ListEvents(ctx, runID, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			switch e.Type {
			case EventStepEnd:
				ends++
			case EventRunBudget:
				var b RunBudget
				if err := json.Unmarshal(e.Payload, &b); err != nil || b.MaxSlices != maxSlices || b.Message != want {
					t.Errorf("%s = %s", EventRunBudget, e.Payload)
				}
				budgets++
			}
		}
		if len(events) < 500 {
			break
		}
		after = events[len(events)-1].Seq
	}
	if ends != maxSlices || budgets != 1 {
		t.Errorf("%d %s and %d %s events, want %d and 1", ends, EventStepEnd, budgets, EventRunBudget, maxSlices)
	}
}

// TestSliceBudget: a turn that would take 300 slices stops at a budget
// of 7, on both engines.
func TestSliceBudget(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		checkBudgetStop(t, st, Options{MaxSlices: 7}, 7)
	})
}

// TestSliceBudgetDefault: a run of 300 turns of one slice each stops at
// the default budget, 250 slices: the first 250 messages are answered,
// and the last 50 get their turn's end, failed, with the reason. (Turns
// of one slice keep each slice's history, and so the test, small.)
func TestSliceBudgetDefault(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewSQLite(t)
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	rt, runID := startRuntime(t, st, ms, newCountingTools(t, st), Options{})
	var last store.Event
	for i := range 300 {
		e, _, _, err := rt.PostMessage(ctx, "owner", Sender{}, runID, fmt.Sprintf("message %d", i), "")
		if err != nil {
			t.Fatal(err)
		}
		last = e
	}
	out, err := waitTurn(ctx, rt, "owner", runID, last.Seq, 5*time.Minute)
	want := budgetMessage(DefaultMaxSlices)
	if err != nil || out.Status != TurnFailed || out.End == nil || out.End.Error != want {
		t.Fatalf("the last turn = %+v, %v; want failed: %q", out, err, want)
	}
	if r, err := st.GetRun(ctx, runID); err != nil || r.Status != store.RunFailed {
		t.Fatalf("the run = %s, %v; want Failed", r.Status, err)
	}
	steps, err := st.ListSteps(ctx, runID, 0, store.MaxStepsPage)
	if err != nil || len(steps) != DefaultMaxSlices {
		t.Fatalf("%d steps (%v), want %d", len(steps), err, DefaultMaxSlices)
	}
	for i, s := range steps {
		if s.Sequence != int64(i+1) || s.Kind != store.StepTurn || s.Outcome != store.StepEnded || s.ModelSteps != 1 {
			t.Fatalf("step %d = %+v, want a turn ended after one model step", i+1, s)
		}
	}
	if n := len(ms.Requests()); n != DefaultMaxSlices {
		t.Errorf("the model was asked %d times, want %d", n, DefaultMaxSlices)
	}
	// Every message has its turn's end: completed up to the budget,
	// failed with the reason after it.
	ends := map[string]int{}
	for after := int64(0); ; {
		events, err := st.ListEvents(ctx, runID, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == EventTurnEnd {
				var end TurnEnd
				if err := json.Unmarshal(e.Payload, &end); err != nil {
					t.Fatal(err)
				}
				if end.Status == TurnFailed && end.Error != want {
					t.Errorf("a failed turn says %q, want %q", end.Error, want)
				}
				ends[end.Status]++
			}
			if e.Type == EventRunBudget {
				ends[EventRunBudget]++
			}
		}
		if len(events) < 500 {
			break
		}
		after = events[len(events)-1].Seq
	}
	if ends[TurnCompleted] != DefaultMaxSlices || ends[TurnFailed] != 300-DefaultMaxSlices || ends[EventRunBudget] != 1 {
		t.Errorf("turn ends and budget events = %v, want %d completed, %d failed, 1 budget", ends, DefaultMaxSlices, 300-DefaultMaxSlices)
	}
}

// TestStepEventType: the runtime's name of the step's event is the
// store's, which writes it.
func TestStepEventType(t *testing.T) {
	t.Parallel()
	if EventStepEnd != store.EventStepEnd {
		t.Errorf("EventStepEnd = %q, the store writes %q", EventStepEnd, store.EventStepEnd)
	}
}

// TestStepsRoute: GET …/steps pages through the run's steps for its
// owner, and refuses another user (404, as every run route does) and
// malformed paging (400 invalid_query).
func TestStepsRoute(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewSQLite(t)
	ms := modeltest.NewServer(t)
	tools := newCountingTools(t, st)
	rt, _ := startRuntime(t, st, ms, tools, Options{MaxSlices: 3, MaxToolCallsPerSlice: 1})
	owner := principalID("alice")
	run, _, err := rt.CreateRun(ctx, owner, Sender{}, NewRun{Title: "steps"})
	if err != nil {
		t.Fatal(err)
	}
	tools.mu.Lock()
	tools.runID = run.ID
	tools.mu.Unlock()
	runaway(ms, 10)
	e, _, _, err := rt.PostMessage(ctx, owner, Sender{}, run.ID, "count", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := waitTurn(ctx, rt, owner, run.ID, e.Seq, time.Minute); err != nil || out.Status != TurnFailed {
		t.Fatalf("turn = %+v, %v; want failed at the budget", out, err)
	}

	api := rt.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := identity.Principal{Issuer: "https://idp.example.com", ObjectID: r.Header.Get("X-Test-User")}
		api.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	get := func(user, query string) (int, map[string]json.RawMessage) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/assistant/runs/"+run.ID+"/steps"+query, nil)
		req.Header.Set("X-Test-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	page := func(query string) ([]StepView, bool) {
		t.Helper()
		code, body := get("alice", query)
		var steps []StepView
		var more bool
		if code != http.StatusOK || json.Unmarshal(body["steps"], &steps) != nil || json.Unmarshal(body["hasMore"], &more) != nil {
			t.Fatalf("GET steps%s = %d %s", query, code, body)
		}
		return steps, more
	}
	steps, more := page("?take=2")
	if len(steps) != 2 || !more || steps[0].Sequence != 1 || steps[1].Sequence != 2 ||
		steps[0].Key != "run:"+run.ID+":step:1" || steps[0].Kind != "turn" || steps[0].Outcome != "yielded" || steps[0].EndedAt.IsZero() {
		t.Fatalf("first page = %+v, more %v", steps, more)
	}
	if steps, more = page("?after=2&take=2"); len(steps) != 1 || more || steps[0].Sequence != 3 || steps[0].Kind != "resume" {
		t.Fatalf("second page = %+v, more %v", steps, more)
	}
	if steps, _ = page(""); len(steps) != 3 {
		t.Fatalf("default page = %+v, want the 3 steps", steps)
	}

	if code, body := get("mallory", ""); code != http.StatusNotFound || !strings.Contains(string(body["error"]), `"not_found"`) {
		t.Errorf("another user's GET = %d %s, want 404 not_found", code, body)
	}
	for _, bad := range []string{"?take=0", "?take=201", "?take=x", "?after=-1", "?after=1.5"} {
		if code, body := get("alice", bad); code != http.StatusBadRequest || !strings.Contains(string(body["error"]), `"invalid_query"`) {
			t.Errorf("GET steps%s = %d %s, want 400 invalid_query", bad, code, body)
		}
	}
}

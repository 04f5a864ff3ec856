package assistant

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestStopTurn: POST …/stop ends a turn whose model step is under way:
// the turn's end says stopped, the step is cancelled at once (long before
// the lease's renewal would notice), nothing more is written for it, and
// the run answers the next message as ever; with nothing running, or a
// closed or someone else's run, it is refused.
func TestStopTurn(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		stepping := make(chan struct{}, 1)
		cancelled := make(chan struct{}, 1)
		slowFirst := true
		m := providerFunc(func(ctx context.Context, req model.Request) (model.Response, error) {
			if slowFirst {
				slowFirst = false
				stepping <- struct{}{}
				<-ctx.Done()
				cancelled <- struct{}{}
				return model.Response{}, &model.Error{Provider: "test", Message: "the model step was cancelled"}
			}
			return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "fine"}}, nil
		})
		// A long lease: its renewal (every third of it) is no way to stop.
		h := newHarness(t, st, m, &Options{Lease: time.Minute})
		code, out := h.call(t, "POST", "/runs", `{"message": "take your time"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		<-stepping
		code, out = h.call(t, "POST", "/runs/"+runID+"/stop", "")
		if code != http.StatusOK || out["status"] != string(store.RunInProgress) {
			t.Fatalf("POST stop = %d %v", code, out)
		}
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the model step was not cancelled within 5 s of the stop")
		}
		ends := turnEnds(t, st, runID)
		if len(ends) != 1 || ends[0].Status != TurnStopped || ends[0].MessageSeq != 1 {
			t.Fatalf("turn ends = %+v, want the first stopped", ends)
		}
		// Nothing more is written for the stopped turn.
		r := waitIdle(t, st, runID)
		time.Sleep(100 * time.Millisecond)
		if again, _ := st.GetRun(ctx, runID); again.LastSeq != r.LastSeq {
			t.Errorf("the stopped turn wrote on: last seq %d, was %d", again.LastSeq, r.LastSeq)
		}
		// Stopping again: nothing to stop.
		code, out = h.call(t, "POST", "/runs/"+runID+"/stop", "")
		if e, _ := out["error"].(map[string]any); code != http.StatusConflict || e["code"] != "nothing_to_stop" {
			t.Errorf("stop with nothing running = %d %v", code, out)
		}
		// The run goes on.
		h.sayAPI(t, runID, "and now?")
		if ends := turnEnds(t, st, runID); len(ends) != 2 || ends[1].Status != TurnCompleted {
			t.Errorf("turn ends = %+v, want the next completed", ends)
		}
		for _, tc := range []struct {
			name, id string
			code     int
			err      string
		}{
			{"another owner's", otherOwnersRun(t, st), http.StatusNotFound, "not_found"},
			{"missing", "run_00000000000000000000000000000000", http.StatusNotFound, "not_found"},
		} {
			code, out := h.call(t, "POST", "/runs/"+tc.id+"/stop", "")
			if e, _ := out["error"].(map[string]any); code != tc.code || e["code"] != tc.err {
				t.Errorf("%s: %d %v, want %d %s", tc.name, code, out, tc.code, tc.err)
			}
		}
		if code, _ := h.call(t, "POST", "/runs/"+runID+"/complete", ""); code != http.StatusOK {
			t.Fatal("complete failed")
		}
		code, out = h.call(t, "POST", "/runs/"+runID+"/stop", "")
		if e, _ := out["error"].(map[string]any); code != http.StatusConflict || e["code"] != "operator_run_closed" {
			t.Errorf("stop of a completed run = %d %v", code, out)
		}
	})
}

// waitIdle waits until no process holds the run and nothing is queued.
func waitIdle(t *testing.T, st store.Store, id string) store.Run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := st.GetRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.LeaseOwner == "" && r.QueuedAt.IsZero() && r.TurnSeq == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still working: %+v", id, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

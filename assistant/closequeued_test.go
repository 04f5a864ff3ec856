package assistant

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestClosingARunEndsQueuedTurns: a message posted while a slow turn runs
// waits for its own turn; completing or cancelling the run then ends both
// turns, each with its reason — exactly one agent.turn.end per user
// message — and the client waiting for the queued message's turn is told
// its end.
func TestClosingARunEndsQueuedTurns(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		for _, to := range []string{"complete", "cancel"} {
			t.Run(to, func(t *testing.T) {
				stepping := make(chan struct{}, 1)
				m := providerFunc(func(ctx context.Context, req model.Request) (model.Response, error) {
					stepping <- struct{}{}
					<-ctx.Done()
					return model.Response{}, &model.Error{Provider: "test", Message: "cancelled"}
				})
				h := newHarness(t, st, m, &Options{Lease: time.Minute})
				code, out := h.call(t, "POST", "/runs", `{"message": "take your time"}`)
				if code != http.StatusCreated {
					t.Fatalf("POST /runs = %d %v", code, out)
				}
				runID := out["runId"].(string)
				<-stepping
				code, out = h.call(t, "POST", "/runs/"+runID+"/messages", `{"content": "and then this"}`, "Idempotency-Key", "queued-"+to)
				if code != http.StatusAccepted {
					t.Fatalf("POST message = %d %v", code, out)
				}
				seq := int64(out["seq"].(float64))
				waited := make(chan map[string]any, 1)
				go func() {
					_, out := h.call(t, "POST", "/runs/"+runID+"/messages?wait=30s", `{"content": "and then this"}`, "Idempotency-Key", "queued-"+to)
					waited <- out
				}()
				if code, out := h.call(t, "POST", "/runs/"+runID+"/"+to, ""); code != http.StatusOK {
					t.Fatalf("POST %s = %d %v", to, code, out)
				}
				ends := turnEnds(t, st, runID)
				if len(ends) != 2 || ends[0].MessageSeq != 1 || ends[1].MessageSeq != seq ||
					ends[0].Status != TurnCancelled || ends[1].Status != TurnCancelled || ends[1].Error == "" {
					t.Fatalf("turn ends = %+v, want one for message 1 and one for message %d, each with its reason", ends, seq)
				}
				select {
				case out := <-waited:
					if out["status"] != TurnCancelled || out["error"] != ends[1].Error || out["seq"] != float64(seq) {
						t.Errorf("the waiting client got %v, want the end of the turn of message %s", out, strconv.FormatInt(seq, 10))
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the waiting client got no answer")
				}
			})
		}
	})
}

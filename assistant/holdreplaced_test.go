package assistant

import (
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestReplacedSessionClosedOnRelease: a run's session in use when the run
// gets a new one (a second turn of the run in this process, the first
// not returned yet) is no longer held by anyone; returning it closes it,
// rather than leaving its MCP session open for as long as the process
// lives.
func TestReplacedSessionClosedOnRelease(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		url, ends := countingMCP(t)
		h := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, HoldIdle: time.Hour})
		heldAfterTurn(t, h, "run_replaced")
		g := Grant{Owner: testOwner.ID(), RunID: "run_replaced"}
		first, _, err := h.rt.holder.acquire(t.Context(), g)
		if err != nil {
			t.Fatal(err)
		}
		second, held, err := h.rt.holder.acquire(t.Context(), g)
		if err != nil || held || second == first {
			t.Fatalf("the second acquire while the first is in use = %p held %v, %v; want a new session", second, held, err)
		}
		before := ends.Load()
		h.rt.holder.release(first, false)
		if n := ends.Load() - before; n != 1 {
			t.Errorf("the replaced session's release ended %d MCP sessions, want 1", n)
		}
		h.rt.holder.release(second, false)
		if n := h.rt.HeldSessions(); n != 1 {
			t.Errorf("HeldSessions = %d, want 1 (the second)", n)
		}
		if n := ends.Load() - before; n != 1 {
			t.Errorf("returning the current session ended %d MCP sessions, want 1 (the replaced one only)", n)
		}
	})
}

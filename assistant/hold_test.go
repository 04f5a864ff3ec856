package assistant

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// countingMCP starts an MCP server that counts the sessions its clients
// end (DELETE with the session's id), and returns its URL and the count.
func countingMCP(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	tools := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	mcp.AddTool(tools, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tools }, nil)
	var ends atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.Header.Get("Mcp-Session-Id") != "" {
			ends.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		for ss := range tools.Sessions() {
			ss.Close()
		}
	})
	return srv.URL, &ends
}

// heldAfterTurn opens a run, waits for its turn, and returns the hold the
// store records for it.
func heldAfterTurn(t *testing.T, h *harness, id string) store.HeldSession {
	t.Helper()
	openRun(t, h.st, id, "hello")
	waitHandled(t, h.st, id, 1, 20*time.Second)
	hs, err := h.st.GetHold(t.Context(), id)
	if err != nil || !hs.ReleasedAt.IsZero() || hs.Replica != h.rt.o.ReplicaID {
		t.Fatalf("the run's hold after its turn = %+v, %v; want held by %s", hs, err, h.rt.o.ReplicaID)
	}
	if n := h.rt.HeldSessions(); n != 1 {
		t.Fatalf("HeldSessions = %d after the turn, want 1", n)
	}
	waitReturned(t, h.rt.holder, id)
	return hs
}

// waitReturned waits until the turn has returned the run's session to the
// holder. The turn ends in the store before it returns its session, so a
// run answered may still have its session in use for a moment: closing
// the run then closes the session only when the turn returns it.
func waitReturned(t *testing.T, h *holder, runID string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		s := h.sessions[runID]
		inUse := s != nil && s.inUse
		h.mu.Unlock()
		if !inUse {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn of %s did not return its session within 10s", runID)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCompletionReleasesHeldSession: completing a run releases its held
// MCP session at once (the upstream session ends before the API answers),
// not when the hold time runs out, and the store records why.
func TestCompletionReleasesHeldSession(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		url, ends := countingMCP(t)
		h := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, HoldIdle: time.Hour})
		heldAfterTurn(t, h, "run_done")
		if code, body := h.call(t, "POST", "/runs/run_done/complete", ""); code != 200 {
			t.Fatalf("complete = %d %v", code, body)
		}
		// Read at once: the store's notice of the release may reach the
		// holder's watch first, which then closes the session while the
		// complete call's forget waits for that close (about 1 run in 40
		// under load answered before the upstream session ended, when
		// forget did not wait).
		if n := ends.Load(); n != 1 {
			t.Errorf("upstream sessions ended after the complete call = %d, want 1", n)
		}
		if n := h.rt.HeldSessions(); n != 0 {
			t.Errorf("HeldSessions after completion = %d, want 0", n)
		}
		hs, err := st.GetHold(t.Context(), "run_done")
		if err != nil || hs.ReleasedAt.IsZero() || hs.Reason != store.ReleaseCompleted {
			t.Errorf("the hold after completion = %+v, %v; want released, completed", hs, err)
		}
		// A sweep later closes nothing more.
		h.rt.sweep(t.Context())
		if n := ends.Load(); n != 1 {
			t.Errorf("upstream sessions ended after a sweep = %d, want still 1", n)
		}
	})
}

// TestHeldSessionReleasedOnce: the run's completion, the hold's idle time
// and the reapers race to release one held session: it is released once
// in the store and its upstream session ends exactly once.
func TestHeldSessionReleasedOnce(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		url, ends := countingMCP(t)
		now := time.Now()
		var clock atomic.Int64
		clock.Store(now.UnixNano())
		h := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, HoldIdle: time.Minute,
			Now: func() time.Time { return time.Unix(0, clock.Load()) }})
		heldAfterTurn(t, h, "run_race")
		clock.Add(int64(2 * time.Minute)) // the hold is idle now

		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			if _, err := h.rt.Close(t.Context(), testOwner.ID(), "run_race", store.RunCompleted); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		for range 3 {
			wg.Go(func() {
				<-start
				h.rt.sweep(t.Context())
			})
		}
		close(start)
		wg.Wait()
		h.rt.sweep(t.Context())
		if n := ends.Load(); n != 1 {
			t.Errorf("upstream sessions ended = %d, want exactly 1", n)
		}
		hs, err := st.GetHold(t.Context(), "run_race")
		if err != nil || hs.ReleasedAt.IsZero() || (hs.Reason != store.ReleaseCompleted && hs.Reason != store.ReleaseHoldIdle) {
			t.Errorf("the hold = %+v, %v; want released once, by the completion or the idle time", hs, err)
		}
		t.Logf("released: %s", hs.Reason)
		if n := h.rt.HeldSessions(); n != 0 {
			t.Errorf("HeldSessions = %d, want 0", n)
		}
	})
}

// pausedIdleRelease is a store whose first release of a hold for idleness
// waits, once it has begun, until proceed is closed.
type pausedIdleRelease struct {
	store.Store
	once             sync.Once
	entered, proceed chan struct{}
}

func (p *pausedIdleRelease) ReleaseHold(ctx context.Context, runID, holdID, reason string) (bool, error) {
	if reason == store.ReleaseHoldIdle {
		first := false
		p.once.Do(func() { first = true })
		if first {
			close(p.entered)
			<-p.proceed
		}
	}
	return p.Store.ReleaseHold(ctx, runID, holdID, reason)
}

// TestHoldBeingReleasedIsNotLost: a sweep that finds an idle session takes
// it out of the process before the store has released its hold; another
// sweep meanwhile sees the hold and no session, and must not release the
// hold as lost: it is released once, for idleness.
func TestHoldBeingReleasedIsNotLost(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		paused := &pausedIdleRelease{Store: st, entered: make(chan struct{}), proceed: make(chan struct{})}
		url, ends := countingMCP(t)
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		h := newHarness(t, paused, model.NewDemo(), &Options{MCPURL: url, HoldIdle: time.Minute,
			Now: func() time.Time { return time.Unix(0, clock.Load()) }})
		heldAfterTurn(t, h, "run_idle")
		clock.Add(int64(2 * time.Minute))

		first := make(chan struct{})
		go func() {
			defer close(first)
			h.rt.sweep(t.Context())
		}()
		<-paused.entered // the first sweep releases the hold, and waits
		h.rt.sweep(t.Context())
		close(paused.proceed)
		<-first
		hs, err := st.GetHold(t.Context(), "run_idle")
		if err != nil || hs.ReleasedAt.IsZero() || hs.Reason != store.ReleaseHoldIdle {
			t.Errorf("the hold = %+v, %v; want released for idleness", hs, err)
		}
		if n := ends.Load(); n != 1 {
			t.Errorf("upstream sessions ended = %d, want 1", n)
		}
	})
}

// TestOneHolderPerRun: a run whose turns alternate between two replicas
// is held by one at a time: the replica that connects takes the hold
// over, and the other, at its reap, closes its session. Both replicas'
// heartbeats are alive, so neither takes the other for gone.
func TestOneHolderPerRun(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		url, ends := countingMCP(t)
		for _, id := range []string{"replica-a", "replica-b"} {
			if _, err := st.BeatReplica(t.Context(), store.Replica{ID: id, Version: "v1", StartedAt: time.Now()}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		a := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, ReplicaID: "replica-a", HoldIdle: time.Hour})
		heldAfterTurn(t, a, "run_shared")
		a.rt.Stop() // b takes the next turn
		// Stopping released a's hold; hold it again, as a replica that
		// died holding it would.
		if _, err := st.HoldSession(t.Context(), store.HeldSession{RunID: "run_shared", Replica: "replica-a", HoldID: "a-hold"}); err != nil {
			t.Fatal(err)
		}
		b := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, ReplicaID: "replica-b", HoldIdle: time.Hour})
		// The message's own seq: the run's last may already be b's turn's.
		msg, _, err := st.PostMessage(t.Context(), "run_shared", store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "again"})})
		if err != nil {
			t.Fatal(err)
		}
		waitHandled(t, st, "run_shared", msg.Seq, 20*time.Second)
		hs, err := st.GetHold(t.Context(), "run_shared")
		if err != nil || hs.Replica != "replica-b" || !hs.ReleasedAt.IsZero() {
			t.Errorf("the hold after b's turn = %+v, %v; want b's", hs, err)
		}
		if n := b.rt.HeldSessions(); n != 1 {
			t.Errorf("b holds %d sessions, want 1", n)
		}
		if n := ends.Load(); n != 1 {
			t.Errorf("upstream sessions ended = %d, want a's one", n)
		}
	})
}

// TestTakeoverClosesTheOtherHold: when another replica takes a run's hold
// over, the replica that held it closes its session at once (told by the
// store's notification), not at its next sweep (an hour away here): two
// replicas never keep one run's session.
func TestTakeoverClosesTheOtherHold(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		url, ends := countingMCP(t)
		a := newHarness(t, st, model.NewDemo(), &Options{MCPURL: url, ReplicaID: "replica-a", HoldIdle: time.Hour})
		heldAfterTurn(t, a, "run_moved")
		if _, err := st.HoldSession(t.Context(), store.HeldSession{RunID: "run_moved", Replica: "replica-b", HoldID: "b-hold"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for (ends.Load() == 0 || a.rt.HeldSessions() != 0) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n, held := ends.Load(), a.rt.HeldSessions(); n != 1 || held != 0 {
			t.Errorf("after b took the hold over: upstream sessions ended = %d, a holds %d; want 1 and 0", n, held)
		}
	})
}

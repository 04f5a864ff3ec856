package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The runtime's durability: no message is stranded whatever a turn's
// failure, a dead replica's run is taken over as its lease expires, a
// message posted with an Idempotency-Key is stored once, and a turn closed
// mid-way ends for the message it answered. Each test runs on both
// engines.

// engines are the stores the tests run on.
var engines = []struct {
	name string
	open func(testing.TB) store.Store
}{{"sqlite", storetest.NewSQLite}, {"postgres", storetest.NewPostgres}}

// forEachEngine runs test on each engine, in parallel: each gets a store
// of its own.
func forEachEngine(t *testing.T, test func(t *testing.T, st store.Store)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			test(t, e.open(t))
		})
	}
}

var errInjected = errors.New("injected database fault")

// faultyStore is a real store that fails the calls a turn makes, on
// demand: the faults a database flap, or a bug, injects into a turn.
type faultyStore struct {
	store.Store
	failClaims  atomic.Int32 // ClaimRuns calls still to fail
	failAppends atomic.Int32 // AppendLeased and RecordContext calls still to fail
	failReads   atomic.Int32 // ListMessages calls still to fail
	panicReads  atomic.Int32 // ListMessages calls still to panic
	failEnds    atomic.Int32 // EndLease calls still to fail
}

func (f *faultyStore) EndLease(ctx context.Context, l store.Lease, r store.Release, events ...store.NewEvent) ([]store.Event, store.Run, error) {
	if f.failEnds.Add(-1) >= 0 {
		return nil, store.Run{}, errInjected
	}
	return f.Store.EndLease(ctx, l, r, events...)
}

func (f *faultyStore) ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]store.Run, error) {
	if f.failClaims.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.Store.ClaimRuns(ctx, owner, limit, leaseFor)
}

func (f *faultyStore) AppendLeased(ctx context.Context, l store.Lease, events ...store.NewEvent) ([]store.Event, error) {
	if f.failAppends.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.Store.AppendLeased(ctx, l, events...)
}

// RecordContext is an append too: a turn's start carries its context.
func (f *faultyStore) RecordContext(ctx context.Context, l store.Lease, c store.RunContext, events ...store.NewEvent) ([]store.Event, error) {
	if f.failAppends.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.Store.RecordContext(ctx, l, c, events...)
}

func (f *faultyStore) ListMessages(ctx context.Context, runID string, q store.MessageQuery) ([]store.Event, error) {
	if f.panicReads.Add(-1) >= 0 {
		panic("injected panic")
	}
	if f.failReads.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.Store.ListMessages(ctx, runID, q)
}

// testOwner is the principal every harness request is made as.
var testOwner = identity.Principal{Issuer: "https://issuer.test", Tenant: "t", ObjectID: "alice"}

// harness is a runtime on a store, with a real MCP server (one tool) for
// its turns and its API on loopback, signed in as testOwner.
type harness struct {
	st  store.Store // as the runtime sees it
	rt  *Runtime
	api string
}

// scriptedModel starts a scripted model server and returns it with a
// provider of model "scripted" that talks to it.
func scriptedModel(t *testing.T) (*modeltest.Server, *model.OpenAI) {
	t.Helper()
	ms := modeltest.NewServer(t)
	provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	return ms, provider
}

// newHarness starts a runtime on st. The sweep runs once an hour, so that
// what the tests see is not the sweep's doing. Its turns reach the echo
// tool's MCP server, unless opts names another (MCPURL).
func newHarness(t *testing.T, st store.Store, m model.Provider, opts *Options) *harness {
	t.Helper()
	tools := mcp.NewServer(&mcp.Implementation{Name: "test-tools", Version: "1"}, nil)
	mcp.AddTool(tools, &mcp.Tool{Name: "echo", Description: "Echoes its text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tools }, nil))
	t.Cleanup(func() {
		mcpSrv.Close()
		// The handler keeps stateful sessions (and their goroutines)
		// until they are closed.
		for ss := range tools.Sessions() {
			ss.Close()
		}
	})

	var o Options
	if opts != nil {
		o = *opts
	}
	o.Store, o.Model = st, m
	if o.MCPURL == "" {
		o.MCPURL = mcpSrv.URL
	}
	o.Tokens = func(context.Context, Grant) oauth2.TokenSource {
		return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "test-token"})
	}
	setDefault(&o.SweepInterval, time.Hour)
	rt, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	h := rt.Handler()
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), testOwner)))
	}))
	t.Cleanup(apiSrv.Close)
	return &harness{st: st, rt: rt, api: apiSrv.URL + "/api/assistant"}
}

// call sends one API request, always as JSON, and decodes the JSON answer.
func (h *harness) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	return apitest.Call(t, method, h.api+path, "", body, append([]string{"Content-Type", "application/json"}, header...)...)
}

// openRun opens a run of testOwner with an opening message.
func openRun(t *testing.T, st store.Store, id, text string) store.Run {
	t.Helper()
	first := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: text}), Preview: text}
	r, _, err := st.OpenRun(t.Context(), store.Run{ID: id, Owner: testOwner.ID()}, DefaultMaxActiveRuns, &first)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitHandled waits until the run has answered the message seq.
func waitHandled(t *testing.T, st store.Store, id string, seq int64, within time.Duration) store.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := st.GetRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.HandledSeq >= seq && r.LeaseOwner == "" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %d of %s not answered within %s: %+v", seq, id, within, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// turnEnds returns the run's agent.turn.end records, and checks that each
// follows exactly one agent.turn.start of the same message.
func turnEnds(t *testing.T, st store.Store, id string) []TurnEnd {
	t.Helper()
	events, err := st.ListEvents(t.Context(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ends []TurnEnd
	open := int64(0)
	for _, e := range events {
		switch e.Type {
		case EventTurnStart:
			var s TurnStart
			json.Unmarshal(e.Payload, &s)
			if open != 0 {
				t.Fatalf("turn of message %d started while the turn of %d is open", s.MessageSeq, open)
			}
			open = s.MessageSeq
		case EventTurnEnd:
			var end TurnEnd
			json.Unmarshal(e.Payload, &end)
			if end.MessageSeq != open || open == 0 {
				t.Fatalf("turn end for message %d, the open turn is of %d", end.MessageSeq, open)
			}
			open = 0
			ends = append(ends, end)
		}
	}
	return ends
}

// TestFailedTurnIsRetried: a turn that fails before it starts (the
// database fails the turn's reads, or its first append, or a bug panics)
// leaves its run queued for a retry after a backoff, and the message gets
// its one answer, without the sweep.
func TestFailedTurnIsRetried(t *testing.T) {
	t.Parallel()
	for _, fault := range []struct {
		name   string
		inject func(f *faultyStore)
	}{
		{"reads", func(f *faultyStore) { f.failReads.Store(2) }},
		{"appends", func(f *faultyStore) { f.failAppends.Store(2) }},
		{"panic", func(f *faultyStore) { f.panicReads.Store(1) }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, st store.Store) {
				f := &faultyStore{Store: st}
				fault.inject(f)
				openRun(t, st, "run_retried", "hello")
				newHarness(t, f, model.NewDemo(), &Options{RetryBackoff: 50 * time.Millisecond})
				r := waitHandled(t, st, "run_retried", 1, 20*time.Second)
				ends := turnEnds(t, st, "run_retried")
				if len(ends) != 1 || ends[0].Status != TurnCompleted {
					t.Fatalf("turn ends = %+v, want one, completed", ends)
				}
				if r.Failures != 0 || !r.QueuedAt.IsZero() {
					t.Errorf("run after the answer = %+v, want no failures left, not queued", r)
				}
			})
		})
	}
}

// TestFailedReleaseIsHandedBack: a turn whose end the database fails to
// record, and then the run's release too, hands the run back as soon as
// the database answers again — its message answered once, within seconds —
// rather than leaving it leased until the lease expires (30 s here).
func TestFailedReleaseIsHandedBack(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		f := &faultyStore{Store: st}
		// The turn's end, the release after it, and the first hand-back.
		f.failEnds.Store(3)
		openRun(t, st, "run_handed", "hello")
		newHarness(t, f, model.NewDemo(), &Options{Lease: 30 * time.Second, RetryBackoff: 50 * time.Millisecond})
		waitHandled(t, st, "run_handed", 1, 10*time.Second)
		if ends := turnEnds(t, st, "run_handed"); len(ends) != 1 || ends[0].Status != TurnCompleted {
			t.Errorf("turn ends = %+v, want one, completed", ends)
		}
		if n := f.failEnds.Load(); n >= 0 {
			t.Errorf("EndLease failures left to inject: %d; want all three used", n+1)
		}
	})
}

// TestOutageWakesRetries: a run waiting out a retry's backoff (an hour
// here) waits while the store answers, and goes as soon as a claim
// succeeds after failed ones (the database is back), its message answered
// once — not an hour later.
func TestOutageWakesRetries(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		openRun(t, st, "run_backoff", "hello")
		claimed, err := st.ClaimRuns(ctx, "replica-gone", 1, time.Minute)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
		}
		if _, _, err := st.EndLease(ctx, claimed[0].Lease(), store.Release{Retry: time.Hour}); err != nil {
			t.Fatal(err)
		}
		f := &faultyStore{Store: st}
		newHarness(t, f, model.NewDemo(), nil)

		// The store answers: another run is answered, this one waits.
		openRun(t, st, "run_other", "hello")
		waitHandled(t, st, "run_other", 1, 20*time.Second)
		if r, err := st.GetRun(ctx, "run_backoff"); err != nil || r.HandledSeq != 0 || r.NotBefore.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("the run waiting out its backoff, with no outage = %+v, %v; want it waiting", r, err)
		}

		// Claims fail, then succeed: the run goes.
		f.failClaims.Store(2)
		openRun(t, st, "run_during", "hello")
		waitHandled(t, st, "run_during", 1, 20*time.Second)
		r := waitHandled(t, st, "run_backoff", 1, 20*time.Second)
		if ends := turnEnds(t, st, "run_backoff"); len(ends) != 1 || ends[0].Status != TurnCompleted || r.Failures != 0 {
			t.Errorf("the woken run's turn ends = %+v, failures %d; want one, completed, none left", ends, r.Failures)
		}
	})
}

// TestFailedClaimIsRetried: a claim the database fails is tried again
// soon, not at the next sweep or the next message.
func TestFailedClaimIsRetried(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		f := &faultyStore{Store: st}
		f.failClaims.Store(2)
		openRun(t, st, "run_unclaimed", "hello")
		newHarness(t, f, model.NewDemo(), nil)
		waitHandled(t, st, "run_unclaimed", 1, 20*time.Second)
	})
}

// TestFailingTurnEndsVisibly: a turn that keeps failing ends, after a
// bounded number of tries, with a visible failed end for its message.
func TestFailingTurnEndsVisibly(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		f := &faultyStore{Store: st}
		f.failAppends.Store(1 << 20)
		openRun(t, st, "run_failing", "hello")
		reg := prometheus.NewRegistry()
		newHarness(t, f, model.NewDemo(), &Options{RetryBackoff: 10 * time.Millisecond, Registerer: reg})
		waitHandled(t, st, "run_failing", 1, 30*time.Second)
		if n := metricValue(t, reg, "usher_assistant_turns_retried_total"); n != maxFailures-1 {
			t.Errorf("usher_assistant_turns_retried_total = %v, want %d: every failure but the last is retried", n, maxFailures-1)
		}
		ends := turnEnds(t, st, "run_failing")
		if len(ends) != 1 || ends[0].Status != TurnFailed || ends[0].Error == "" {
			t.Fatalf("turn ends = %+v, want one, failed, with its error", ends)
		}
		if tries := 1<<20 - f.failAppends.Load(); tries != maxFailures {
			t.Errorf("the turn was tried %d times, want %d", tries, maxFailures)
		}
	})
}

// TestSweepFindsUnansweredMessage: a user message that no turn answers,
// on a run neither queued nor leased (as a worker that failed without
// queueing left one), is found by the sweep and answered.
func TestSweepFindsUnansweredMessage(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		r, _, err := st.OpenRun(ctx, store.Run{ID: "run_stranded", Owner: testOwner.ID()}, DefaultMaxActiveRuns, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := st.AppendEvent(ctx, r.ID, EventUserMessage, mustJSON(UserMessage{Content: "anyone?"}))
		if err != nil {
			t.Fatal(err)
		}
		newHarness(t, st, model.NewDemo(), &Options{SweepInterval: 100 * time.Millisecond})
		waitHandled(t, st, r.ID, ev.Seq, 20*time.Second)
		if ends := turnEnds(t, st, r.ID); len(ends) != 1 || ends[0].MessageSeq != ev.Seq {
			t.Fatalf("turn ends = %+v, want one for message %d", ends, ev.Seq)
		}
	})
}

// TestTakeoverAtLeaseExpiry: a run whose replica died holding its lease
// is taken over as the lease expires, not at the next sweep (an hour
// away). It measures how late the takeover comes, so it runs alone, one
// engine after the other.
func TestTakeoverAtLeaseExpiry(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { testTakeoverAtLeaseExpiry(t, e.open(t)) })
	}
}

func testTakeoverAtLeaseExpiry(t *testing.T, st store.Store) {
	const lease = 3 * time.Second
	openRun(t, st, "run_orphaned", "hello")
	claimed, err := st.ClaimRuns(t.Context(), "dead-replica", 1, lease)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
	}
	newHarness(t, st, model.NewDemo(), &Options{Lease: lease})
	waitHandled(t, st, "run_orphaned", 1, 20*time.Second)
	ends := turnEnds(t, st, "run_orphaned")
	if len(ends) != 1 || ends[0].Status != TurnCompleted {
		t.Fatalf("turn ends = %+v, want one, completed", ends)
	}
	events, _ := st.ListEvents(t.Context(), "run_orphaned", 0, 100)
	var started time.Time
	for _, e := range events {
		if e.Type == EventTurnStart {
			started = e.CreatedAt
		}
	}
	late := started.Sub(claimed[0].LeaseExpiresAt)
	t.Logf("the turn started %s after the dead replica's lease expired", late)
	if late < 0 || late > 5*time.Second {
		t.Errorf("the turn started %s after the lease expired, want within 5s", late)
	}
}

// TestIdempotentMessages: a message posted with an Idempotency-Key is
// stored once, however often and however concurrently it is posted, and
// gets one turn; the same key with another message is refused.
func TestIdempotentMessages(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		code, run := h.call(t, "POST", "/runs", `{"title":"keys"}`)
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		id := run["runId"].(string)

		const posters = 10
		var wg sync.WaitGroup
		codes := make([]int, posters)
		seqs := make([]any, posters)
		start := make(chan struct{})
		for i := range posters {
			wg.Go(func() {
				<-start
				var body map[string]any
				codes[i], body = h.call(t, "POST", "/runs/"+id+"/messages?wait=20s", `{"content":"hello"}`, "Idempotency-Key", "k-1")
				seqs[i] = body["seq"]
			})
		}
		close(start)
		wg.Wait()
		for i := range posters {
			if codes[i] != 200 || seqs[i] != seqs[0] {
				t.Errorf("post %d = %d, seq %v; want 200 and the one message's seq %v", i, codes[i], seqs[i], seqs[0])
			}
		}
		r, _ := st.GetRun(t.Context(), id)
		if r.MessageCount != 2 { // the message and its answer
			t.Errorf("run has %d messages after %d posts with one key, want the message and its answer", r.MessageCount, posters)
		}
		if ends := turnEnds(t, st, id); len(ends) != 1 {
			t.Errorf("turn ends = %+v, want one", ends)
		}

		// A retry later answers with the same message; another message
		// with the key is refused; another key is another message.
		if code, body := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"hello"}`, "Idempotency-Key", "k-1"); code != 202 || body["seq"] != seqs[0] {
			t.Errorf("retry = %d %v, want 202 with seq %v", code, body, seqs[0])
		}
		if code, body := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"something else"}`, "Idempotency-Key", "k-1"); code != 409 || body["error"].(map[string]any)["code"] != "idempotency_key_reused" {
			t.Errorf("another message with the key = %d %v, want 409 idempotency_key_reused", code, body)
		}
		if code, body := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"x"}`, "Idempotency-Key", strings.Repeat("k", 201)); code != 400 {
			t.Errorf("a key over 200 bytes = %d %v, want 400", code, body)
		}
		code, body := h.call(t, "POST", "/runs/"+id+"/messages?wait=20s", `{"content":"hello"}`, "Idempotency-Key", "k-2")
		if code != 200 || body["seq"] == seqs[0] {
			t.Errorf("another key = %d %v, want a new message", code, body)
		}
		// A retry after the run was completed still gets its message.
		if code, _ := h.call(t, "POST", "/runs/"+id+"/complete", ""); code != 200 {
			t.Fatalf("complete = %d", code)
		}
		if code, body := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"hello"}`, "Idempotency-Key", "k-1"); code != 202 || body["seq"] != seqs[0] {
			t.Errorf("retry after the run completed = %d %v, want 202 with seq %v", code, body, seqs[0])
		}
		if code, _ := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"hello"}`, "Idempotency-Key", "k-3"); code != 409 {
			t.Errorf("a new message to a completed run = %d, want 409", code)
		}
	})
}

// slowFollowStore fails reading the run back while a post waits for its
// turn: the message is stored, but following its turn fails.
type slowFollowStore struct {
	store.Store
	failGets atomic.Bool
}

func (s *slowFollowStore) GetRun(ctx context.Context, id string) (store.Run, error) {
	if s.failGets.Load() {
		return store.Run{}, errInjected
	}
	return s.Store.GetRun(ctx, id)
}

func (s *slowFollowStore) PostMessageOnce(ctx context.Context, runID string, e store.NewEvent, key string) (store.Event, store.Run, bool, error) {
	ev, r, created, err := s.Store.PostMessageOnce(ctx, runID, e, key)
	s.failGets.Store(true) // from here on, reading the run back fails
	return ev, r, created, err
}

// TestStoredMessageIsNeverA500: when following a stored message's turn
// fails (?wait reads the run back), the answer is the stored message
// (202), not an error.
func TestStoredMessageIsNeverA500(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		slow := &slowFollowStore{Store: st}
		m := modeltest.NewServer(t)
		release := m.Hold() // the turn does not end while the post waits
		t.Cleanup(release)
		provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: m.URL(), Model: "scripted", APIKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, slow, provider, nil)
		code, run := h.call(t, "POST", "/runs", `{"title":"flaky"}`)
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		id := run["runId"].(string)
		code, body := h.call(t, "POST", "/runs/"+id+"/messages?wait=10s", `{"content":"hello"}`, "Idempotency-Key", "k-1")
		if code != 202 || body["status"] != "queued" || body["seq"] != float64(1) {
			t.Fatalf("post whose turn could not be followed = %d %v, want 202 with the stored message", code, body)
		}
		if evs, _ := st.ListMessages(t.Context(), id, store.MessageQuery{Limit: 10}); len(evs) != 1 {
			t.Fatalf("%d messages stored, want 1", len(evs))
		}
	})
}

// lostAnswerStore stores a message and then reports an error, once: the
// write committed, but its answer was lost on the way back.
type lostAnswerStore struct {
	store.Store
	lose atomic.Int32
}

func (s *lostAnswerStore) OpenRun(ctx context.Context, r store.Run, maxActive int, first *store.NewEvent) (store.Run, bool, error) {
	out, created, err := s.Store.OpenRun(ctx, r, maxActive, first)
	if err == nil && s.lose.Add(-1) >= 0 {
		return store.Run{}, false, errInjected
	}
	return out, created, err
}

func (s *lostAnswerStore) PostMessageOnce(ctx context.Context, runID string, e store.NewEvent, key string) (store.Event, store.Run, bool, error) {
	ev, r, created, err := s.Store.PostMessageOnce(ctx, runID, e, key)
	if err == nil && s.lose.Add(-1) >= 0 {
		return store.Event{}, store.Run{}, false, errInjected
	}
	return ev, r, created, err
}

// TestLostPostAnswerIsRetried: a post (or a creation with an opening
// message) whose write committed but whose answer was lost is tried again
// with its key (the client's, or one of the server's own), which finds
// what was stored: one run, one message each, not a 500 and not a second
// one.
func TestLostPostAnswerIsRetried(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		lossy := &lostAnswerStore{Store: st}
		h := newHarness(t, lossy, model.NewDemo(), nil)
		lossy.lose.Store(1)
		code, run := h.call(t, "POST", "/runs", `{"title":"lossy","message":"hello"}`)
		if code != 201 {
			t.Fatalf("create whose answer was lost = %d %v, want 201", code, run)
		}
		if runs, _ := st.ListRuns(t.Context(), testOwner.ID()); len(runs) != 1 {
			t.Fatalf("%d runs after one create, want 1", len(runs))
		}
		id := run["runId"].(string)
		for i, key := range []string{"", "k-1"} {
			lossy.lose.Store(1)
			code, body := h.call(t, "POST", "/runs/"+id+"/messages", fmt.Sprintf(`{"content":"message %d"}`, i), "Idempotency-Key", key)
			if code != 202 || body["seq"] == nil {
				t.Fatalf("post with key %q whose answer was lost = %d %v, want 202 with the stored message", key, code, body)
			}
		}
		users := 0
		evs, _ := st.ListMessages(t.Context(), id, store.MessageQuery{Limit: 100})
		for _, e := range evs {
			if e.Type == EventUserMessage {
				users++
			}
		}
		if users != 3 {
			t.Fatalf("%d user messages stored for a create and two posts, want 3", users)
		}
	})
}

// TestCloseMidTurnEndsItsMessage: a run completed, cancelled or deleted
// mid-turn ends the turn with the messageSeq of the turn's start.
func TestCloseMidTurnEndsItsMessage(t *testing.T) {
	t.Parallel()
	for _, close := range []struct{ method, path string }{
		{"POST", "/complete"}, {"POST", "/cancel"}, {"DELETE", ""},
	} {
		t.Run(strings.TrimPrefix(close.method+close.path, "POST/"), func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, st store.Store) {
				m := modeltest.NewServer(t)
				m.SetDefaultReply("ok")
				provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: m.URL(), Model: "scripted", APIKey: "k"})
				if err != nil {
					t.Fatal(err)
				}
				h := newHarness(t, st, provider, nil)
				_, run := h.call(t, "POST", "/runs", `{"title":"t"}`)
				id := run["runId"].(string)
				// A first turn, so that the open turn's message is not
				// the first event.
				if code, body := h.call(t, "POST", "/runs/"+id+"/messages?wait=20s", `{"content":"one"}`); code != 200 {
					t.Fatalf("first turn = %d %v", code, body)
				}
				t.Cleanup(m.Hold())
				code, body := h.call(t, "POST", "/runs/"+id+"/messages", `{"content":"two"}`)
				if code != 202 {
					t.Fatalf("post = %d %v", code, body)
				}
				seq := int64(body["seq"].(float64))
				if err := m.WaitHeld(t.Context(), 1); err != nil {
					t.Fatal(err)
				}
				if code, body := h.call(t, close.method, "/runs/"+id+close.path, ""); code != 200 && code != 204 {
					t.Fatalf("%s %s = %d %v", close.method, close.path, code, body)
				}
				ends := turnEnds(t, st, id)
				if len(ends) != 2 || ends[1].MessageSeq != seq || ends[1].Status != TurnCancelled {
					t.Fatalf("turn ends = %+v, want the second cancelled for message %d", ends, seq)
				}
			})
		})
	}
}

// TestRetryBackoff: the backoff doubles up to its cap.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	rt := &Runtime{o: Options{RetryBackoff: time.Second}}
	var got []string
	for f := range 9 {
		got = append(got, rt.retryBackoff(f).String())
	}
	if s := fmt.Sprint(got); s != "[1s 2s 4s 8s 16s 32s 1m0s 1m0s 1m0s]" {
		t.Fatalf("backoffs = %s", s)
	}
}

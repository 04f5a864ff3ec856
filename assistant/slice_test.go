package assistant

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// execution is one run of the counting tool: its argument, the tool call
// id the runner named it with, and the run's fencing token then (which
// names the slice: each claim of the run increments it).
type execution struct {
	n      int
	callID string
	token  int64
}

// countingTools is an MCP server with one tool, "count", that records
// every time it runs. It has no idempotency of its own: every call the
// runner sends runs.
type countingTools struct {
	url string
	st  store.Store

	mu    sync.Mutex
	runID string
	runs  []execution
}

func newCountingTools(t *testing.T, st store.Store) *countingTools {
	t.Helper()
	c := &countingTools{st: st}
	srv := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "count", Description: "Counts."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			N int `json:"n"`
		}) (*mcp.CallToolResult, any, error) {
			c.mu.Lock()
			runID := c.runID
			c.mu.Unlock()
			r, err := st.GetRun(ctx, runID)
			if err != nil {
				return nil, nil, err
			}
			id, _ := req.Params.Meta[metaToolCallID].(string)
			c.mu.Lock()
			c.runs = append(c.runs, execution{n: in.N, callID: id, token: r.FencingToken})
			c.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("counted %d", in.N)}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.Close()
		// The handler keeps stateful sessions (and their goroutines)
		// until they are closed.
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	c.url = hs.URL
	return c
}

func (c *countingTools) executions() []execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.runs)
}

// startRuntime runs a runtime on st with the scripted model and the
// counting tools, and opens a run whose id the tools know.
func startRuntime(t *testing.T, st store.Store, ms *modeltest.Server, tools *countingTools, o Options) (*Runtime, string) {
	t.Helper()
	provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	o.Store, o.Model, o.MCPURL = st, provider, tools.url
	o.Tokens = func(context.Context, Grant) oauth2.TokenSource {
		return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unused"})
	}
	rt, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	r, _, err := rt.CreateRun(t.Context(), "owner", Sender{}, NewRun{Title: "counting"})
	if err != nil {
		t.Fatal(err)
	}
	tools.mu.Lock()
	tools.runID = r.ID
	tools.mu.Unlock()
	return rt, r.ID
}

// waitTurn waits up to d for the turn that answers the message seq to end
// or pause, as the API's ?wait does.
func waitTurn(ctx context.Context, rt *Runtime, owner, id string, seq int64, d time.Duration) (TurnOutcome, error) {
	sub, _, leave := rt.bus.joinRun(id)
	defer leave()
	return rt.waitTurn(ctx, sub, owner, id, seq, d, nil)
}

// say posts a message and waits for the turn that answers it to end.
func say(t *testing.T, rt *Runtime, runID, text string) TurnOutcome {
	t.Helper()
	e, _, _, err := rt.PostMessage(t.Context(), "owner", Sender{}, runID, text, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := waitTurn(t.Context(), rt, "owner", runID, e.Seq, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != TurnCompleted {
		t.Fatalf("turn of %q = %s %+v", text, out.Status, out.End)
	}
	return out
}

// TestToolLimitInsideOneResponse has the model ask for 50 tool calls in
// one response with a limit of 16 calls per slice: they run 16, 16, 16 and
// 2 in four slices, each exactly once and in order, and the turn goes on
// to the model's answer.
func TestToolLimitInsideOneResponse(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms := modeltest.NewServer(t)
		tools := newCountingTools(t, st)
		rt, runID := startRuntime(t, st, ms, tools, Options{MaxToolCallsPerSlice: 16})
		var calls []model.ToolCall
		for i := range 50 {
			calls = append(calls, model.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "count", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		}
		ms.ReplyToolCalls(calls...)
		ms.Reply("counted to 50")
		out := say(t, rt, runID, "count to 50")
		if last := out.Messages[len(out.Messages)-1]; !strings.Contains(string(last.Payload), "counted to 50") {
			t.Errorf("the turn's last message = %s", last.Payload)
		}

		runs := tools.executions()
		var slice []int
		for i, e := range runs {
			if e.n != i {
				t.Fatalf("execution %d counted %d: calls ran out of order or twice: %+v", i, e.n, runs)
			}
			if i == 0 || e.token != runs[i-1].token {
				slice = append(slice, 0)
			}
			slice[len(slice)-1]++
		}
		if len(runs) != 50 || !slices.Equal(slice, []int{16, 16, 16, 2}) {
			t.Errorf("%d executions in slices of %v, want 50 in 16, 16, 16, 2", len(runs), slice)
		}
		// The model was asked twice: for the calls, and after all 50.
		if reqs := ms.Requests(); len(reqs) != 2 || len(reqs[1].Messages) != 1+1+1+50 {
			t.Errorf("model requests = %d", len(reqs))
		}
	})
}

// TestToolCallIDsUsedAgain has the model server use the same tool call id
// for different calls, across turns and across the steps of one turn:
// each call runs as itself, named to the MCP server by its own assistant
// message, and the model sees each result after its own call.
func TestToolCallIDsUsedAgain(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	ms := modeltest.NewServer(t)
	tools := newCountingTools(t, st)
	rt, runID := startRuntime(t, st, ms, tools, Options{})
	call := func(n int) model.ToolCall {
		return model.ToolCall{ID: "call_1", Name: "count", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
	}
	ms.ReplyToolCalls(call(1))
	ms.ReplyToolCalls(call(2))
	ms.Reply("two")
	say(t, rt, runID, "count twice")
	ms.ReplyToolCalls(call(3))
	ms.Reply("three")
	say(t, rt, runID, "count again")

	runs := tools.executions()
	keys := map[string]bool{}
	for i, e := range runs {
		if e.n != i+1 || keys[e.callID] || !strings.HasSuffix(e.callID, "/call_1") {
			t.Fatalf("executions %+v: want 1, 2, 3, each under a key of its own ending in /call_1", runs)
		}
		keys[e.callID] = true
	}
	if len(runs) != 3 {
		t.Fatalf("%d executions, want 3", len(runs))
	}
	reqs := ms.Requests()
	last := reqs[len(reqs)-1].Messages
	var results []string
	for _, m := range last {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	if !slices.Equal(results, []string{"counted 1", "counted 2", "counted 3"}) {
		t.Errorf("the model saw the results %q, want each call's own", results)
	}
}

// TestCallKey checks the names of tool calls to the MCP server: the
// assistant message's sequence and the model's id, distinct for distinct
// pairs, within the MCP server's limit and free of control characters.
func TestCallKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	cases := []struct {
		seq int64
		id  string
	}{{1, "call_1"}, {12, "call_1"}, {1, "2/call_1"}, {12, "/call_1"}, {1, long}, {1, long + "y"}, {2, long}, {1, "a\nb"}, {1, "a\tb"}}
	seen := map[string]bool{}
	for _, c := range cases {
		k := callKey(c.seq, c.id)
		if seen[k] || len(k) > maxToolCallID || strings.ContainsFunc(k, isControl) || !strings.HasPrefix(k, fmt.Sprint(c.seq)) {
			t.Errorf("callKey(%d, %.20q) = %q: used twice, too long or not text", c.seq, c.id, k)
		}
		seen[k] = true
	}
	if k := callKey(7, "call_1"); k != "7/call_1" {
		t.Errorf("callKey(7, call_1) = %q, want 7/call_1", k)
	}
}

// TestTurnResumedAfterItsAnswer resumes a turn whose answer was recorded
// but whose end was not (the process stopped in between): the turn ends
// with that answer, and the model is not asked to go on from an assistant
// message.
func TestTurnResumedAfterItsAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewSQLite(t)
	first := store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "hi"})}
	if _, _, err := st.OpenRun(ctx, store.Run{ID: "run_answered", Owner: "owner"}, 5, &first); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimRuns(ctx, "stopped", 1, time.Hour)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if _, err := st.AppendLeased(ctx, claimed[0].Lease(),
		store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: 1}), StartsTurn: 1},
		store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(AssistantMessage{Content: "hello", MessageSeq: 1})},
	); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.EndLease(ctx, claimed[0].Lease(), store.Release{Requeue: true}); err != nil {
		t.Fatal(err)
	}

	ms := modeltest.NewServer(t)
	rt, _ := startRuntime(t, st, ms, newCountingTools(t, st), Options{})
	out, err := waitTurn(ctx, rt, "owner", "run_answered", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != TurnCompleted || len(out.Messages) != 1 {
		t.Errorf("the resumed turn = %s with %d messages, want completed with its answer", out.Status, len(out.Messages))
	}
	if n := len(ms.Requests()); n != 0 {
		t.Errorf("the model was asked %d times after the turn's answer", n)
	}
}

// TestMessageDuringATurn posts a second message while the model holds its
// answer to the first: the first turn answers only the first, and the
// second turn's request is in turn order, ending with the second message.
func TestMessageDuringATurn(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		ms := modeltest.NewServer(t)
		rt, runID := startRuntime(t, st, ms, newCountingTools(t, st), Options{})
		ms.Reply("reply to first")
		ms.Reply("reply to second")
		release := ms.Hold()
		defer release()
		first, _, _, err := rt.PostMessage(ctx, "owner", Sender{}, runID, "first question", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := ms.WaitHeld(ctx, 1); err != nil {
			t.Fatal(err)
		}
		second, _, _, err := rt.PostMessage(ctx, "owner", Sender{}, runID, "second question", "")
		if err != nil {
			t.Fatal(err)
		}
		release()
		for i, seq := range []int64{first.Seq, second.Seq} {
			out, err := waitTurn(ctx, rt, "owner", runID, seq, time.Minute)
			if err != nil || out.Status != TurnCompleted {
				t.Fatalf("turn of message %d = %+v %v", seq, out, err)
			}
			// Each turn's outcome holds its own answer only, though the
			// first answer is logged after the second message.
			var texts []string
			for _, e := range out.Messages {
				var m AssistantMessage
				if json.Unmarshal(e.Payload, &m) == nil {
					texts = append(texts, m.Content)
				}
			}
			if want := []string{"reply to first", "reply to second"}[i]; !slices.Equal(texts, []string{want}) {
				t.Errorf("turn of message %d answered %q, want [%q]", seq, texts, want)
			}
		}
		reqs := ms.Requests()
		var got []string
		for _, r := range reqs {
			var s []string
			for _, m := range r.Messages[1:] {
				s = append(s, m.Role+":"+m.Content)
			}
			got = append(got, strings.Join(s, " | "))
		}
		want := []string{"user:first question", "user:first question | assistant:reply to first | user:second question"}
		if !slices.Equal(got, want) {
			t.Errorf("model requests:\n%q\nwant\n%q", got, want)
		}
	})
}

package assistant

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		req  model.Request
		want int64
	}{
		{"empty", model.Request{}, 0},
		// 16 + 4 ("user") + 4 ("ping") = 24 bytes.
		{"one message", model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "ping"}}}, 6},
		// 16 + 4 + 5 = 25 bytes: rounded up.
		{"rounded up", model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "ping!"}}}, 7},
		// Bytes, not characters: "é" is two.
		{"UTF-8 bytes", model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "éé"}}}, 6},
		{"tool exchange", model.Request{Messages: []model.Message{
			// 16 + 9 ("assistant") + 0 + call: 2 ("c1") + 5 ("count") + 7 (`{"n":1}`) = 39
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "count", Arguments: json.RawMessage(`{"n":1}`)}}},
			// 16 + 4 ("tool") + 9 ("counted 1") + 2 ("c1") = 31
			{Role: model.RoleTool, Content: "counted 1", ToolCallID: "c1"},
		}}, 18}, // 70 bytes
		{"tools", model.Request{
			// 16 + 6 ("system") + 2 ("hi") = 24
			Messages: []model.Message{{Role: model.RoleSystem, Content: "hi"}},
			// 16 + 5 ("count") + 7 ("Counts.") + 17 (the schema) = 45
			Tools: []model.Tool{{Name: "count", Description: "Counts.", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		}, 18}, // 69 bytes
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := estimateTokens(tt.req); got != tt.want {
				t.Errorf("estimateTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

// gatedTool is an MCP server with one tool, "wait", that reports each call
// on entered and returns once proceed lets it.
type gatedTool struct {
	url     string
	entered chan struct{}
	proceed chan struct{}
}

func newGatedTool(t *testing.T) *gatedTool {
	t.Helper()
	g := &gatedTool{entered: make(chan struct{}, 1), proceed: make(chan struct{})}
	srv := mcp.NewServer(&mcp.Implementation{Name: "gated", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "wait", Description: "Waits."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			g.entered <- struct{}{}
			select {
			case <-g.proceed:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited a while"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.Close()
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	g.url = hs.URL
	return g
}

// promptWords is the scripted server's prompt_tokens for a request: the
// words of its messages.
func promptWords(r modeltest.RecordedRequest) int64 {
	n := 0
	for _, m := range r.Messages {
		n += len(strings.Fields(m.Content))
	}
	return int64(n)
}

// TestContextAccounting: a turn records the estimate of the context it
// sends before the first model step of each slice, and the provider's
// reported prompt tokens after each step, against the configured limit;
// GET /runs/{id} shows the latest.
func TestContextAccounting(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		ms := modeltest.NewServer(t)
		tool := newGatedTool(t)
		provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
		if err != nil {
			t.Fatal(err)
		}
		// One call per slice: the step after the call is a resumed
		// slice's first.
		rt, err := New(&Options{Store: st, Model: provider, MCPURL: tool.url, MaxToolCallsPerSlice: 1, ContextTokens: 128_000,
			SweepInterval: time.Hour,
			Tokens: func(context.Context, Grant) oauth2.TokenSource {
				return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unused"})
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Stop)
		owner := testOwner.ID()
		run, _, err := rt.CreateRun(ctx, owner, Sender{}, NewRun{Title: "accounting"})
		if err != nil {
			t.Fatal(err)
		}
		if run.Context != (store.RunContext{}) {
			t.Fatalf("a new run's context = %+v, want none", run.Context)
		}
		getContext := func() store.RunContext {
			t.Helper()
			r, err := st.GetRun(ctx, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Context.Limit != 128_000 {
				t.Errorf("context limit = %d, want the configured 128000", r.Context.Limit)
			}
			return r.Context
		}

		ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "wait", Arguments: json.RawMessage(`{}`)})
		ms.Reply("That took a while.")
		release := ms.Hold()
		msg, _, _, err := rt.PostMessage(ctx, owner, Sender{}, run.ID, "please wait a little", "")
		if err != nil {
			t.Fatal(err)
		}

		// Before the first step: the estimate, of the context up to the
		// user message.
		if err := ms.WaitHeld(ctx, 1); err != nil {
			t.Fatal(err)
		}
		first := getContext()
		if first.Source != store.ContextEstimated || first.Seq != msg.Seq || first.Tokens <= 0 || first.At.IsZero() {
			t.Fatalf("context before the first step = %+v, want an estimate at message %d", first, msg.Seq)
		}
		release()

		// After it (the call runs): the provider's count.
		<-tool.entered
		reqs := ms.Requests()
		if c := getContext(); c.Source != store.ContextReported || c.Tokens != promptWords(reqs[0]) || c.Seq != msg.Seq {
			t.Fatalf("context after the first step = %+v, want %d reported at message %d", c, promptWords(reqs[0]), msg.Seq)
		}

		// The next slice's estimate, written on its own before its step:
		// the context now holds the call and its result.
		release = ms.Hold()
		close(tool.proceed)
		if err := ms.WaitHeld(ctx, 1); err != nil {
			t.Fatal(err)
		}
		events, err := st.ListMessages(ctx, run.ID, store.MessageQuery{Limit: 10, Last: true})
		if err != nil {
			t.Fatal(err)
		}
		result := events[len(events)-1]
		if result.Type != EventToolResult {
			t.Fatalf("the last message before the second step is %s, want the tool result", result.Type)
		}
		second := getContext()
		if second.Source != store.ContextEstimated || second.Seq != result.Seq || second.Tokens <= first.Tokens {
			t.Fatalf("context before the second slice's step = %+v, want an estimate at %d above the first's %d", second, result.Seq, first.Tokens)
		}
		release()
		out, err := waitTurn(ctx, rt, owner, run.ID, msg.Seq, time.Minute)
		if err != nil || out.Status != TurnCompleted {
			t.Fatalf("turn = %+v, %v", out, err)
		}
		reqs = ms.Requests()
		last := getContext()
		if len(reqs) != 2 || last.Source != store.ContextReported || last.Tokens != promptWords(reqs[1]) || last.Seq != result.Seq {
			t.Fatalf("context after the turn = %+v, want %d reported at %d (%d requests)", last, promptWords(reqs[1]), result.Seq, len(reqs))
		}

		// The API shows it.
		h := rt.Handler()
		req := httptest.NewRequest(http.MethodGet, "/api/assistant/runs/"+run.ID, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req.WithContext(identity.NewContext(req.Context(), testOwner)))
		var body struct {
			Run struct {
				Context *struct {
					Tokens, Limit, Seq int64
					Source             string
					At                 time.Time
				} `json:"context"`
			} `json:"run"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusOK {
			t.Fatalf("GET the run: %d %s", w.Code, w.Body)
		}
		if c := body.Run.Context; c == nil || c.Tokens != last.Tokens || c.Limit != 128_000 || c.Source != "reported" || c.Seq != last.Seq || !c.At.Equal(last.At) {
			t.Errorf("GET the run: context %s, want %+v", w.Body, last)
		}
	})
}

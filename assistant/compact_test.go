package assistant

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// isSummaryRequest reports whether rec is one of the summariser's.
func isSummaryRequest(rec modeltest.RecordedRequest) bool {
	return len(rec.Messages) > 0 && rec.Messages[0].Role == "system" &&
		(rec.Messages[0].Content == summarizeInstructions || rec.Messages[0].Content == reduceInstructions)
}

// summaries answers the summariser's requests with "Summary vN: …", N
// counting them, and records what each was sent.
type summaries struct {
	mu   sync.Mutex
	sent []string // the user message of each summary request
	// answer, when set, chooses the answer instead.
	answer func(n int, text string) modeltest.Answer
}

func (s *summaries) respond(rec modeltest.RecordedRequest) (modeltest.Answer, bool) {
	if !isSummaryRequest(rec) {
		return modeltest.Answer{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	text := rec.Messages[len(rec.Messages)-1].Content
	s.sent = append(s.sent, text)
	if s.answer != nil {
		return s.answer(len(s.sent), text), true
	}
	return modeltest.Answer{Text: fmt.Sprintf("Summary v%d: the user counted, turn after turn.", len(s.sent))}, true
}

func (s *summaries) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// startCompacting runs a runtime as cmd/usher wires it (the provider
// payload in front of the OpenAI-compatible provider) on the scripted
// model, with a context limit of limit tokens, and opens a run with
// metadata.
func startCompacting(t *testing.T, st store.Store, ms *modeltest.Server, tools *countingTools, limit int, metadata string) (*Runtime, string) {
	t.Helper()
	raw, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(&Options{Store: st, Model: payload.NewProvider(raw, payload.OpenAICompatible), MCPURL: tools.url,
		SystemPrompt: "Be brief.", ContextTokens: limit, ModelName: "scripted",
		Tokens: func(context.Context, Grant) oauth2.TokenSource {
			return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unused"})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	r, _, err := rt.CreateRun(t.Context(), "owner", Sender{}, NewRun{Title: "long", Metadata: metadata})
	if err != nil {
		t.Fatal(err)
	}
	tools.mu.Lock()
	tools.runID = r.ID
	tools.mu.Unlock()
	return rt, r.ID
}

// countingTurn scripts and says one turn of the long conversation: a user
// message, a call of count, its result and an answer: four messages.
func countingTurn(t *testing.T, rt *Runtime, ms *modeltest.Server, runID string, i int) {
	t.Helper()
	ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("call-%d", i), Name: "count", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	ms.Reply(fmt.Sprintf("answer %d: ", i) + strings.Repeat("fine ", 20))
	say(t, rt, runID, fmt.Sprintf("turn %d: please count. ", i)+strings.Repeat("words of the user ", 22))
}

// requestOf is a recorded request as the runtime would have built it, to
// estimate its tokens the runtime's way.
func requestOf(rec modeltest.RecordedRequest) model.Request {
	var req model.Request
	for _, m := range rec.Messages {
		msg := model.Message{Role: model.Role(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, tool := range rec.Tools {
		req.Tools = append(req.Tools, model.Tool{Name: tool.Name, Description: tool.Description, InputSchema: tool.Parameters})
	}
	return req
}

// checkExchangesWhole fails when a snapshot covers a call without all of
// its results.
func checkExchangesWhole(t *testing.T, messages []store.Event, snaps []store.ContextSnapshot) {
	t.Helper()
	type key struct {
		turn int64
		id   string
	}
	callAt := map[key]int64{}
	for _, e := range messages {
		switch e.Type {
		case EventAssistantMessage:
			var m AssistantMessage
			mustUnmarshal(t, e.Payload, &m)
			for _, c := range m.ToolCalls {
				callAt[key{m.MessageSeq, c.ID}] = e.Seq
			}
		case EventToolResult:
			var r ToolResult
			mustUnmarshal(t, e.Payload, &r)
			call := callAt[key{r.MessageSeq, r.ToolCallID}]
			for _, s := range snaps {
				if call <= s.ToSeq && e.Seq > s.ToSeq {
					t.Errorf("snapshot %d covers to %d: the call at %d, not its result at %d", s.Version, s.ToSeq, call, e.Seq)
				}
			}
		}
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// eventsOfType returns the payloads of runID's events of type typ.
func eventsOfType(t *testing.T, st store.Store, runID, typ string) []json.RawMessage {
	t.Helper()
	events, err := st.ListEvents(t.Context(), runID, 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e.Payload)
		}
	}
	return out
}

// TestCompactionLongConversation has a 300-message conversation with tool
// calls under a small model limit compact itself: snapshots are written
// as the context reaches the threshold, each covering a prefix of the log
// that ends at the end of a tool exchange; each folds the one before;
// every request after the first holds the instructions, the summary and a
// tail, with calls and results together, under the limit; the log is
// unchanged byte for byte and holds every message; the summariser's calls
// are no conversation.
func TestCompactionLongConversation(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		ms := modeltest.NewServer(t)
		sums := &summaries{}
		ms.Respond(sums.respond)
		tools := newCountingTools(t, st)
		const limit = 1200
		rt, runID := startCompacting(t, st, ms, tools, limit, `{"compactRecentMessages": 4, "compactChunkTokens": 8000}`)

		const turns = 75
		var middle []store.Event
		for i := 1; i <= turns; i++ {
			countingTurn(t, rt, ms, runID, i)
			if i == turns/2 {
				var err error
				if middle, err = st.ListEvents(ctx, runID, 0, 5000); err != nil {
					t.Fatal(err)
				}
			}
		}

		messages, err := st.ListMessages(ctx, runID, store.MessageQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(messages) != 4*turns {
			t.Fatalf("the log holds %d messages, want %d: the summaries are no conversation", len(messages), 4*turns)
		}
		snaps, err := st.ListSnapshots(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) < 5 {
			t.Fatalf("%d snapshots, want the conversation compacted again and again", len(snaps))
		}
		for i, s := range snaps {
			if s.Version != int64(i+1) || s.FromSeq != messages[0].Seq || s.Kind != store.SnapshotAutomatic || s.Model != "scripted" {
				t.Errorf("snapshot %+v: want version %d from the first message, automatic, by the scripted model", s, i+1)
			}
			if i > 0 && s.ToSeq <= snaps[i-1].ToSeq {
				t.Errorf("snapshot %d covers to %d, not beyond %d", s.Version, s.ToSeq, snaps[i-1].ToSeq)
			}
			if want := fmt.Sprintf("Summary v%d:", i+1); !strings.HasPrefix(s.Summary, want) {
				t.Errorf("snapshot %d = %q, want the summariser's %q", s.Version, s.Summary, want)
			}
		}
		t.Logf("%d snapshots, %d requests, last %+v", len(snaps), len(ms.Requests()), snaps[len(snaps)-1].ToSeq)
		checkExchangesWhole(t, messages, snaps)

		// Each compaction crossed the threshold, and is an event.
		compacted := eventsOfType(t, st, runID, EventCompacted)
		if len(compacted) != len(snaps) {
			t.Errorf("%d compaction events for %d snapshots", len(compacted), len(snaps))
		}
		for _, p := range compacted {
			var c ContextCompacted
			mustUnmarshal(t, p, &c)
			if float64(c.TokensBefore) < DefaultCompactThreshold*limit || c.ModelCalls != 1 || c.Passes != 1 {
				t.Errorf("compaction %+v: want at least %.0f tokens before it, in one call and one pass", c, DefaultCompactThreshold*limit)
			}
		}
		if got := rt.Compactions(); got.Written != int64(len(snaps)) || got.Failed+got.Invalid+got.Conflict != 0 {
			t.Errorf("Compactions() = %+v, want %d written", got, len(snaps))
		}

		// Each summariser request folds the summary before it.
		sent := sums.requests()
		if len(sent) != len(snaps) {
			t.Fatalf("%d summariser requests for %d snapshots", len(sent), len(snaps))
		}
		for i, text := range sent[1:] {
			if want := "[earlier summary]\n" + snaps[i].Summary; !strings.Contains(text, want) {
				t.Errorf("summariser request %d does not fold %q", i+2, want)
			}
		}

		// The model requests after the first compaction: the system
		// prompt and the summary merged into one system message, then a
		// tail whose results follow their calls, under the limit.
		compactedAt := -1
		for i, rec := range ms.Requests() {
			if isSummaryRequest(rec) {
				if len(rec.Tools) != 0 || len(rec.Messages) != 2 {
					t.Errorf("summariser request %d has %d tools and %d messages, want none and 2", i, len(rec.Tools), len(rec.Messages))
				}
				compactedAt = i
				continue
			}
			if compactedAt < 0 {
				continue
			}
			first := rec.Messages[0]
			if first.Role != "system" || !strings.HasPrefix(first.Content, "Be brief.\n\n"+summaryHeading+"Summary v") {
				t.Errorf("request %d starts with %+v, want the instructions and the summary", i, first)
			}
			if n := len(rec.Messages) - 1; n > 24+3 {
				t.Errorf("request %d holds %d messages beyond the system one, want at most the history and the turn", i, n)
			}
			calls := map[string]bool{}
			for _, m := range rec.Messages {
				for _, c := range m.ToolCalls {
					calls[c.ID] = true
				}
				if m.Role == "tool" && !calls[m.ToolCallID] {
					t.Errorf("request %d: the result of %s goes without its call", i, m.ToolCallID)
				}
				if strings.Contains(m.Content, payload.SummaryMarker) {
					t.Errorf("request %d carries the summary marker", i)
				}
			}
			if est := estimateTokens(requestOf(rec)); est >= limit {
				t.Errorf("request %d is about %d tokens, over the limit %d", i, est, limit)
			}
		}

		// The log is unchanged, byte for byte, and holds every message
		// the user sent, in order.
		after, err := st.ListEvents(ctx, runID, 0, 5000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range middle {
			if a := after[i]; a.Seq != e.Seq || a.Type != e.Type || !bytes.Equal(a.Payload, e.Payload) || a.CreatedAt != e.CreatedAt {
				t.Errorf("event %d = %+v, was %+v", e.Seq, a, e)
			}
		}
		n := 0
		for _, e := range messages {
			if e.Type == EventUserMessage {
				n++
				var m UserMessage
				mustUnmarshal(t, e.Payload, &m)
				if !strings.HasPrefix(m.Content, fmt.Sprintf("turn %d: ", n)) {
					t.Errorf("user message %d = %.20q…", n, m.Content)
				}
			}
		}
	})
}

// TestCompactionFailsSafe: a summariser that fails, or writes a summary
// that is refused, writes no snapshot: the turn completes with the context
// it had, and the failure is an event and a metric.
func TestCompactionFailsSafe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		answer  func(n int, text string) modeltest.Answer
		reason  string
		invalid bool
	}{
		{"model error", func(int, string) modeltest.Answer { return modeltest.Answer{Status: http.StatusInternalServerError} },
			"the model failed", false},
		{"not a reduction", func(_ int, text string) modeltest.Answer { return modeltest.Answer{Text: text} },
			"not shorter than three quarters", true},
		{"oversized", func(int, string) modeltest.Answer {
			return modeltest.Answer{Text: strings.Repeat("long ", store.MaxSnapshotSummary/5+1)}
		}, "over 65536", true},
		{"empty", func(int, string) modeltest.Answer { return modeltest.Answer{Text: "   "} }, "empty", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.NewSQLite(t)
			ms := modeltest.NewServer(t)
			sums := &summaries{answer: tc.answer}
			ms.Respond(sums.respond)
			tools := newCountingTools(t, st)
			rt, runID := startCompacting(t, st, ms, tools, 1200, `{"compactRecentMessages": 4}`)
			for i := 1; i <= 8; i++ {
				countingTurn(t, rt, ms, runID, i) // fails if a turn does not complete
			}
			snaps, err := st.ListSnapshots(t.Context(), runID)
			if err != nil || len(snaps) != 0 {
				t.Fatalf("ListSnapshots = %+v, %v; want none", snaps, err)
			}
			failed := eventsOfType(t, st, runID, EventCompactionFailed)
			if len(failed) == 0 {
				t.Fatal("no compaction_failed event")
			}
			var f CompactionFailed
			mustUnmarshal(t, failed[0], &f)
			if !strings.Contains(f.Reason, tc.reason) || f.ModelCalls == 0 || f.TokensBefore == 0 {
				t.Errorf("compaction_failed = %+v, want a reason with %q", f, tc.reason)
			}
			got, want := rt.Compactions(), Compactions{Failed: int64(len(failed))}
			if tc.invalid {
				want = Compactions{Invalid: int64(len(failed))}
			}
			if got != want {
				t.Errorf("Compactions() = %+v, want %+v", got, want)
			}
			// At most one attempt per slice: every turn after the
			// threshold tried once, not once per step.
			if len(sums.requests()) > 2*len(failed) {
				t.Errorf("%d summariser requests for %d failures", len(sums.requests()), len(failed))
			}
		})
	}
}

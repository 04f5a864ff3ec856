package assistant

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
)

// TestBoundedContext: the bounded history is the snapshot's summary and
// at most bound messages after its coverage, and its tail never starts
// inside a tool call's results.
func TestBoundedContext(t *testing.T) {
	t.Parallel()
	u := func(seq int64, text string) contextMessage {
		return contextMessage{model.Message{Role: model.RoleUser, Content: text}, seq}
	}
	a := func(seq int64, text string, calls ...string) contextMessage {
		m := model.Message{Role: model.RoleAssistant, Content: text}
		for _, id := range calls {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)})
		}
		return contextMessage{m, seq}
	}
	r := func(seq int64, call, text string) contextMessage {
		return contextMessage{model.Message{Role: model.RoleTool, Content: text, ToolCallID: call}, seq}
	}
	snap := func(to int64) *store.ContextSnapshot {
		return &store.ContextSnapshot{RunID: "run-1", Version: 1, FromSeq: 1, ToSeq: to, Summary: "The user planned a trip.", Kind: store.SnapshotAutomatic}
	}
	summary := model.Message{Role: model.RoleSystem, Content: payload.SummaryMarker + "\n" + summaryHeading + "The user planned a trip."}
	// A conversation: a turn with one call, a turn with three calls in
	// one step, a turn without calls.
	conv := []contextMessage{
		u(1, "hi"), a(3, "Checking.", "c1"), r(4, "c1", "[]"), a(5, "No notes."),
		u(7, "list them all"), a(9, "", "c2", "c3", "c4"), r(10, "c2", "a"), r(11, "c3", "b"), r(12, "c4", "c"), a(13, "Three notes."),
		u(15, "thanks"), a(17, "You're welcome."),
	}
	msgs := func(cms ...contextMessage) []model.Message { return messagesOf(cms) }

	tests := []struct {
		name  string
		snap  *store.ContextSnapshot
		past  []contextMessage
		bound int
		want  []model.Message
	}{
		{"no snapshot, within the bound", nil, conv, 24, msgs(conv...)},
		{"no snapshot, cut at a user message", nil, conv, 2, msgs(conv[10:]...)},
		{"cut at a call: the group is whole", nil, conv, 7, msgs(conv[5:]...)},
		{"cut inside a group of one result", nil, conv[:4], 2, msgs(conv[3])},
		{"cut at the first of several results", nil, conv, 6, msgs(conv[9:]...)},
		{"cut at the last of several results", nil, conv, 4, msgs(conv[9:]...)},
		{"an orphan result at the start", nil, []contextMessage{r(2, "gone", "old"), u(3, "hi")}, 24, msgs(u(3, "hi"))},
		{"bound 0", nil, conv, 0, []model.Message{}},
		{"no history", nil, nil, 24, []model.Message{}},
		{"snapshot: the tail after its coverage", snap(5), conv, 24, append([]model.Message{summary}, msgs(conv[4:]...)...)},
		{"snapshot and the bound", snap(5), conv, 3, append([]model.Message{summary}, msgs(conv[9:]...)...)},
		{"snapshot ending at a call", snap(9), conv, 24, append([]model.Message{summary}, msgs(conv[9:]...)...)},
		{"snapshot ending inside the results", snap(10), conv, 24, append([]model.Message{summary}, msgs(conv[9:]...)...)},
		{"snapshot covering everything", snap(17), conv, 24, []model.Message{summary}},
		{"snapshot beyond the history", snap(99), conv, 24, []model.Message{summary}},
		{"snapshot, no history", snap(5), nil, 24, []model.Message{summary}},
		{
			// A message that arrived during a turn follows its output in
			// turn order: coverage is by sequence, not by position.
			"snapshot over interleaved turns", snap(4),
			[]contextMessage{u(1, "first"), a(2, "one"), a(5, "two"), u(4, "meanwhile"), a(6, "three")}, 24,
			[]model.Message{summary, msgs(a(5, "two"))[0], msgs(a(6, "three"))[0]},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			past := clonePast(tt.past)
			got := withSummary(tt.snap, boundedTail(tt.snap, past, tt.bound))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("withSummary(boundedTail) =\n%s\nwant\n%s", dump(got), dump(tt.want))
			}
			if !reflect.DeepEqual(past, clonePast(tt.past)) {
				t.Error("boundedTail modified its arguments")
			}
			// Never more than the bound, never a result first.
			tail := got
			if tt.snap != nil {
				tail = tail[1:]
			}
			if len(tail) > tt.bound || (len(tail) > 0 && tail[0].Role == model.RoleTool) {
				t.Errorf("tail of %d messages starting %q; bound %d", len(tail), tail[0].Role, tt.bound)
			}
		})
	}
}

// TestBoundedContextGroupsWhole: whatever the bound, every tool result in
// the tail follows its call's message, through results of that call's
// message only.
func TestBoundedContextGroupsWhole(t *testing.T) {
	t.Parallel()
	var past []contextMessage
	seq := int64(0)
	next := func() int64 { seq++; return seq }
	for turn := range 30 {
		past = append(past, contextMessage{model.Message{Role: model.RoleUser, Content: "q"}, next()})
		calls := turn % 4
		m := model.Message{Role: model.RoleAssistant}
		for c := range calls {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: string(rune('a'+c)) + string(rune('0'+turn%10)), Name: "t"})
		}
		past = append(past, contextMessage{m, next()})
		for _, c := range m.ToolCalls {
			past = append(past, contextMessage{model.Message{Role: model.RoleTool, ToolCallID: c.ID}, next()})
		}
		past = append(past, contextMessage{model.Message{Role: model.RoleAssistant, Content: "done"}, next()})
	}
	for bound := range len(past) + 2 {
		for _, to := range []int64{0, 3, 17, 40, seq} {
			var snap *store.ContextSnapshot
			if to > 0 {
				snap = &store.ContextSnapshot{ToSeq: to, Summary: "s"}
			}
			got := messagesOf(boundedTail(snap, past, bound))
			if len(got) > bound {
				t.Fatalf("bound %d, coverage to %d: %d messages", bound, to, len(got))
			}
			var calls map[string]bool
			for i, m := range got {
				switch m.Role {
				case model.RoleAssistant:
					calls = map[string]bool{}
					for _, c := range m.ToolCalls {
						calls[c.ID] = true
					}
				case model.RoleTool:
					if !calls[m.ToolCallID] {
						t.Fatalf("bound %d, coverage to %d: message %d answers %s, which is not its group's call", bound, to, i, m.ToolCallID)
					}
				default:
					calls = nil
				}
			}
		}
	}
}

func clonePast(past []contextMessage) []contextMessage {
	if past == nil {
		return nil
	}
	out := make([]contextMessage, len(past))
	for i, m := range past {
		m.ToolCalls = append([]model.ToolCall(nil), m.ToolCalls...)
		out[i] = m
	}
	return out
}

func dump(msgs []model.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("  " + string(m.Role) + " " + strings.ReplaceAll(m.Content, "\n", `\n`))
		for _, c := range m.ToolCalls {
			b.WriteString(" call " + c.ID)
		}
		if m.ToolCallID != "" {
			b.WriteString(" (answers " + m.ToolCallID + ")")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestTurnWithSnapshot: a run with a context snapshot sends the model the
// system prompt, the snapshot's summary and the messages after its
// coverage, the latest snapshot winning; a run without one sends its
// history as before; the run's events are never touched.
func TestTurnWithSnapshot(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		ms := modeltest.NewServer(t)
		tools := newCountingTools(t, st)
		// As cmd/usher wires it: the provider payload strips the marker
		// and merges the system messages.
		raw, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := New(&Options{Store: st, Model: payload.NewProvider(raw, payload.OpenAICompatible), MCPURL: tools.url, SystemPrompt: "Be brief.",
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
		r, _, err := rt.CreateRun(ctx, "owner", Sender{}, NewRun{Title: "snapshots"})
		if err != nil {
			t.Fatal(err)
		}
		runID := r.ID
		tools.mu.Lock()
		tools.runID = runID
		tools.mu.Unlock()

		ms.Reply("first answer")
		say(t, rt, runID, "hello")
		ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "count", Arguments: json.RawMessage(`{"n":1}`)})
		ms.Reply("counted one")
		say(t, rt, runID, "count to one")
		ms.Reply("third answer")
		say(t, rt, runID, "third")

		type msg struct{ Role, Content string }
		sent := func() []msg {
			t.Helper()
			reqs := ms.Requests()
			var out []msg
			for _, m := range reqs[len(reqs)-1].Messages {
				out = append(out, msg{m.Role, m.Content})
			}
			return out
		}
		// Without a snapshot: the whole history.
		if got := sent(); len(got) != 8 || got[0] != (msg{"system", "Be brief."}) || got[1] != (msg{"user", "hello"}) {
			t.Fatalf("request without a snapshot = %+v, want the system prompt and the 7 messages", got)
		}

		messages, err := st.ListMessages(ctx, runID, store.MessageQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		seqOf := func(typ, content string) int64 {
			t.Helper()
			for _, e := range messages {
				var p struct{ Content string }
				if e.Type == typ && json.Unmarshal(e.Payload, &p) == nil && p.Content == content {
					return e.Seq
				}
			}
			t.Fatalf("no %s message %q", typ, content)
			return 0
		}
		first := messages[0].Seq
		snap, err := st.AppendSnapshot(ctx, store.ContextSnapshot{RunID: runID, Version: 1, FromSeq: first,
			ToSeq: seqOf(EventAssistantMessage, "counted one"), Summary: "The user greeted; one was counted.", Kind: store.SnapshotAutomatic})
		if err != nil {
			t.Fatal(err)
		}
		before, err := st.ListEvents(ctx, runID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}

		ms.Reply("fourth answer")
		say(t, rt, runID, "fourth")
		want := []msg{
			{"system", "Be brief.\n\n" + summaryHeading + snap.Summary},
			{"user", "third"}, {"assistant", "third answer"}, {"user", "fourth"},
		}
		if got := sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("request with a snapshot =\n%+v\nwant\n%+v", got, want)
		}

		// A later snapshot folds the first: it alone is sent.
		messages, err = st.ListMessages(ctx, runID, store.MessageQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendSnapshot(ctx, store.ContextSnapshot{RunID: runID, Version: 2, FromSeq: first,
			ToSeq: seqOf(EventAssistantMessage, "third answer"), Summary: "Greeted, counted, talked thrice.", Kind: store.SnapshotManual}); err != nil {
			t.Fatal(err)
		}
		ms.Reply("fifth answer")
		say(t, rt, runID, "fifth")
		want = []msg{
			{"system", "Be brief.\n\n" + summaryHeading + "Greeted, counted, talked thrice."},
			{"user", "fourth"}, {"assistant", "fourth answer"}, {"user", "fifth"},
		}
		if got := sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("request with a second snapshot =\n%+v\nwant\n%+v", got, want)
		}

		// The log holds every message, as it was.
		after, err := st.ListEvents(ctx, runID, 0, 1000)
		if err != nil || len(after) <= len(before) {
			t.Fatalf("ListEvents = %d events, %v; want more than %d", len(after), err, len(before))
		}
		for i, e := range before {
			if a := after[i]; a.Seq != e.Seq || a.Type != e.Type || !bytes.Equal(a.Payload, e.Payload) || a.CreatedAt != e.CreatedAt {
				t.Errorf("event %d = %+v, was %+v", e.Seq, a, e)
			}
		}
	})
}

// TestRequestSnapshotInTurn: a snapshot that reaches into the turn (taken
// during it) leaves of the turn's own messages those after its coverage,
// from a group's start; one before the turn leaves them all.
func TestRequestSnapshotInTurn(t *testing.T) {
	t.Parallel()
	call := func(id string) ToolCall {
		return ToolCall{ID: id, Name: "count", Arguments: json.RawMessage(`{"n":1}`)}
	}
	ev := func(seq int64, typ string, v any) store.Event {
		return store.Event{RunID: "run-1", Seq: seq, Type: typ, Payload: mustJSON(v)}
	}
	own := []store.Event{
		ev(5, EventUserMessage, UserMessage{Content: "count twice"}),
		ev(7, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{call("c1")}, MessageSeq: 5}),
		ev(8, EventToolResult, ToolResult{ToolCallID: "c1", Content: "counted 1", MessageSeq: 5}),
		ev(9, EventAssistantMessage, AssistantMessage{Content: "Again.", ToolCalls: []ToolCall{call("c2")}, MessageSeq: 5}),
		ev(10, EventToolResult, ToolResult{ToolCallID: "c2", Content: "counted 1", MessageSeq: 5}),
	}
	seqs, err := projectSeqs(own)
	all := messagesOf(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		to   int64
		want []model.Message
	}{
		{4, all},
		{5, all[1:]},
		{7, all[3:]}, // the result of c1 goes with its call
		{8, all[3:]},
		{10, nil},
	} {
		snap := &store.ContextSnapshot{RunID: "run-1", Version: 1, FromSeq: 1, ToSeq: tt.to, Summary: "s", Kind: store.SnapshotAutomatic}
		summary := summaryMessage(*snap)
		tn := &turn{rt: &Runtime{o: Options{SystemPrompt: "S", HistoryMessages: 24}}, sess: &session{}, seq: 5, messages: own,
			past: []model.Message{summary}, snap: snap, snapRead: true}
		req, err := tn.request(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := append([]model.Message{{Role: model.RoleSystem, Content: "S"}, summary}, tt.want...)
		if !reflect.DeepEqual(req.Messages, want) {
			t.Errorf("coverage to %d: request =\n%s\nwant\n%s", tt.to, dump(req.Messages), dump(want))
		}
	}
}

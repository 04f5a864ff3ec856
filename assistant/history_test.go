package assistant

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

func ev(seq int64, typ string, payload any) store.Event {
	b, _ := json.Marshal(payload)
	return store.Event{Seq: seq, Type: typ, Payload: b}
}

// shape renders messages compactly: u:text, a:text[calls], t:callID=text.
func shape(msgs []model.Message) string {
	out := ""
	for _, m := range msgs {
		switch m.Role {
		case model.RoleUser:
			out += "u:" + m.Content + " "
		case model.RoleAssistant:
			out += "a:" + m.Content
			for _, c := range m.ToolCalls {
				out += fmt.Sprintf("[%s %s]", c.ID, c.Arguments)
			}
			out += " "
		case model.RoleTool:
			out += "t:" + m.ToolCallID + "=" + m.Content + " "
		}
	}
	return out
}

func TestProject(t *testing.T) {
	t.Parallel()
	call := func(id string) ToolCall {
		return ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)}
	}
	for _, tc := range []struct {
		name   string
		events []store.Event
		want   string
	}{
		{"plain", []store.Event{
			ev(1, EventUserMessage, UserMessage{Content: "hi"}),
			ev(2, EventTurnStart, TurnStart{MessageSeq: 1}),
			ev(3, EventAssistantMessage, AssistantMessage{Content: "hello"}),
		}, "u:hi a:hello "},
		{"orphan results at the start are dropped", []store.Event{
			ev(5, EventToolResult, ToolResult{ToolCallID: "c1", Content: "r1"}),
			ev(6, EventToolResult, ToolResult{ToolCallID: "c2", Content: "r2"}),
			ev(7, EventAssistantMessage, AssistantMessage{Content: "done"}),
		}, "a:done "},
		{"a later result replaces the pending one in place", []store.Event{
			ev(1, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{call("c1"), call("c2")}}),
			ev(2, EventToolResult, ToolResult{ToolCallID: "c1", Content: "pending", Status: ToolApprovalPending}),
			ev(3, EventToolResult, ToolResult{ToolCallID: "c2", Content: "r2"}),
			ev(4, EventToolResult, ToolResult{ToolCallID: "c1", Content: "r1"}),
		}, "a:[c1 {}][c2 {}] t:c1=r1 t:c2=r2 "},
		{"a call without a result is answered before the next message", []store.Event{
			ev(1, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{call("c1")}}),
			ev(2, EventUserMessage, UserMessage{Content: "next"}),
		}, "a:[c1 {}] t:c1=" + noResult + " u:next "},
		{"arguments that were not an object are sent as {}", []store.Event{
			ev(1, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{{ID: "c1", Name: "x"}}}),
			ev(2, EventToolResult, ToolResult{ToolCallID: "c1", Content: "bad arguments"}),
		}, "a:[c1 {}] t:c1=bad arguments "},
		{"agent records are not messages", []store.Event{
			ev(1, EventSystemPrompt, SystemPromptRecord{RunID: "r", Characters: 3}),
			ev(2, EventRuntimeContext, RuntimeContextRecord{RunID: "r"}),
			ev(3, EventTurnEnd, TurnEnd{Status: TurnCompleted}),
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := projectSeqs(tc.events)
			if err != nil {
				t.Fatal(err)
			}
			if s := shape(messagesOf(got)); s != tc.want {
				t.Errorf("projectSeqs = %q, want %q", s, tc.want)
			}
		})
	}
}

func TestProjectRefusesCorruptEvents(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{EventUserMessage, EventAssistantMessage, EventToolResult} {
		if _, err := projectSeqs([]store.Event{{Seq: 1, Type: typ, Payload: json.RawMessage(`[1]`)}}); err == nil {
			t.Errorf("projectSeqs of a %s that is not an object = nil error", typ)
		}
	}
}

// TestProjectIsACopy checks that the provider's messages share nothing
// with the log: changing them changes no event.
func TestProjectIsACopy(t *testing.T) {
	t.Parallel()
	events := []store.Event{ev(1, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{{ID: "c1", Name: "x", Arguments: json.RawMessage(`{"a":1}`)}}})}
	before := string(events[0].Payload)
	msgs, err := projectSeqs(events)
	if err != nil {
		t.Fatal(err)
	}
	msgs[0].ToolCalls[0].Arguments[2] = 'X'
	if string(events[0].Payload) != before {
		t.Errorf("changing the projection changed the event: %s", events[0].Payload)
	}
}

// requestFor is the model request of the turn that answers the user
// message seq, as load builds it from the log events (every message of a
// run, in log order) with a history of n messages, and whether the one
// read of load and the separate reads of loadEach agree on it.
func requestFor(t *testing.T, events []store.Event, seq int64, n int) []model.Message {
	t.Helper()
	at := slices.IndexFunc(events, func(e store.Event) bool { return e.Seq == seq })
	if at < 0 {
		t.Fatalf("no event %d", seq)
	}
	tn := &turn{rt: &Runtime{o: Options{HistoryMessages: n, SystemPrompt: "system"}}, seq: seq, sess: &session{}}
	if err := tn.split(slices.Clone(events[at:])); err != nil {
		t.Fatal(err)
	}
	if err := tn.setPast(events[max(0, at-n):at]); err != nil {
		t.Fatal(err)
	}
	req, err := tn.request(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return req.Messages[1:]
}

// TestTurnOrder checks the projection of logs in which messages arrived
// while turns ran: the model sees each user message followed by what its
// turn wrote, the turn's own message last of the history, and a request
// that never ends with an assistant message.
func TestTurnOrder(t *testing.T) {
	t.Parallel()
	user := func(seq int64, text string) store.Event { return ev(seq, EventUserMessage, UserMessage{Content: text}) }
	say := func(seq, turn int64, text string) store.Event {
		return ev(seq, EventAssistantMessage, AssistantMessage{Content: text, MessageSeq: turn})
	}
	calls := func(seq, turn int64, ids ...string) store.Event {
		m := AssistantMessage{MessageSeq: turn}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)})
		}
		return ev(seq, EventAssistantMessage, m)
	}
	result := func(seq, turn int64, id, text string) store.Event {
		return ev(seq, EventToolResult, ToolResult{ToolCallID: id, Content: text, Status: ToolSucceeded, MessageSeq: turn})
	}
	pending := func(seq, turn int64, id string) store.Event {
		return ev(seq, EventToolResult, ToolResult{ToolCallID: id, Content: "waits", Status: ToolApprovalPending, MessageSeq: turn})
	}
	for _, tc := range []struct {
		name    string
		events  []store.Event
		seq     int64
		history int
		want    string
	}{
		{"a message posted during a turn follows its answer", []store.Event{
			user(1, "first"), user(2, "second"), say(3, 1, "reply to first"),
		}, 2, 24, "u:first a:reply to first u:second "},
		{"the turn running is not shown the message posted meanwhile", []store.Event{
			user(1, "first"), calls(2, 1, "c1"), user(3, "second"), result(4, 1, "c1", "r1"),
		}, 1, 24, "u:first a:[c1 {}] t:c1=r1 "},
		{"a message posted during a tool call waits for the turn's end", []store.Event{
			user(1, "first"), calls(2, 1, "c1"), user(3, "second"), result(4, 1, "c1", "r1"), say(5, 1, "done"),
		}, 3, 24, "u:first a:[c1 {}] t:c1=r1 a:done u:second "},
		{"several queued messages: each its own turn, in order", []store.Event{
			user(1, "one"), user(2, "two"), user(3, "three"), user(4, "four"),
			say(5, 1, "answer one"), say(6, 2, "answer two"),
		}, 3, 24, "u:one a:answer one u:two a:answer two u:three "},
		{"the first of several queued messages", []store.Event{
			user(1, "one"), user(2, "two"), user(3, "three"),
		}, 1, 24, "u:one "},
		{"a turn resumed after an approval, a message posted while it waited", []store.Event{
			user(1, "write"), calls(2, 1, "c1", "c2"), pending(3, 1, "c1"), result(4, 1, "c2", "r2"),
			user(5, "meanwhile"), result(6, 1, "c1", "r1"),
		}, 1, 24, "u:write a:[c1 {}][c2 {}] t:c1=r1 t:c2=r2 "},
		{"after the resumed turn, the message posted while it waited", []store.Event{
			user(1, "write"), calls(2, 1, "c1", "c2"), pending(3, 1, "c1"), result(4, 1, "c2", "r2"),
			user(5, "meanwhile"), result(6, 1, "c1", "r1"), say(7, 1, "written"),
		}, 5, 24, "u:write a:[c1 {}][c2 {}] t:c1=r1 t:c2=r2 a:written u:meanwhile "},
		{"a call id used again in a later step is another call", []store.Event{
			user(1, "twice"), calls(2, 1, "c1"), result(3, 1, "c1", "first"), calls(4, 1, "c1"), result(5, 1, "c1", "second"),
		}, 1, 24, "u:twice a:[c1 {}] t:c1=first a:[c1 {}] t:c1=second "},
		{"a window cut between a call and its results drops the results", []store.Event{
			user(1, "first"), calls(2, 1, "c1"), user(3, "second"), result(4, 1, "c1", "r1"), say(5, 1, "done"),
			say(6, 3, "answer two"), user(7, "third"),
		}, 7, 4, "a:done u:second a:answer two u:third "},
		{"a window that holds the call holds its results, though a message lies between", []store.Event{
			user(1, "first"), calls(2, 1, "c1"), user(3, "second"), result(4, 1, "c1", "r1"), say(5, 1, "done"),
			say(6, 3, "answer two"), user(7, "third"),
		}, 7, 5, "a:[c1 {}] t:c1=r1 a:done u:second a:answer two u:third "},
		{"a call whose turn was cancelled mid-call is answered", []store.Event{
			user(1, "first"), calls(2, 1, "c1"), user(3, "second"),
		}, 3, 24, "u:first a:[c1 {}] t:c1=" + noResult + " u:second "},
		{"a failed turn wrote nothing: the next message follows", []store.Event{
			user(1, "first"), user(2, "second"), say(3, 2, "answer two"), user(4, "third"),
		}, 4, 24, "u:first u:second a:answer two u:third "},
		{"messages that name no turn follow the user message before them", []store.Event{
			user(1, "first"), say(2, 0, "reply"), user(3, "second"),
		}, 3, 24, "u:first a:reply u:second "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := requestFor(t, tc.events, tc.seq, tc.history)
			if s := shape(got); s != tc.want {
				t.Errorf("request = %q, want %q", s, tc.want)
			}
		})
	}
}

// TestTurnOrderOfSimulatedRuns builds logs as the runtime writes them,
// user messages arriving at random while turns run (during model steps,
// during tool calls, several at once, and approvals pausing turns), and
// checks the request of every model step of every turn: it is the
// conversation in turn order (each user message, then what its turn wrote)
// up to the step, it ends with the turn's user message or a tool result,
// and every call is followed by its results; with a short history, the
// same holds of its window.
func TestTurnOrderOfSimulatedRuns(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 2))
	steps := 0
	for range 40 {
		sim := simulateRun(rng, 10+rng.IntN(60))
		for _, step := range sim.steps {
			steps++
			log := sim.events[:step.logged]
			got := requestFor(t, log, step.turn, 1000)
			if s, want := shape(got), shape(step.want); s != want {
				t.Fatalf("turn %d, step over %d events:\nrequest %q\nwant    %q\nlog %s", step.turn, step.logged, s, want, logShape(log))
			}
			short := requestFor(t, log, step.turn, 1+rng.IntN(6))
			checkRequest(t, short, logShape(log))
		}
	}
	t.Logf("%d steps checked", steps)
	if steps < 500 {
		t.Fatalf("%d steps checked: the simulation misses cases", steps)
	}
}

// checkRequest checks what every model request must be: it ends with a
// user message or a tool result, and each assistant message's calls are
// answered right after it, once each.
func checkRequest(t *testing.T, msgs []model.Message, log string) {
	t.Helper()
	if len(msgs) == 0 {
		t.Fatalf("an empty request of %s", log)
	}
	if last := msgs[len(msgs)-1].Role; last == model.RoleAssistant || last == model.RoleSystem {
		t.Fatalf("the request ends with an %s message: %s\nlog %s", last, shape(msgs), log)
	}
	for i, m := range msgs {
		if m.Role == model.RoleTool && (i == 0 || (msgs[i-1].Role != model.RoleTool && msgs[i-1].Role != model.RoleAssistant)) {
			t.Fatalf("a tool result without its call: %s\nlog %s", shape(msgs), log)
		}
		if m.Role != model.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		for j, c := range m.ToolCalls {
			if k := i + 1 + j; k >= len(msgs) || msgs[k].Role != model.RoleTool || msgs[k].ToolCallID != c.ID {
				t.Fatalf("call %s of message %d is not answered in place: %s\nlog %s", c.ID, i, shape(msgs), log)
			}
		}
	}
}

// simulatedRun is a log and the model steps its turns took.
type simulatedRun struct {
	events []store.Event
	steps  []simulatedStep
}

// simulatedStep is one model step: of the turn answering turn, taken when
// the log had logged events, and the conversation it should be shown.
type simulatedStep struct {
	turn   int64
	logged int
	want   []model.Message
}

// simulateRun writes a log of about n events as a run gets them: user
// messages arrive at any moment; turns answer them one at a time, in
// order, each taking model steps that call tools (some waiting for an
// approval, decided later) before a final answer, or failing without one.
func simulateRun(rng *rand.Rand, n int) simulatedRun {
	var sim simulatedRun
	// byTurn is the conversation in turn order, per turn.
	byTurn := map[int64][]model.Message{}
	var order []int64
	var queue []int64
	seq := int64(0)
	add := func(typ string, payload any) int64 {
		seq++
		sim.events = append(sim.events, ev(seq, typ, payload))
		return seq
	}
	post := func() {
		text := fmt.Sprintf("message %d", seq+1)
		s := add(EventUserMessage, UserMessage{Content: text})
		queue = append(queue, s)
		order = append(order, s)
		byTurn[s] = []model.Message{{Role: model.RoleUser, Content: text}}
	}
	// maybePost posts 0, 1 or several messages, at a random moment.
	maybePost := func() {
		if len(sim.events) >= n {
			return
		}
		switch r := rng.IntN(10); {
		case r < 2:
			post()
		case r == 2:
			for range 2 + rng.IntN(4) {
				post()
			}
		}
	}
	conversation := func(upTo int64) []model.Message {
		var out []model.Message
		for _, u := range order {
			if u > upTo {
				break
			}
			out = append(out, byTurn[u]...)
		}
		return out
	}
	post()
	calls := 0
	for len(sim.events) < n || len(queue) > 0 {
		if len(queue) == 0 {
			post()
			continue
		}
		turn := queue[0]
		queue = queue[1:]
		if rng.IntN(8) == 0 {
			maybePost()
			continue // the turn failed before any message
		}
		for step := 0; ; step++ {
			maybePost()
			sim.steps = append(sim.steps, simulatedStep{turn: turn, logged: len(sim.events), want: conversation(turn)})
			if step >= 3 || rng.IntN(3) == 0 {
				text := fmt.Sprintf("answer to %d", turn)
				add(EventAssistantMessage, AssistantMessage{Content: text, MessageSeq: turn})
				byTurn[turn] = append(byTurn[turn], model.Message{Role: model.RoleAssistant, Content: text})
				maybePost()
				break
			}
			m := AssistantMessage{MessageSeq: turn}
			msg := model.Message{Role: model.RoleAssistant}
			for range 1 + rng.IntN(3) {
				// Ids a model server used before, now and then.
				id := fmt.Sprintf("call_%d", calls%7)
				calls++
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)})
				msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)})
			}
			add(EventAssistantMessage, m)
			byTurn[turn] = append(byTurn[turn], msg)
			var waiting []ToolCall
			for _, c := range m.ToolCalls {
				maybePost()
				if rng.IntN(5) == 0 {
					add(EventToolResult, ToolResult{ToolCallID: c.ID, Content: "waits", Status: ToolApprovalPending, MessageSeq: turn})
					waiting = append(waiting, c)
					continue
				}
				add(EventToolResult, ToolResult{ToolCallID: c.ID, Content: "result " + c.ID, Status: ToolSucceeded, MessageSeq: turn})
			}
			// The paused turn resumes after the decisions.
			for _, c := range waiting {
				maybePost()
				add(EventToolResult, ToolResult{ToolCallID: c.ID, Content: "decided " + c.ID, Status: ToolSucceeded, MessageSeq: turn})
			}
			for _, c := range m.ToolCalls {
				content := "result " + c.ID
				if slices.ContainsFunc(waiting, func(w ToolCall) bool { return w.ID == c.ID }) {
					content = "decided " + c.ID
				}
				byTurn[turn] = append(byTurn[turn], model.Message{Role: model.RoleTool, Content: content, ToolCallID: c.ID})
			}
		}
	}
	return sim
}

// logShape renders a log compactly, for failure messages.
func logShape(events []store.Event) string {
	out := ""
	for _, e := range events {
		var m struct {
			Content    string `json:"content"`
			MessageSeq int64  `json:"messageSeq"`
			ToolCallID string `json:"toolCallId"`
		}
		_ = json.Unmarshal(e.Payload, &m)
		switch e.Type {
		case EventUserMessage:
			out += fmt.Sprintf("%d:u ", e.Seq)
		case EventAssistantMessage:
			out += fmt.Sprintf("%d:a(%d) ", e.Seq, m.MessageSeq)
		case EventToolResult:
			out += fmt.Sprintf("%d:t(%d,%s) ", e.Seq, m.MessageSeq, m.ToolCallID)
		}
	}
	return out
}

package assistant

import (
	"encoding/json"
	"fmt"
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
			got, err := project(tc.events)
			if err != nil {
				t.Fatal(err)
			}
			if s := shape(got); s != tc.want {
				t.Errorf("project = %q, want %q", s, tc.want)
			}
		})
	}
}

func TestProjectRefusesCorruptEvents(t *testing.T) {
	for _, typ := range []string{EventUserMessage, EventAssistantMessage, EventToolResult} {
		if _, err := project([]store.Event{{Seq: 1, Type: typ, Payload: json.RawMessage(`[1]`)}}); err == nil {
			t.Errorf("project of a %s that is not an object = nil error", typ)
		}
	}
}

// TestProjectIsACopy checks that the provider's messages share nothing
// with the log: changing them changes no event.
func TestProjectIsACopy(t *testing.T) {
	events := []store.Event{ev(1, EventAssistantMessage, AssistantMessage{ToolCalls: []ToolCall{{ID: "c1", Name: "x", Arguments: json.RawMessage(`{"a":1}`)}}})}
	before := string(events[0].Payload)
	msgs, err := project(events)
	if err != nil {
		t.Fatal(err)
	}
	msgs[0].ToolCalls[0].Arguments[2] = 'X'
	if string(events[0].Payload) != before {
		t.Errorf("changing the projection changed the event: %s", events[0].Payload)
	}
}

func TestTitleFrom(t *testing.T) {
	long := ""
	for range 100 {
		long += "é"
	}
	for in, want := range map[string]string{
		"  hello\nworld":   "hello",
		"a   b\tc":         "a b c",
		long:               string([]rune(long)[:79]) + "…",
		"call notes_list ": "call notes_list",
	} {
		if got := titleFrom(in); got != want {
			t.Errorf("titleFrom(%q) = %q, want %q", in, got, want)
		}
	}
}

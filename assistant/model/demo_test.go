package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/usherhq/usher/assistant/model"
)

var demoTools = []model.Tool{
	{Name: "notes_list", Description: "List the user's notes.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Name: "notes_write", Description: "Write a note.\nNeeds approval.", InputSchema: json.RawMessage(`{"type":"object"}`)},
}

func demoRequest(msgs ...model.Message) model.Request {
	return model.Request{
		Messages: append([]model.Message{{Role: model.RoleSystem, Content: "You are Usher."}}, msgs...),
		Tools:    demoTools,
	}
}

func user(text string) model.Message { return model.Message{Role: model.RoleUser, Content: text} }

func TestDemoGrammar(t *testing.T) {
	longResult := strings.Repeat("note ", 100)
	callWrite := model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
		{ID: "call_w", Name: "notes_write", Arguments: json.RawMessage(`{}`)},
	}}
	tests := []struct {
		name     string
		req      model.Request
		wantCall *model.ToolCall // Name and Arguments; nil for a text answer
		contains []string        // for a text answer
	}{
		{name: "call without arguments", req: demoRequest(user("call notes_list")),
			wantCall: &model.ToolCall{Name: "notes_list", Arguments: json.RawMessage(`{}`)}},
		{name: "call with arguments", req: demoRequest(user(`call notes_write {"title": "groceries", "body": "milk <2l>"}`)),
			wantCall: &model.ToolCall{Name: "notes_write", Arguments: json.RawMessage(`{"title":"groceries","body":"milk <2l>"}`)}},
		{name: "keyword in any case, brace without space", req: demoRequest(user("CALL notes_write{\"n\": 1}")),
			wantCall: &model.ToolCall{Name: "notes_write", Arguments: json.RawMessage(`{"n":1}`)}},
		{name: "surrounding whitespace", req: demoRequest(user("\n  call \t notes_list   {}  \n")),
			wantCall: &model.ToolCall{Name: "notes_list", Arguments: json.RawMessage(`{}`)}},
		{name: "multi-line arguments", req: demoRequest(user("call notes_write {\n  \"title\": \"a\"\n}")),
			wantCall: &model.ToolCall{Name: "notes_write", Arguments: json.RawMessage(`{"title":"a"}`)}},
		{name: "unknown tool", req: demoRequest(user("call notes_delete {}")),
			contains: []string{`"notes_delete" is not available`, "notes_list, notes_write"}},
		{name: "unknown tool, none on offer", req: model.Request{Messages: []model.Message{user("call notes_list")}},
			contains: []string{`"notes_list" is not available`, "no tools"}},
		{name: "arguments not JSON", req: demoRequest(user("call notes_write {title: x}")),
			contains: []string{"notes_write must be one JSON object"}},
		{name: "arguments an array", req: demoRequest(user(`call notes_write ["x"]`)),
			contains: []string{"must be one JSON object"}},
		{name: "text after the arguments", req: demoRequest(user(`call notes_write {} please`)),
			contains: []string{"must be one JSON object"}},
		{name: "call without a name", req: demoRequest(user("call")),
			contains: []string{"Name the tool", "call notes_list {}"}},
		{name: "tools", req: demoRequest(user("tools")),
			contains: []string{"- notes_list: List the user's notes.", "- notes_write: Write a note. Needs approval."}},
		{name: "tools in any case", req: demoRequest(user(" Tools ")),
			contains: []string{"notes_list", "notes_write"}},
		{name: "tools, none on offer", req: model.Request{Messages: []model.Message{user("tools")}},
			contains: []string{"no tools available"}},
		{name: "anything else", req: demoRequest(user("Hello, who are you?")),
			contains: []string{"demo model", `You wrote: "Hello, who are you?"`, "call TOOL {json arguments}", "call notes_list {}", `"tools"`}},
		{name: "a word starting with call", req: demoRequest(user("calling all notes")),
			contains: []string{`You wrote: "calling all notes"`}},
		{name: "long message echoed in part", req: demoRequest(user(strings.Repeat("abc ", 50))),
			contains: []string{`You wrote: "abc abc`, `…"`}},
		{name: "empty request", req: model.Request{},
			contains: []string{"call TOOL {json arguments}"}},
		{name: "tool result", req: demoRequest(user("call notes_write {}"), callWrite,
			model.Message{Role: model.RoleTool, ToolCallID: "call_w", Content: "saved note 7"}),
			contains: []string{`The tool notes_write returned: "saved note 7"`}},
		{name: "empty tool result", req: demoRequest(user("call notes_write {}"), callWrite,
			model.Message{Role: model.RoleTool, ToolCallID: "call_w"}),
			contains: []string{"notes_write returned: nothing"}},
		{name: "long tool result truncated", req: demoRequest(user("call notes_write {}"), callWrite,
			model.Message{Role: model.RoleTool, ToolCallID: "call_w", Content: longResult}),
			contains: []string{`returned: "note note`, `…"`}},
		{name: "parallel tool results", req: demoRequest(user("x"),
			model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
				{ID: "a", Name: "notes_list"}, {ID: "b", Name: "notes_write"},
			}},
			model.Message{Role: model.RoleTool, ToolCallID: "a", Content: "[]"},
			model.Message{Role: model.RoleTool, ToolCallID: "b", Content: "approval required:\n  ask alice"}),
			contains: []string{"- notes_list: \"[]\"", `- notes_write: "approval required: ask alice"`}},
	}
	d := model.NewDemo()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var deltas []string
			resp, err := d.Complete(t.Context(), tt.req, func(s string) { deltas = append(deltas, s) })
			if err != nil {
				t.Fatal(err)
			}
			msg := resp.Message
			if msg.Role != model.RoleAssistant {
				t.Errorf("role = %q", msg.Role)
			}
			if got := strings.Join(deltas, ""); got != msg.Content {
				t.Errorf("deltas concatenate to %q, content is %q", got, msg.Content)
			}
			if tt.wantCall != nil {
				if len(msg.ToolCalls) != 1 || msg.Content != "" || resp.FinishReason != "tool_calls" {
					t.Fatalf("response = %+v, want one tool call", resp)
				}
				tc := msg.ToolCalls[0]
				if tc.Name != tt.wantCall.Name || string(tc.Arguments) != string(tt.wantCall.Arguments) || tc.ArgumentsError != "" {
					t.Errorf("call = %s %s, want %s %s", tc.Name, tc.Arguments, tt.wantCall.Name, tt.wantCall.Arguments)
				}
				if !strings.HasPrefix(tc.ID, "call_") {
					t.Errorf("call ID %q", tc.ID)
				}
				return
			}
			if len(msg.ToolCalls) != 0 || resp.FinishReason != "stop" {
				t.Errorf("response = %+v, want text only", resp)
			}
			for _, want := range tt.contains {
				if !strings.Contains(msg.Content, want) {
					t.Errorf("answer %q does not contain %q", msg.Content, want)
				}
			}
		})
	}
}

func TestDemoTruncatesQuotes(t *testing.T) {
	req := demoRequest(user("x"),
		model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "a", Name: "notes_list"}}},
		model.Message{Role: model.RoleTool, ToolCallID: "a", Content: strings.Repeat("é", 1000)})
	resp, err := model.NewDemo().Complete(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	quote := resp.Message.Content[strings.Index(resp.Message.Content, `"`)+1 : strings.LastIndex(resp.Message.Content, `"`)]
	if n := utf8.RuneCountInString(quote); n != 240 || !utf8.ValidString(quote) {
		t.Errorf("quote has %d characters (valid UTF-8: %v), want 240", n, utf8.ValidString(quote))
	}
}

func TestDemoDeterministic(t *testing.T) {
	d := model.NewDemo()
	for _, text := range []string{"call notes_write {\"title\": \"x\"}", "hello", "tools", "call nope"} {
		req := demoRequest(user(text))
		first, err := d.Complete(t.Context(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		second, err := model.NewDemo().Complete(t.Context(), deepCopy(t, req), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, second) {
			t.Errorf("%q: responses differ:\n%+v\n%+v", text, first, second)
		}
	}

	// Each step of a run gets a different call ID.
	one, _ := d.Complete(t.Context(), demoRequest(user("call notes_list")), nil)
	two, _ := d.Complete(t.Context(), demoRequest(user("hi"), model.Message{Role: model.RoleAssistant, Content: "hello"}, user("call notes_list")), nil)
	if id1, id2 := one.Message.ToolCalls[0].ID, two.Message.ToolCalls[0].ID; id1 == id2 {
		t.Errorf("two steps got the same call ID %s", id1)
	}
}

func TestDemoDoesNotModifyRequest(t *testing.T) {
	req := demoRequest(user("call notes_write {\"a\": 1}"))
	before := deepCopy(t, req)
	if _, err := model.NewDemo().Complete(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req, before) {
		t.Error("Complete modified the request")
	}
}

func TestDemoStreamsWords(t *testing.T) {
	var deltas []string
	resp, err := model.NewDemo().Complete(t.Context(), demoRequest(user("hello there")), func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) < 5 || strings.Join(deltas, "") != resp.Message.Content {
		t.Fatalf("deltas %q do not stream %q word by word", deltas, resp.Message.Content)
	}
	for _, d := range deltas[:len(deltas)-1] {
		if strings.TrimSpace(d) == "" || strings.Contains(strings.TrimSpace(d), " ") {
			t.Errorf("delta %q is not one word", d)
		}
	}
	if resp.Usage.PromptTokens != 5 || resp.Usage.CompletionTokens != len(strings.Fields(resp.Message.Content)) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestDemoCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := model.NewDemo().Complete(ctx, demoRequest(user("hi")), nil)
	me := asModelError(t, err)
	if me.Provider != "demo" || !errors.Is(err, context.Canceled) {
		t.Errorf("error = %+v, want a demo cancellation", me)
	}

	// Cancelled while streaming: it stops.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	var n int
	_, err = model.NewDemo().Complete(ctx, demoRequest(user("hi")), func(string) { n++; cancel() })
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("err %v after %d deltas, want a cancellation after 1", err, n)
	}
}

// ExampleDemo shows the demo model calling a tool and then summarising its
// result.
func ExampleDemo() {
	demo := model.NewDemo()
	tools := []model.Tool{{Name: "notes_list", Description: "List notes."}}
	req := model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: `call notes_list {"limit": 2}`}},
		Tools:    tools,
	}
	resp, _ := demo.Complete(context.Background(), req, nil)
	call := resp.Message.ToolCalls[0]
	fmt.Println(resp.FinishReason, call.Name, string(call.Arguments))

	req.Messages = append(req.Messages, resp.Message,
		model.Message{Role: model.RoleTool, ToolCallID: call.ID, Content: `["groceries", "ideas"]`})
	resp, _ = demo.Complete(context.Background(), req, func(delta string) {})
	fmt.Println(resp.Message.Content)
	// Output:
	// tool_calls notes_list {"limit":2}
	// The tool notes_list returned: "["groceries", "ideas"]"
}

// TestDemoSummarize: a request for a summary gets an extractive one —
// deterministic, a real reduction of a long text, its first and last
// lines kept (each once), the rest counted — and no tool call.
func TestDemoSummarize(t *testing.T) {
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "[user] line %d of a long conversation about the quarterly report\n", i)
		b.WriteString("[assistant] the same answer every time\n")
	}
	req := model.Request{Summarize: true, Messages: []model.Message{{Role: model.RoleSystem, Content: "Summarise."}, {Role: model.RoleUser, Content: b.String()}}}
	resp, err := model.NewDemo().Complete(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := model.NewDemo().Complete(t.Context(), req, nil)
	sum := resp.Message.Content
	switch {
	case sum != again.Message.Content:
		t.Error("two summaries of one request differ")
	case len(resp.Message.ToolCalls) != 0:
		t.Error("the summary calls tools")
	case len(sum) > 4<<10+200 || len(sum)*4 >= b.Len():
		t.Errorf("the summary is %d bytes of %d", len(sum), b.Len())
	case !strings.HasPrefix(sum, "[user] line 0 of") || !strings.HasSuffix(sum, "[user] line 399 of a long conversation about the quarterly report"):
		t.Errorf("the summary does not keep the first and last lines:\n%s", sum)
	case strings.Count(sum, "the same answer every time") != 1 || !strings.Contains(sum, "lines left out)"):
		t.Errorf("the summary repeats a line or hides what it left out:\n%s", sum)
	}
	// Without Summarize the same text is an ordinary message.
	req.Summarize = false
	if resp, _ := model.NewDemo().Complete(t.Context(), req, nil); !strings.HasPrefix(resp.Message.Content, "I am Usher's demo model") {
		t.Errorf("without Summarize: %.60q", resp.Message.Content)
	}
}

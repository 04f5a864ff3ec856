package assistant

import (
	"encoding/json"
	"fmt"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// noResult answers, in the model's history, a tool call whose result was
// never recorded (a turn cancelled while the call ran), so that every call
// a provider sees has an answer.
const noResult = "No result was recorded for this call."

// project turns message events into model messages: a deep copy, so the
// provider never touches the log. Later results of one tool call replace
// earlier ones (an approval-pending result, then the result after the
// decision); tool results at the start, whose call lies outside the window,
// are dropped; a call with no recorded result gets one saying so.
func project(events []store.Event) ([]model.Message, error) {
	var out []model.Message
	// The position in out of each tool call's answer, and of each call.
	answer := map[string]int{}
	pending := map[string]bool{}
	for _, e := range events {
		switch e.Type {
		case EventUserMessage:
			var m UserMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			out = closeCalls(out, pending)
			out = append(out, model.Message{Role: model.RoleUser, Content: m.Content})
		case EventAssistantMessage:
			var m AssistantMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			out = closeCalls(out, pending)
			msg := model.Message{Role: model.RoleAssistant, Content: m.Content, ToolCalls: toModelCalls(m.ToolCalls)}
			for i, c := range msg.ToolCalls {
				if len(c.Arguments) == 0 || string(c.Arguments) == "null" {
					msg.ToolCalls[i].Arguments = json.RawMessage(`{}`)
				}
				pending[c.ID] = true
			}
			out = append(out, msg)
		case EventToolResult:
			var r ToolResult
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			msg := model.Message{Role: model.RoleTool, Content: r.Content, ToolCallID: r.ToolCallID}
			if i, ok := answer[r.ToolCallID]; ok {
				out[i] = msg
				continue
			}
			if !pending[r.ToolCallID] {
				continue // its call is outside the window
			}
			delete(pending, r.ToolCallID)
			answer[r.ToolCallID] = len(out)
			out = append(out, msg)
		}
	}
	return out, nil
}

// closeCalls answers the calls still pending before the next message.
func closeCalls(out []model.Message, pending map[string]bool) []model.Message {
	if len(pending) == 0 {
		return out
	}
	// In call order: find the last assistant message's calls.
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].Role != model.RoleAssistant {
			continue
		}
		for _, c := range out[i].ToolCalls {
			if pending[c.ID] {
				out = append(out, model.Message{Role: model.RoleTool, Content: noResult, ToolCallID: c.ID})
			}
		}
		break
	}
	clear(pending)
	return out
}

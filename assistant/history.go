package assistant

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// noResult answers, in the model's history, a tool call whose result was
// never recorded (a turn cancelled while the call ran), so that every call
// a provider sees has an answer.
const noResult = "No result was recorded for this call."

// turnMessage is a message event and the turn it belongs to: the sequence
// of the user message that turn answers.
type turnMessage struct {
	store.Event
	turn int64
}

// inTurns tells which turn each message event belongs to. A user message
// opens its own turn; the messages a turn writes name their turn
// (MessageSeq). A message that names none (written before messages named
// their turn) belongs to the user message before it in events, or, with
// none before it, to turn 0, before every other.
func inTurns(events []store.Event) ([]turnMessage, error) {
	out := make([]turnMessage, len(events))
	var last int64
	for i, e := range events {
		turn := last
		switch e.Type {
		case EventUserMessage:
			turn, last = e.Seq, e.Seq
		case EventAssistantMessage, EventToolResult:
			var m struct {
				MessageSeq int64 `json:"messageSeq"`
			}
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			if m.MessageSeq > 0 {
				turn = m.MessageSeq
			}
		}
		out[i] = turnMessage{Event: e, turn: turn}
	}
	return out, nil
}

// turnOrder puts messages in the order of their turns: each user message,
// then what its turn wrote, turn after turn. A message that arrived while
// a turn ran follows that turn's output, though the log holds it earlier.
// Within a turn the log's order stays. It sorts msgs in place.
func turnOrder(msgs []turnMessage) []store.Event {
	slices.SortStableFunc(msgs, func(a, b turnMessage) int { return cmp.Compare(a.turn, b.turn) })
	out := make([]store.Event, len(msgs))
	for i, m := range msgs {
		out[i] = m.Event
	}
	return out
}

// contextMessage is a model message of the bounded context and the event
// it was made from: a result that replaced an earlier one carries the
// later result's sequence, the answer of a call with no recorded result
// its call's.
type contextMessage struct {
	model.Message
	Seq int64
}

// messagesOf returns the model messages of msgs (nil for none).
func messagesOf(msgs []contextMessage) []model.Message {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.Message
	}
	return out
}

// projectSeqs turns message events, in turn order, into model messages,
// each with its event's sequence: a deep copy, so the provider never
// touches the log. A later result of a tool call replaces the earlier one
// (an approval-pending result, then the result after the decision); tool
// results at the start, whose call lies outside the window, are dropped; a
// call with no recorded result gets one saying so. Results answer the
// calls of the assistant message before them, so a call id a model used
// again in a later step is another call.
func projectSeqs(events []store.Event) ([]contextMessage, error) {
	var out []contextMessage
	// The position in out of the answer of each call of the last
	// assistant message, and its calls still unanswered.
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
			out = append(out, contextMessage{model.Message{Role: model.RoleUser, Content: m.Content, Parts: attachmentParts(m.Attachments)}, e.Seq})
		case EventSummaryMessage:
			var m SummaryMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			out = closeCalls(out, pending)
			out = append(out, contextMessage{summaryMessage(store.ContextSnapshot{Summary: m.Content}), e.Seq})
		case EventAssistantMessage:
			var m AssistantMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			out = closeCalls(out, pending)
			clear(answer)
			msg := model.Message{Role: model.RoleAssistant, Content: m.Content, ToolCalls: toModelCalls(m.ToolCalls)}
			for i, c := range msg.ToolCalls {
				if len(c.Arguments) == 0 || string(c.Arguments) == "null" {
					msg.ToolCalls[i].Arguments = json.RawMessage(`{}`)
				}
				pending[c.ID] = true
			}
			out = append(out, contextMessage{msg, e.Seq})
		case EventToolResult:
			var r ToolResult
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return nil, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			msg := contextMessage{model.Message{Role: model.RoleTool, Content: r.Content, ToolCallID: r.ToolCallID, Parts: toModelParts(r.Parts)}, e.Seq}
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
	return closeCalls(out, pending), nil
}

// closeCalls answers the calls still pending before the next message.
func closeCalls(out []contextMessage, pending map[string]bool) []contextMessage {
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
				out = append(out, contextMessage{model.Message{Role: model.RoleTool, Content: noResult, ToolCallID: c.ID}, out[i].Seq})
			}
		}
		break
	}
	clear(pending)
	return out
}

package assistant

import (
	"encoding/json"

	"github.com/usherhq/usher/assistant/model"
)

// The event types of a run's log. Messages (types starting with
// "message.") are the conversation; the agent.* events record how each turn
// went, without its content.
const (
	EventUserMessage      = "message.user"
	EventAssistantMessage = "message.assistant"
	EventToolResult       = "message.tool"
	// EventSummaryMessage opens a run continued from another (manual
	// compaction): the summary its history starts from.
	EventSummaryMessage = "message.summary"

	EventTurnStart      = "agent.turn.start"
	EventSystemPrompt   = "agent.system_prompt"
	EventRuntimeContext = "agent.runtime_context"
	EventTurnPause      = "agent.turn.pause"
	EventTurnEnd        = "agent.turn.end"
	EventBranchSwitch   = "agent.branch.switch"
	EventBranchDelete   = "agent.branch.delete"

	// EventCompacted and EventCompactionFailed record a compaction
	// (compact.go); EventRunContinued that the run was continued in
	// another (continue.go).
	EventCompacted        = "agent.context.compacted"
	EventCompactionFailed = "agent.context.compaction_failed"
	EventRunContinued     = "agent.run.continued"

	// EventStepEnd records the end of a slice's durable step (its
	// payload a store.StepRecord; it is store.EventStepEnd), and
	// EventRunBudget that the run stopped at its budget of slices
	// (steps.go).
	EventStepEnd   = "agent.step.end"
	EventRunBudget = "agent.run.budget"
)

// UserMessage is the payload of a message.user event.
type UserMessage struct {
	Content string `json:"content"`
	// Sender is who sent it, as their verified identity said then: the
	// turn that answers the message calls tools with these claims in its
	// broker token, for policies on tenants and groups.
	Sender *Sender `json:"sender,omitempty"`
	// Edits, on the first message of a branch made by an edit, is the
	// message it replaces; Regenerates, on that of a branch made to
	// regenerate a reply, is the message it repeats (branches.go).
	Edits       int64 `json:"edits,omitempty"`
	Regenerates int64 `json:"regenerates,omitempty"`
	// Attachments are the files the message sends, by reference: their
	// content stays in the store, never in the log.
	Attachments []AttachmentRef `json:"attachments,omitempty"`
}

// SummaryMessage is the payload of a message.summary event: the summary
// of the run it continues, which the model sees where the event is, as the
// summary of a context snapshot.
type SummaryMessage struct {
	Content string `json:"content"`
	// FromRun is the run continued; FromVersion its snapshot the summary
	// is; ToSeq the last message of FromRun it covers.
	FromRun     string `json:"fromRun"`
	FromVersion int64  `json:"fromVersion"`
	ToSeq       int64  `json:"toSeq"`
}

// Sender is the identity a message was sent with, beyond the run's owner
// id (which names the issuer, the tenant and the user).
type Sender struct {
	Tenant string   `json:"tenant,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Roles are the app roles, which the turn's daily token limit
	// (TokenLimits) reads with the groups; the broker token does not
	// carry them.
	Roles []string `json:"roles,omitempty"`
}

// AssistantMessage is the payload of a message.assistant event.
type AssistantMessage struct {
	Content   string     `json:"content"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// MessageSeq is the user message whose turn wrote this one: the
	// model sees the history grouped by turn, whatever arrived meanwhile.
	MessageSeq int64 `json:"messageSeq,omitempty"`
	// Stopped marks the partial reply of a turn the person stopped: what
	// the model had written when it was cut short. It follows the turn's
	// end in the log, and is part of the history all the same.
	Stopped bool `json:"stopped,omitempty"`
}

// ToolCall is one tool call the model made.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult is the payload of a message.tool event: what a tool call
// returned. A call that waits for an approval has a result with Approval
// set and Status "approval_pending"; when the approval is decided, a new
// result for the same call follows.
type ToolResult struct {
	ToolCallID string          `json:"toolCallId"`
	Name       string          `json:"name"`
	Content    string          `json:"content"`
	IsError    bool            `json:"isError,omitempty"`
	Status     string          `json:"status"`
	Approval   *ApprovalRef    `json:"approval,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
	// Parts describe the result's content beyond text (images, audio,
	// resources), in order, at most maxResultParts: what a text-only
	// model is told of them. The content itself is not kept.
	Parts []ContentPart `json:"parts,omitempty"`
	// MessageSeq is the user message whose turn made the call.
	MessageSeq int64 `json:"messageSeq,omitempty"`
}

// ContentPart describes one piece of an MCP result's content beyond
// text: its kind ("image", "audio", "resource" for an embedded resource,
// "resource_link"), media type, URI and name (a resource's), and size in
// bytes (0 when unknown).
type ContentPart struct {
	Kind     string `json:"kind"`
	MIMEType string `json:"mimeType,omitempty"`
	URI      string `json:"uri,omitempty"`
	Name     string `json:"name,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// maxResultParts bounds the parts a tool result describes.
const maxResultParts = 32

// The statuses of a ToolResult.
const (
	ToolSucceeded       = "succeeded"
	ToolFailed          = "failed"
	ToolDenied          = "denied"
	ToolApprovalPending = "approval_pending"
)

// ApprovalRef names the approval a tool call waits for.
type ApprovalRef struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	URL    string `json:"url,omitempty"`
}

// TurnStart is the payload of agent.turn.start.
type TurnStart struct {
	MessageSeq int64 `json:"messageSeq"`
}

// BranchSwitch is the payload of agent.branch.switch: the run's active
// branch became Branch (it was From). The store writes it (see
// store.EventBranchSwitch).
type BranchSwitch struct {
	Branch int64 `json:"branch"`
	From   int64 `json:"from"`
}

// BranchDelete is the payload of agent.branch.delete, the first event of
// a branch that a deletion made: it leaves out the message Deletes (and
// what went with it) up to UntilSeq, the first message it keeps after it
// (0: none), of the line From. The store writes it (see
// store.EventBranchDelete).
type BranchDelete struct {
	Deletes  int64 `json:"deletes"`
	UntilSeq int64 `json:"untilSeq,omitempty"`
	From     int64 `json:"from"`
}

// TurnEnd is the payload of agent.turn.end.
type TurnEnd struct {
	MessageSeq int64 `json:"messageSeq"`
	// Status is completed, failed, cancelled or stopped.
	Status string `json:"status"`
	// Error explains a failed turn in words fit for the user.
	Error string `json:"error,omitempty"`
}

// The statuses of a TurnEnd.
const (
	TurnCompleted = "completed"
	TurnFailed    = "failed"
	TurnCancelled = "cancelled"
	// TurnStopped: the person stopped the turn (POST …/stop); the run
	// takes messages as before.
	TurnStopped = "stopped"
)

// TurnPause is the payload of agent.turn.pause: the turn waits for these
// approvals.
type TurnPause struct {
	MessageSeq int64    `json:"messageSeq"`
	Approvals  []string `json:"approvals"`
}

// SystemPromptRecord is the payload of agent.system_prompt: counts only,
// never the prompt's text.
type SystemPromptRecord struct {
	RunID      string `json:"runId"`
	Characters int    `json:"characters"`
}

// RuntimeContextRecord is the payload of agent.runtime_context: what the
// model was given, as counts only — never history, tool names or schemas,
// or any credential.
type RuntimeContextRecord struct {
	RunID      string `json:"runId"`
	Messages   int    `json:"messages"`
	Characters int    `json:"characters"`
	Tools      int    `json:"tools"`
	// Delivery is how the turn's tools were reached: "held" when the
	// run's MCP session was reused, "fresh" when it was opened for the
	// turn.
	Delivery string `json:"delivery"`
}

// mustJSON encodes a payload type of this file, which always encodes.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("assistant: encoding an event payload: " + err.Error())
	}
	return b
}

// toModelParts converts recorded parts to the model's form (nil for
// none).
func toModelParts(parts []ContentPart) []model.Part {
	if len(parts) == 0 {
		return nil
	}
	out := make([]model.Part, len(parts))
	for i, p := range parts {
		out[i] = model.Part{Kind: p.Kind, MIMEType: p.MIMEType, URI: p.URI, Name: p.Name, Size: p.Size}
	}
	return out
}

// toModelCalls converts recorded tool calls to the model's form.
func toModelCalls(calls []ToolCall) []model.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]model.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = model.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

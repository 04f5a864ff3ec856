package model

import (
	"context"
	"encoding/json"
	"fmt"
)

// Role is the author of a [Message].
type Role string

// The roles of a model conversation.
const (
	// RoleSystem is the system prompt.
	RoleSystem Role = "system"
	// RoleUser is a message written by the person the assistant works for.
	RoleUser Role = "user"
	// RoleAssistant is a message the model wrote: text, tool calls, or both.
	RoleAssistant Role = "assistant"
	// RoleTool is the result of one tool call, answering [ToolCall.ID].
	RoleTool Role = "tool"
)

// Message is one message of a model conversation (a projection of the run's
// event log).
type Message struct {
	// Role is who wrote the message.
	Role Role
	// Content is the message text. It may be empty for an assistant message
	// that only calls tools.
	Content string
	// ToolCalls are the tools an assistant message calls, in the model's order.
	ToolCalls []ToolCall
	// ToolCallID is, for a tool message, the [ToolCall.ID] it answers.
	ToolCallID string
	// Parts is the non-text content the message carries besides Content,
	// in order (what an MCP tool result or resource holds beyond text, and
	// the files a person attached: "image" and "file" parts). A text-only
	// provider gets a placeholder line for each (see the payload package);
	// [OpenAI] sends a user message's images that carry their data as
	// image_url parts, and refuses a request that carries any other part.
	Parts []Part
}

// Part is one piece of non-text content of a [Message]: one of the MCP
// content types beyond text.
type Part struct {
	// Kind is the MCP content type: "image", "audio", "resource" (an
	// embedded resource) or "resource_link"; or "file", a text file a
	// person attached.
	Kind string
	// MIMEType is the content's media type, if known.
	MIMEType string
	// URI names a resource or resource link.
	URI string
	// Name is a resource link's name or title.
	Name string
	// Data is the content itself (image or audio bytes, a resource's text
	// or blob), when the message carries it; a link carries none.
	Data []byte
	// Size is the content's size in bytes when Data is not carried (0:
	// unknown).
	Size int64
}

// ToolCall is one tool call requested by the model.
type ToolCall struct {
	// ID identifies the call within its response (a provider replaces a
	// missing id, or one a server gave two calls of one response); the
	// tool message that answers it carries the same ID. A server may use
	// an id again in a later step, for another call.
	ID string
	// Name is the tool's name, as offered in [Tool.Name] (a model may still
	// name a tool it was not offered).
	Name string
	// Arguments is a JSON object. It is nil when the model's arguments were
	// not a JSON object; ArgumentsError then says why.
	Arguments json.RawMessage
	// ArgumentsError is empty when Arguments holds the model's arguments.
	// Otherwise it describes, in a sentence meant for the model, why its
	// arguments could not be used; the runtime must not run the tool and
	// should answer the call with a tool message carrying this error, so the
	// model can correct itself. When such a call is sent back to a provider
	// as history, its arguments are sent as {}.
	ArgumentsError string
}

// Tool is one tool offered to the model (exactly what MCP tools/list
// returned).
type Tool struct {
	// Name is the tool's name.
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is the JSON Schema object of the tool's arguments. Empty
	// means a tool without arguments.
	InputSchema json.RawMessage
}

// Request is one model step: the conversation so far and the tools on offer.
type Request struct {
	// Messages is the conversation, oldest first: usually the system prompt,
	// then history, then the newest message.
	Messages []Message
	// Tools are the tools the model may call in this step.
	Tools []Tool
	// Model names the model to answer this step, one the operator
	// offers; empty: the provider's own (OpenAIOptions.Model). [Demo]
	// answers the same whatever it names.
	Model string
	// Summarize marks a request for a summary (context compaction): its
	// messages are the summariser's instructions and the text to
	// summarise, with no history and no tools, and the answer is the
	// summary. Providers send it as any other request; [Demo] answers it
	// with an extractive summary.
	Summarize bool
}

// Response is the model's answer to one [Request].
type Response struct {
	// Message is the assistant's message (role assistant): text and/or tool
	// calls. Decide on len(Message.ToolCalls), not on FinishReason: some
	// servers report "stop" for a step that calls tools.
	Message Message
	// FinishReason is why the model stopped, as reported ("stop",
	// "tool_calls", "length", "content_filter", ...).
	FinishReason string
	// Usage is what the step cost, as reported.
	Usage Usage
}

// Usage counts the tokens of one model step, as the provider reported them
// (zero when it did not).
type Usage struct {
	// PromptTokens is the size of the request.
	PromptTokens int
	// CompletionTokens is the size of the answer.
	CompletionTokens int
}

// Provider completes one model step.
//
// onDelta, when non-nil, receives the assistant text as it streams: the
// concatenated deltas equal Response.Message.Content. It is called on the
// goroutine that called Complete, before Complete returns. Complete must not
// retain or modify req. Every error it returns is an *[Error].
type Provider interface {
	Complete(ctx context.Context, req Request, onDelta func(text string)) (Response, error)
}

// Error is a failed model step. Its Message is safe to show a user: it never
// holds an API key, a request body, a provider's own error message (at most
// its error code, such as "rate_limit_exceeded") or a URL beyond the
// provider's host name.
//
// Error unwraps to [context.Canceled] or [context.DeadlineExceeded] when the
// step ended because its context did, and to nothing else: the provider's
// raw error (which may carry request details) is deliberately not reachable.
type Error struct {
	// Provider names the provider: "openai" or "demo".
	Provider string
	// StatusCode is the HTTP status the provider answered, or 0 when the
	// failure was not an HTTP error status (network, timeout, bad stream).
	StatusCode int
	// Retryable reports whether the same step may succeed if tried again
	// later (rate limits, server errors, network failures, timeouts). The
	// runtime owns retries: providers do not retry on their own.
	Retryable bool
	// Message says what went wrong, for a person.
	Message string

	// cause is a context error, exposed through Unwrap.
	cause error
}

// Error returns "model PROVIDER: MESSAGE".
func (e *Error) Error() string {
	return fmt.Sprintf("model %s: %s", e.Provider, e.Message)
}

// Unwrap returns the context error that ended the step, if any.
func (e *Error) Unwrap() error { return e.cause }

// cancelledError is the error of a step whose caller's context ended.
func cancelledError(provider string, cause error) *Error {
	return &Error{Provider: provider, Message: "the model step was cancelled", cause: cause}
}

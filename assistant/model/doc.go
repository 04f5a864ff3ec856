// Package model owns the assistant runtime's model providers: the
// conversation types a model step takes and returns ([Request], [Message],
// [ToolCall], [Tool], [Response]), the [Provider] interface, and its two
// implementations, [OpenAI] and [Demo]. Errors are an *[Error], whose
// message is safe to show a user and whose Retryable field drives the
// runtime's retries.
//
// Its subpackage payload prepares a request for one provider: a deep copy,
// stripped of what is internal to Usher and repaired into the shape the
// provider takes. Usher wraps [OpenAI] in it.
//
// # OpenAI
//
// [OpenAI] talks to any OpenAI-compatible Chat Completions endpoint (OpenAI,
// Azure OpenAI's /openai/v1, Ollama, vLLM, LiteLLM) through the official
// openai-go client. It streams every step, accumulates parallel tool calls
// from the stream, and never retries on its own (see [OpenAI] for why).
// Tool-call arguments that are not a JSON object are kept as a call with
// nil Arguments and an [ToolCall.ArgumentsError] the runtime hands back to
// the model as the tool's error.
//
// # Demo
//
// [Demo] is the embedded default's provider: deterministic (the same
// request gets the same response, tool call IDs included), no network. It
// decides on the last message of the request:
//
//   - A user message "tools" lists the tools on offer, with their
//     descriptions.
//   - A user message "call TOOL {json arguments}" calls TOOL with those
//     arguments, if TOOL is among the tools on offer. The arguments are
//     optional ("call TOOL" calls it with {}); when present they must be one
//     JSON object. "call" and "tools" may be written in any case; the tool
//     name runs up to the first space or "{". Asking for a tool that is not
//     on offer gets an answer naming the tools that are.
//   - A tool result (the last message has role tool) gets a short summary
//     that quotes each result of that step, whitespace collapsed and cut
//     after 240 characters.
//   - Anything else gets a friendly reply that explains this grammar and
//     quotes the start of the message.
//   - A request for a summary ([Request.Summarize], context compaction)
//     gets an extractive one: the lines of its non-system messages in
//     order, each once and cut after 120 characters, within a sixteenth of
//     the text (at least 1 KiB, at most half the text and 4 KiB): the first
//     lines, a line saying how many were left out, and the last lines.
//
// For example, with a notes_write tool on offer:
//
//	call notes_write {"title": "groceries", "body": "milk"}
//
// The demo streams its text through onDelta one word (with the whitespace
// after it) at a time. Its usage counts words, not tokens.
package model

// Package payload owns the provider payload: the last of the four
// representations of a conversation, a deep copy of the bounded model
// context prepared for one provider. The event log, the context snapshots
// and the bounded model context are never touched by it: [Prepare] copies
// what it keeps, and what it repairs exists only in the copy.
//
// Every provider gets the copy stripped of what is internal to Usher: the
// [SummaryMarker] a compaction summary carries, and the arguments error of
// a tool call (whose arguments are sent as {}). The event payloads' UI and
// bookkeeping fields (a tool result's status, approval, structured content
// and error flag; a message's sender and turn) never reach a
// [model.Message] at all. Every provider gets a text file a person
// attached (a "file" part that carries its data) as its text, in a fenced
// block under its name ([FencedFile]), appended to its message's text. A
// [Profile] adds what a provider needs beyond that:
//
//   - [TextOnly]: each non-text [model.Part] becomes a compact placeholder
//     line in its message's text, such as "[image: image/png, 48213
//     bytes]". With [Images] too, an image a person attached to a user
//     message (a part that carries its data) stays a part.
//   - [Strict]: the conversation is repaired into the shape strict servers
//     check (OpenAI refuses a request with an unanswered tool call or a
//     tool result without its call): all system messages merged, in order,
//     into one at the start; every tool call answered by the tool results
//     that follow its assistant message, in that message's exchange, and
//     by one each; tool-call ids unique; no two user messages, or two
//     assistant messages, in a row; and a user turn at the end. The rules
//     are on [Strict].
//
// [NewProvider] wraps a [model.Provider] so that every request it completes
// is prepared with a profile first; Usher wraps its OpenAI-compatible
// provider with [OpenAICompatible]. The demo provider reads the bounded
// context as it is.
package payload

package assistant

import (
	"slices"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
)

// The bounded model context (representation 3 of docs/context.md) of a run
// with a context snapshot: the leading instructions, the latest snapshot's
// summary, and a tail of the canonical messages after the snapshot's
// coverage. A run without a snapshot keeps the history turn.history
// reads, which bounds the events it reads rather than the messages.

// summaryHeading follows the summary marker in the summary's message, so
// that the model reads the summary for what it is.
const summaryHeading = "Summary of the conversation before the messages that follow:\n\n"

// summaryMessage is the message that stands for the messages snap covers:
// a system message whose text is payload.SummaryMarker, a line break,
// summaryHeading and the summary.
//
// It is a system message, placed right after the instructions, because
// strict providers merge every system message, in order, into one at the
// start (payload.Strict): there it stays before the messages it precedes,
// and it never merges into the user's next message, as a user message
// would, nor lets the tail start with a role a provider refuses after it.
// The summary holds only what the conversation held, and the system
// prompt is no security boundary: the MCP server's policy decides what a
// tool call may do.
func summaryMessage(snap store.ContextSnapshot) model.Message {
	return model.Message{Role: model.RoleSystem, Content: payload.SummaryMarker + "\n" + summaryHeading + snap.Summary}
}

// boundedTail is the tail of the bounded context: at most bound of the
// last messages of past (the history in turn order, as projectSeqs builds
// it) whose Seq is after snap's coverage (every message with none), less
// those at its start that answer a call before the tail. A tool call is
// never split from its results: when the cut falls inside a call's
// results, it moves forward past them, so the tail holds fewer messages,
// never more. It never modifies past; the result shares the messages'
// contents with it.
func boundedTail(snap *store.ContextSnapshot, past []contextMessage, bound int) []contextMessage {
	tail := afterCoverage(snap, past)
	return groupStart(tail[max(0, len(tail)-max(0, bound)):])
}

// withSummary is the history the model reads from msgs: with snap, its
// summary (summaryMessage) first, then msgs' model messages. It is never
// nil, even when empty.
func withSummary(snap *store.ContextSnapshot, msgs []contextMessage) []model.Message {
	out := make([]model.Message, 0, 1+len(msgs))
	if snap != nil {
		out = append(out, summaryMessage(*snap))
	}
	return append(out, messagesOf(msgs)...)
}

// turnTail is what the turn's own messages (msgs, as projectSeqs builds
// them) add to the bounded context: all of them, unbounded, as without a
// snapshot, unless snap reaches into the turn (it was compacted during
// the turn), when only those after its coverage are left, from a group's
// start.
func turnTail(snap *store.ContextSnapshot, msgs []contextMessage) []model.Message {
	if snap == nil || len(msgs) == 0 || msgs[0].Seq > snap.ToSeq {
		return messagesOf(msgs)
	}
	return messagesOf(groupStart(afterCoverage(snap, msgs)))
}

// afterCoverage returns the messages of msgs after snap's coverage, in
// their order: all of them when snap is nil. Turn order may interleave
// sequences (a message that arrived during a turn follows that turn's
// output), so it filters rather than cuts. It never modifies msgs.
func afterCoverage(snap *store.ContextSnapshot, msgs []contextMessage) []contextMessage {
	if snap == nil {
		return msgs
	}
	return slices.DeleteFunc(slices.Clone(msgs), func(m contextMessage) bool { return m.Seq <= snap.ToSeq })
}

// groupStart drops the tool results at the start of msgs: their call is
// before the cut, or covered, and a result never goes without its call.
func groupStart(msgs []contextMessage) []contextMessage {
	for len(msgs) > 0 && msgs[0].Role == model.RoleTool {
		msgs = msgs[1:]
	}
	return msgs
}

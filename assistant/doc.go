// Package assistant owns the Assistant API (runs, messages, approvals
// endpoints, live updates), the run lifecycle, the turn scheduler and
// runner, and context building; its subpackage model holds the model
// providers.
//
// The runs table is the queue. A message is appended and its run queued in
// one transaction; a scheduler on any replica claims queued runs with a
// lease and a fencing token, and every write of the turn is fenced by that
// token, so a run has one turn at a time across replicas and a replica that
// lost its lease can write nothing. A turn builds a fresh model session from
// the system prompt and the latest messages of the run's event log, and
// reaches tools only through Usher's MCP endpoint, with a broker token
// minted for the user and the run: the same policy and approvals as any MCP
// client. A call that needs approval pauses the run (AwaitingApproval); the
// decision requeues it and the runner retries the exact call.
//
// Turn order. Each user message is answered by a turn of its own, the one
// whose agent.turn.start names it (MessageSeq); turns answer the messages
// one at a time, in the order they were stored, so several messages queued
// at once each get their own turn and reply, in order. What a turn writes
// names its turn (MessageSeq on message.assistant and message.tool). The
// model sees the history grouped by turn: each user message, then what its
// turn wrote. A message that arrived while a turn ran is logged among that
// turn's output, but the projection places it after that output, and the
// running turn never sees it; the log is never rewritten, the provider
// gets a projection. A request therefore ends with the turn's own user
// message or a tool result, never an assistant message. A turn makes at
// most MaxToolCallsPerSlice tool calls per slice, also when one model
// response asks for more: the rest are the open calls of that assistant
// message, run when the turn resumes, each once. A call reaches the MCP
// server named by the sequence of the assistant message that carries it
// and the model's call id (see callKey): the retry after an approval or a
// crash has the same name, and a call id the model server uses again names
// another call.
package assistant

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
// The invariant: every user message is followed by exactly one turn that
// answers it (one agent.turn.start and one agent.turn.end naming its
// sequence), whatever fails. The run row says where a run stands: HandledSeq
// is the last message answered, TurnSeq the one whose turn is open, and a
// message after HandledSeq is work. A run with work is always either leased
// or queued:
//
//   - a post appends the message and queues the run in one transaction;
//   - a release that leaves the run InProgress with work (a turn open, a
//     message unanswered) queues it, in the release's own statement;
//   - a slice of work that fails (the database, the MCP server, a panic,
//     which the worker recovers) is released queued for a retry after a
//     backoff that doubles to a minute, and after maxFailures in a row the
//     turn ends, visibly, as failed; a release the database could not take
//     is tried again until it answers (handBack), and the first claim that
//     succeeds after failed ones ends every backoff (wakeRetries), so that
//     an outage delays no run past its end;
//   - a lease that is not released (the process died) expires, and every
//     replica's scheduler sleeps until the earliest lease expiry it knows
//     of (Store.NextClaimAt, read after every claim and wake-up), so the
//     run is taken over within moments of the expiry;
//   - a run paused for an approval waits for the decision, which requeues
//     it.
//
// The sweep enforces the invariant as a backstop: every SweepInterval it
// requeues the runs that have work but are neither leased nor queued
// (Store.RunsToResume: an open turn, or a user message after HandledSeq,
// or an approval decided whose requeue was lost), and a run with an
// unanswered message is never parked Idle. A message is stored once: a
// post carries an idempotency key (the client's Idempotency-Key, or one
// of its own that makes its retries of a write with an unknown outcome
// safe), and a stored message is never answered with an error.
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

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
package assistant

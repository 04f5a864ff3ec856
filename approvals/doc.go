// Package approvals owns durable approval requests and decisions, their
// binding to exact tool calls, and their single-use consumption.
//
// A tool call the policy sends to a human becomes a request ([Service.Request])
// bound to the exact call: principal, tool, server, tool definition hash,
// SHA-256 of the canonical arguments, policy hash, run and client (a
// [Binding]). The identical call finds the same pending request instead of
// making another. A signed-in human approves or denies it through the API
// ([Service.Handler]); the call, retried, then consumes the approval
// ([Service.Consume]) in one atomic compare-and-swap, so an approval is used
// at most once, and only by a call equal to its binding in every field. An
// approval expires (by default after 24 hours), and is revoked when the
// tool's definition changes ([Service.RevokeChanged]).
//
// # Who decides
//
// An approval without approver groups is decided by the principal who made
// the call. An approval that names approver groups is decided by members of
// those groups — a group or an app role of theirs (Principal.Groups,
// Principal.Roles), as review.groups and admin.groups name their members —
// in the requester's tenant (a group of
// the same name in another tenant is another group), with one restriction,
// the four-eyes rule: the requester never approves their own request, even
// as a member of an approver group; they may still deny (withdraw) it.
// Decisions are final, and an expired approval cannot be decided. A caller
// who may neither see nor decide an approval is told it does not exist.
//
// Only a human session decides: the handlers sit behind the identity
// middleware, which accepts only the organisation's identity tokens and
// never a broker token. broker.RefuseTokens answers a broker token with a
// clear 403 before that, as a courtesy.
//
// Every request, decision and revocation is written to the audit log when
// one is configured: a request, a decision and a use each in one
// transaction with its record (a use also with the start of the call's
// execution), so that none happens unrecorded.
package approvals

// Package review owns the security reviewers' seat: who is a reviewer,
// and the read-only API of the audit log, the policy and the tools that
// they use instead of a shell on the server.
//
// # Who is a reviewer
//
// A reviewer is a signed-in person with one of the configured groups
// among the groups or the app roles of their token (identity.Principal's
// Groups and Roles), as the policy sees them. The handlers sit behind the
// API's identity middleware, which accepts only the organisation's access
// tokens with the API's required scope (so never an app-only token), and
// behind broker.RefuseTokens (so never a broker token). Anyone else who is
// signed in gets 403 reviewer_required on every route.
//
// # What a reviewer reads
//
// Everything of their tenant, and nothing of another: the records whose
// principal id ("issuer|tenant|object id", identity.Principal.ID) has the
// reviewer's issuer and tenant, and the records with no principal, such as
// a refused sign-in, which belong to no tenant. Verifying the chain reads
// the whole log, since the chain is one, but answers only sequence
// numbers and hashes. A reviewer changes nothing: every method but GET
// and HEAD answers 405.
//
// # The routes
//
//	GET /api/audit               filtered, paged records (kind, principal, tool, server, outcome, since, until; after, before, limit, order, cursor)
//	GET /api/audit/{seq}         one record
//	GET /api/audit/export        the records after "after" as JSON lines
//	GET /api/audit/verify        the chain and its checkpoints from the first record (or "after") towards the head, in bounded steps
//	GET /api/audit/checkpoints   the log's signed checkpoints
//	GET /api/policy              the policy's statements as written, its hash, and its lint findings against the tool lock
//	GET /api/policy/explain      the decision on one request, with the inputs of `usher policy explain`
//	GET /api/policy/matrix       the decision on each tool for a person in no group and in each approver group
//	GET /api/tools               every tool, resource, template and prompt offered, each tool's state against the tool lock
//
// Each record is exactly as `usher audit export` writes it (audit.Line),
// with its seq, hash and prev_hash. A changed tool shows its current
// definition and the hash it was locked with, and the definition
// reviewed when the lock keeps it (policy.Lock.Definitions); a lock of
// hashes only leaves that to `git log` of the lock file.
package review

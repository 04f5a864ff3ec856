// Package audit owns Usher's tamper-evident audit log: the record of every
// authentication failure, policy decision, approval request and decision,
// and tool execution, chained by hashes so that an edited, deleted or
// reordered record is detected.
//
// # Records
//
// [Log.Append] writes one [Entry]. The store (see store.Store.AppendAudit)
// serialises appenders across processes and replicas, so the log is one
// gapless sequence: record n+1 carries the hash of record n as its
// prev_hash, and its own hash covers that link and everything it records.
// Entries name the token by its "jti", never the token; Append refuses a
// TokenJTI that looks like a JWT.
//
// # The hash, so that a reviewer can recompute it
//
//	hash = lowercase hex of SHA-256( prev_hash || body )
//
// prev_hash is the previous record's hash as 64 ASCII hex digits, or the
// empty string for the first record (seq 1). body is the record as one JSON
// object with exactly these keys, in this (byte) order, without
// whitespace:
//
//	approval_id, arguments_hash, at, client_id, decision, definition_hash,
//	details, kind, latency_us, outcome, policy_hash, policy_ids, principal,
//	run_id, seq, token_jti, tool
//
// where at is the time in UTC as "2006-01-02T15:04:05.000000Z" (RFC 3339,
// always six fractional digits), latency_us and seq are integers,
// policy_ids is an array of strings ([] when there are none), details is
// a JSON value with object keys sorted, no whitespace and numbers as
// written, and every other value is a string ("" when unset). Strings are
// escaped as Go's encoding/json does with HTML escaping off: \" and \\,
// \b \f \n \r \t, \u00xx (lowercase hex) for other control characters,
// \u2028 and \u2029, and every other character as itself in UTF-8. Except
// for U+2028 and U+2029, and numbers in details, this is the RFC 8785
// canonical form, and what Python's json.dumps(record, sort_keys=True,
// separators=(",", ":"), ensure_ascii=False) writes. [Export] writes each
// record as such a body with two more keys, hash and prev_hash: drop them
// and the rest is the body. [Hash] is the reference implementation.
//
// # What verification detects, and what it cannot
//
// [Verify] walks the whole log in order and reports:
//   - an edited record: its content no longer matches its hash;
//   - a deleted record: a gap in the sequence, or a prev_hash that is not
//     the hash of the record before;
//   - reordered records: their sequence numbers are in their hashes, and
//     their links no longer match.
//
// The chain cannot show, on its own, that the newest records were deleted
// (a truncated log is a shorter valid chain), nor that someone with write
// access rewrote every hash from some record onwards. Both are detected
// against an anchor: a head (sequence and hash) recorded outside the
// database. [Verify] reports the head it reached so that an operator can
// record it, and checks any anchors it is given.
package audit

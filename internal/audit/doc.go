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
// # Event ids
//
// Each record written by this version carries an event id (event_id): 128
// random bits as 32 lowercase hex digits ([NewEventID]), made once with
// the event and shared by every attempt to record it. The database holds
// at most one record of an id (a unique index), and an append of an event
// already recorded writes nothing and succeeds: a caller that retries an
// Append after an error — which may have committed, its acknowledgement
// lost with the connection — does not record the event twice. Records
// written before event ids have none, and keep their hashes.
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
//	details, [event_id,] kind, latency_us, outcome, policy_hash, policy_ids,
//	principal, run_id, seq, token_jti, tool
//
// where event_id is present only in a record that has one (it is absent,
// not "", in records written before event ids, so that their hashes are
// what they were when written), at is the time in UTC as "2006-01-02T15:04:05.000000Z" (RFC 3339,
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
//   - an edited record: its content (its event id, given or taken away,
//     too) no longer matches its hash;
//   - a deleted record: a gap in the sequence, or a prev_hash that is not
//     the hash of the record before;
//   - reordered records: their sequence numbers are in their hashes, and
//     their links no longer match;
//   - an event recorded twice: a record whose event id an earlier record
//     carries (the database's unique index keeps such a record out; a log
//     written without the index, or by hand, may hold one).
//
// The chain cannot show, on its own, that the newest records were deleted
// (a truncated log is a shorter valid chain), nor that someone with write
// access rewrote every hash from some record onwards. Both are detected
// against an anchor: a head (sequence and hash) recorded outside the
// database. [Verify] reports the head it reached so that an operator can
// record it, and checks any anchors it is given.
//
// # Checkpoints
//
// Signed checkpoints are such anchors, made by Usher itself. A
// [Checkpointer], run by every replica, signs the log's head at most every
// interval (and only when records were appended since the last one) with
// the installation's audit key ([Keys]: Ed25519, in the signed-note format
// of golang.org/x/mod/sumdb/note, stored in the database with its private
// half sealed under the seal key the replicas share), and stores the
// signed note. A checkpoint's text is four lines: the origin (the
// installation's name), the head's sequence number, its hash, and the time
// (see [Checkpoint]). The verifier keys are published (at
// /.well-known/usher-audit-key); a rotated key stays published.
//
// [VerifyWithCheckpoints] checks each stored checkpoint against verifier
// keys the caller trusts and uses each one that verifies as an anchor: a
// log cut short after a checkpoint, or rewritten, contradicts it, and a
// checkpoint forged for a rewritten log does not verify against keys kept
// from before. A checkpoint deleted with the records after it leaves no
// trace in the database: compare the last checkpoint with one kept
// elsewhere.
package audit

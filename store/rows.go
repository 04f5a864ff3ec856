package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// How Go values map to columns, the same on every engine.

// storedTime is t as every engine stores and returns it: UTC, truncated to
// microseconds (PostgreSQL's precision, and SQLite's text form).
func storedTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// boundTime is t as a bound on stored times: storedTime, or the next
// whole microsecond when t has digits below one. A stored time is at or
// after t, or before t, exactly when it is so of boundTime(t); storedTime
// would cut t down, and take one before it for one after.
func boundTime(t time.Time) time.Time {
	b := storedTime(t)
	if b.Before(t) {
		b = b.Add(time.Microsecond)
	}
	return b
}

// nullString maps the empty string to SQL NULL, for optional text columns
// whose uniqueness must not count absent values.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// runColumns is the column list every query returning a Run selects, in the
// order the engines' scanners read it.
const runColumns = `id, owner, title, status, coalesce(idempotency_key, ''),
	last_seq, message_count, preview,
	queued_at, coalesce(lease_owner, ''), lease_expires_at, fencing_token,
	created_at, updated_at, last_activity_at, completed_at, deleted_at,
	turn_seq, handled_seq, failures, not_before,
	context_tokens, context_limit, context_source, context_seq, context_at,
	metadata, coalesce(parent_run_id, ''), parent_version,
	active_branch, branch_count,
	coalesce(queued_traceparent, ''), coalesce(queued_tracestate, '')`

// signingKeyColumns is the column list of a SigningKey, in field order.
const signingKeyColumns = `id, purpose, generation, algorithm, public_key, private_key,
	created_at, signs_from, published_until`

// eventColumns is the column list of an Event, in field order.
const eventColumns = `run_id, seq, type, payload, created_at, branch`

// jsonOr returns v, or def when v is empty: the value a JSON column stores.
func jsonOr(v json.RawMessage, def string) []byte {
	if len(v) == 0 {
		return []byte(def)
	}
	return v
}

// encodeNames stores a list of names as a JSON array ([] for none).
func encodeNames(names []string) []byte {
	if len(names) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(names) // strings always marshal
	return b
}

// decodeNames reads a JSON array of names; an empty array reads as nil.
func decodeNames(column string, b []byte) ([]string, error) {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("store: %s column holds %q: %w", column, b, err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	return names, nil
}

// scanRun reads one row of runColumns, on either engine.
func scanRun(row rowScanner) (Run, error) {
	var r Run
	var status, source string
	var metadata []byte
	err := row.Scan(&r.ID, &r.Owner, &r.Title, &status, &r.IdempotencyKey,
		&r.LastSeq, &r.MessageCount, &r.Preview,
		at(&r.QueuedAt), &r.LeaseOwner, at(&r.LeaseExpiresAt), &r.FencingToken,
		at(&r.CreatedAt), at(&r.UpdatedAt), at(&r.LastActivityAt), at(&r.CompletedAt), at(&r.DeletedAt),
		&r.TurnSeq, &r.HandledSeq, &r.Failures, at(&r.NotBefore),
		&r.Context.Tokens, &r.Context.Limit, &source, &r.Context.Seq, at(&r.Context.At),
		&metadata, &r.ParentRunID, &r.ParentVersion,
		&r.ActiveBranch, &r.Branches,
		&r.QueuedTrace.Parent, &r.QueuedTrace.State)
	if string(metadata) != "{}" {
		r.Metadata = string(metadata)
	}
	r.Status = RunStatus(status)
	r.Context.Source = ContextSource(source)
	return r, err
}

// scanEvent reads one row of eventColumns, on either engine.
func scanEvent(row rowScanner) (Event, error) {
	var e Event
	var payload []byte
	err := row.Scan(&e.RunID, &e.Seq, &e.Type, &payload, at(&e.CreatedAt), &e.Branch)
	e.Payload = payload
	return e, err
}

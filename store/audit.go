package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// AuditHead is the newest record of the audit log: its sequence and hash,
// both zero for an empty log.
type AuditHead struct {
	Seq  int64
	Hash string
}

// AuditRecord is one entry of the append-only audit log as stored. The
// store assigns no field: the caller builds the record from the current
// head and computes its Hash (see AppendAudit); the store keeps the chain
// gapless and returns every field as it went in.
type AuditRecord struct {
	Seq            int64     // the head's Seq + 1
	At             time.Time // whole microseconds
	Kind           string
	Principal      string
	ClientID       string
	TokenJTI       string // the token's id, never the token
	Tool           string
	DefinitionHash string
	ArgumentsHash  string
	Decision       string
	PolicyIDs      []string // nil for none
	PolicyHash     string
	ApprovalID     string
	RunID          string
	Outcome        string
	Latency        time.Duration // whole microseconds
	// Details is a JSON value, stored and returned byte for byte; nil is
	// stored as {} and reads back as {}.
	Details  json.RawMessage
	PrevHash string // the head's Hash
	Hash     string
	// EventID is the identity of the event the record records, shared by
	// every attempt to record it; empty for none (and for records written
	// before event ids). At most one record has a given EventID: an append
	// of a record whose EventID is already in the log writes nothing and
	// returns the record already there (see AppendAudit).
	EventID string
	// Link, when set by the record's builder, is its hashed form around
	// its Seq, so that the store may link the record to the log's head
	// itself (see AuditLink). Not stored.
	Link *AuditLink `json:"-"`
}

// AuditLink is a built audit record's hashed form around its sequence
// number: its Hash is the hex SHA-256 of PrevHash, Before, Seq in decimal
// and After, one after the other. With it, a store can chain the record on
// whatever the log's head is when it writes, in the database, without
// building the record again.
type AuditLink struct {
	Before, After []byte
}

// auditColumns is the column list of an AuditRecord, in field order.
const auditColumns = `seq, at, kind, principal, client_id, token_jti, tool,
	definition_hash, arguments_hash, decision, policy_ids, policy_hash,
	approval_id, run_id, outcome, latency_us, details, prev_hash, hash, event_id`

// checkAuditRecord validates a record built on head before it is appended.
func checkAuditRecord(r AuditRecord, head AuditHead) error {
	var errs []error
	if r.Seq != head.Seq+1 {
		errs = append(errs, fmt.Errorf("audit record has seq %d, want %d (the head's + 1)", r.Seq, head.Seq+1))
	}
	if r.PrevHash != head.Hash {
		errs = append(errs, fmt.Errorf("audit record's prev hash %q is not the head's hash %q", r.PrevHash, head.Hash))
	}
	if r.Hash == "" {
		errs = append(errs, errors.New("audit record hash is empty"))
	}
	if r.Kind == "" {
		errs = append(errs, errors.New("audit record kind is empty"))
	}
	if r.At.IsZero() {
		errs = append(errs, errors.New("audit record time is zero"))
	} else if !r.At.Equal(storedTime(r.At)) {
		// The hash covers the time as stored; a finer one would never
		// verify.
		errs = append(errs, errors.New("audit record time has digits below the microsecond"))
	}
	if r.Latency < 0 || r.Latency%time.Microsecond != 0 {
		errs = append(errs, fmt.Errorf("audit record latency %v is not a whole, non-negative number of microseconds", r.Latency))
	}
	// The names are whole literals: every record is checked on the way to
	// the log, and only a failing check needs its name.
	texts := [...]struct{ name, value string }{
		{"audit record kind", r.Kind}, {"audit record principal", r.Principal},
		{"audit record client id", r.ClientID}, {"audit record token id", r.TokenJTI},
		{"audit record tool", r.Tool}, {"audit record definition hash", r.DefinitionHash},
		{"audit record arguments hash", r.ArgumentsHash}, {"audit record decision", r.Decision},
		{"audit record policy hash", r.PolicyHash}, {"audit record approval id", r.ApprovalID},
		{"audit record run id", r.RunID}, {"audit record outcome", r.Outcome},
		{"audit record hash", r.Hash}, {"audit record event id", r.EventID},
	}
	for _, f := range texts {
		if err := checkText(f.name, f.value); err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range []error{
		checkTime("audit record time", r.At),
		checkNames("audit record policy id", r.PolicyIDs),
		checkJSON("audit record details", r.Details),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return invalid(errs...)
}

// buildFailed carries the error of a caller's function run inside a
// transaction (an AppendAudit build function, a grant's answer) through
// it, so that it is returned as is rather than translated.
type buildFailed struct{ err error }

func (b buildFailed) Error() string { return b.err.Error() }

// builtRecord runs build on head and checks what it returns.
func builtRecord(build func(AuditHead) (AuditRecord, error), head AuditHead) (AuditRecord, error) {
	r, _, err := builtLinkedRecord(build, head)
	return r, err
}

// builtLinkedRecord is builtRecord, and the record's Link apart (nil if
// its builder gave none): the record returned has none.
func builtLinkedRecord(build func(AuditHead) (AuditRecord, error), head AuditHead) (AuditRecord, *AuditLink, error) {
	r, err := build(head)
	if err != nil {
		return AuditRecord{}, nil, buildFailed{err}
	}
	link := r.Link
	r.Link = nil
	if err := checkAuditRecord(r, head); err != nil {
		return AuditRecord{}, nil, err
	}
	r.At = storedTime(r.At)
	r.Details = jsonOr(r.Details, "{}")
	if len(r.PolicyIDs) == 0 {
		r.PolicyIDs = nil
	}
	return r, link, nil
}

// appendError returns the error of an append: the build function's as it
// returned it, anything else translated by translate.
func appendError(err error, translate func(error) error) error {
	var bf buildFailed
	if errors.As(err, &bf) {
		return bf.err
	}
	return translate(err)
}

var (
	// lockAudit serialises appenders until their transaction ends. It is
	// keyed by the schema, like the migration lock, and taken before the
	// head is read: under read committed, the read then sees every append
	// that held the lock before. On SQLite the transaction's write lock
	// does that.
	lockAudit = postgresOnly(`SELECT pg_advisory_xact_lock(hashtextextended('usher.audit.' || current_schema(), 0))`)

	auditHead = sql1(`SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`)

	// insertLinkedAudit inserts a record that has a Link on the log's head
	// as the statement finds it (under the audit lock), computing its seq,
	// prev_hash and hash as the Link says: $1–$16 are the record's at to
	// details, $17 its event id, $18 and $19 the Link's Before and After.
	// $20 and $21 are the newest head the process knows of (0 and '' for
	// none): a log whose head is older than that has lost its newest
	// records, and the record follows the head the process knew, so that
	// the gap stays for the verifier to find rather than being chained
	// over.
	insertLinkedAudit = postgresOnly(`INSERT INTO audit_log (` + auditColumns + `)
SELECT h.seq + 1, $1::timestamptz, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text,
       $10::json, $11::text, $12::text, $13::text, $14::text, $15::bigint, $16::json, h.hash,
       encode(sha256(convert_to(h.hash, 'UTF8') || $18::bytea || convert_to((h.seq + 1)::text, 'UTF8') || $19::bytea), 'hex'),
       $17::text
  FROM (SELECT $20::bigint AS seq, $21::text AS hash) known
  LEFT JOIN LATERAL (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) head ON true
  CROSS JOIN LATERAL (SELECT CASE WHEN head.seq IS NULL OR head.seq < known.seq THEN known.seq ELSE head.seq END AS seq,
                             CASE WHEN head.seq IS NULL OR head.seq < known.seq THEN known.hash ELSE head.hash END AS hash) h
RETURNING seq, prev_hash, hash`)

	insertAudit = sql1(`INSERT INTO audit_log (` + auditColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`)

	// auditByEvent reads the record of an event id; its condition is the
	// partial index's, so that the index serves it.
	auditByEvent = sql1(`SELECT ` + auditColumns + ` FROM audit_log WHERE event_id = $1 AND event_id <> ''`)

	listAudit = sql1(`SELECT ` + auditColumns + ` FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2`)
)

// AppendAudit appends in a transaction of its own (see appendAuditTx).
// PostgreSQL's store overrides it with its queue of appends.
func (c *core) AppendAudit(ctx context.Context, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	var out AuditRecord
	err := c.inTx(ctx, func(tx executor) (err error) {
		out, err = appendAuditTx(ctx, tx, build)
		return err
	})
	if isDuplicateEvent(err) {
		return c.recordedEvent(ctx, out)
	}
	if err != nil {
		return AuditRecord{}, c.fail(err)
	}
	return out, nil
}

// auditEventIndex is the unique index of audit records' event ids.
const auditEventIndex = "audit_log_event_id_key"

// isDuplicateEvent reports whether err is the INSERT of an audit record
// whose EventID another record has, on either engine.
func isDuplicateEvent(err error) bool {
	return err != nil && (pgDuplicateEvent(err) || sqliteDuplicateEvent(err))
}

// recordedEvent answers the append of r, refused because its EventID is
// already in the log: a retry of an append that committed, whose
// acknowledgement was lost. It returns the record already there when it
// records the same event as r (every field but the chain's and the time,
// which a retry may stamp anew); ErrConflict when the id is another
// event's.
func (c *core) recordedEvent(ctx context.Context, r AuditRecord) (AuditRecord, error) {
	got, err := scanAudit(c.reader().row(ctx, auditByEvent, r.EventID))
	if err != nil {
		return AuditRecord{}, c.fail(err)
	}
	if !sameEvent(got, r) {
		return AuditRecord{}, fmt.Errorf("%w: audit record %d has event id %q but records another event", ErrConflict, got.Seq, r.EventID)
	}
	return got, nil
}

// sameEvent reports whether a and b, two records with one EventID, record
// the same event.
func sameEvent(a, b AuditRecord) bool {
	return a.Kind == b.Kind && a.Principal == b.Principal && a.ClientID == b.ClientID &&
		a.TokenJTI == b.TokenJTI && a.Tool == b.Tool && a.DefinitionHash == b.DefinitionHash &&
		a.ArgumentsHash == b.ArgumentsHash && a.Decision == b.Decision &&
		slices.Equal(a.PolicyIDs, b.PolicyIDs) && a.PolicyHash == b.PolicyHash &&
		a.ApprovalID == b.ApprovalID && a.RunID == b.RunID && a.Outcome == b.Outcome &&
		a.Latency == b.Latency && bytes.Equal(a.Details, b.Details)
}

// appendAuditTx appends the record build returns within the transaction
// tx, after the statements tx has run, which commit with it or not at
// all. It takes the audit lock, so statements that may wait for row locks
// must come before it. On PostgreSQL the queue of appends then finds the
// head moved, as when another process appends, and chains its next write
// after it.
func appendAuditTx(ctx context.Context, tx executor, build func(AuditHead) (AuditRecord, error)) (AuditRecord, error) {
	if _, err := tx.exec(ctx, lockAudit); err != nil {
		return AuditRecord{}, err
	}
	var head AuditHead
	err := tx.row(ctx, auditHead).Scan(&head.Seq, &head.Hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return AuditRecord{}, err
	}
	r, err := builtRecord(build, head)
	if err != nil {
		return AuditRecord{}, err
	}
	_, err = tx.exec(ctx, insertAudit, auditArgs(r)...)
	return r, err
}

// appendAuditOf appends within tx, as appendAuditTx does, the record that
// record builds of what, if record is not nil and gives a builder (a nil
// one records nothing): how a composed write (an erasure, a withdrawal)
// records each thing it did, after its other statements.
func appendAuditOf[T any](ctx context.Context, tx executor, what T, record func(T) (func(AuditHead) (AuditRecord, error), error)) error {
	if record == nil {
		return nil
	}
	build, err := record(what)
	if err != nil || build == nil {
		return err
	}
	_, err = appendAuditTx(ctx, tx, build)
	return err
}

// writeAudited runs write, one write statement (and the reads that
// explain why it matched no row), and then, when build is not nil,
// appends build's record, in one transaction. Without a record it runs
// as writeOne runs a write.
func (c *core) writeAudited(ctx context.Context, build func(AuditHead) (AuditRecord, error), write func(x executor) error) error {
	if build == nil {
		return c.writeOne(ctx, write)
	}
	return c.inTx(ctx, withAudit(ctx, write, build))
}

// withAudit is fn followed, in its transaction, by the append of build's
// record when build is not nil; fn's statements, which may wait for row
// locks, so come before the audit lock (see appendAuditTx).
func withAudit(ctx context.Context, fn func(tx executor) error, build func(AuditHead) (AuditRecord, error)) func(tx executor) error {
	if build == nil {
		return fn
	}
	return func(tx executor) error {
		if err := fn(tx); err != nil {
			return err
		}
		_, err := appendAuditTx(ctx, tx, build)
		return err
	}
}

// auditArgs are the values of insertAudit for r.
// linkedAuditArgs are the arguments of insertLinkedAudit for r, after
// the newest head known.
func linkedAuditArgs(r AuditRecord, link *AuditLink, known AuditHead) []any {
	args := auditArgs(r)[1:17] // at to details: the chain's columns are the database's
	return append(args, r.EventID, link.Before, link.After, known.Seq, known.Hash)
}

func auditArgs(r AuditRecord) []any {
	return []any{r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
		r.DefinitionHash, r.ArgumentsHash, r.Decision, string(encodeNames(r.PolicyIDs)), r.PolicyHash,
		r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), string(r.Details), r.PrevHash, r.Hash, r.EventID}
}

func (c *core) AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, c.reader(), listAudit, scanAudit, afterSeq, limit)
	return out, c.fail(err)
}

// scanAudit reads one row of auditColumns.
func scanAudit(row rowScanner) (AuditRecord, error) {
	var r AuditRecord
	var policyIDs, details []byte
	var latency int64
	if err := row.Scan(&r.Seq, at(&r.At), &r.Kind, &r.Principal, &r.ClientID, &r.TokenJTI, &r.Tool,
		&r.DefinitionHash, &r.ArgumentsHash, &r.Decision, &policyIDs, &r.PolicyHash,
		&r.ApprovalID, &r.RunID, &r.Outcome, &latency, &details, &r.PrevHash, &r.Hash, &r.EventID); err != nil {
		return AuditRecord{}, err
	}
	var err error
	if r.PolicyIDs, err = decodeNames("audit_log.policy_ids", policyIDs); err != nil {
		return AuditRecord{}, err
	}
	r.Latency = time.Duration(latency) * time.Microsecond
	r.Details = details
	return r, nil
}

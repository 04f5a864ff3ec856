package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
}

// auditColumns is the column list of an AuditRecord, in field order.
const auditColumns = `seq, at, kind, principal, client_id, token_jti, tool,
	definition_hash, arguments_hash, decision, policy_ids, policy_hash,
	approval_id, run_id, outcome, latency_us, details, prev_hash, hash`

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
		{"audit record hash", r.Hash},
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
	r, err := build(head)
	if err != nil {
		return AuditRecord{}, buildFailed{err}
	}
	if err := checkAuditRecord(r, head); err != nil {
		return AuditRecord{}, err
	}
	r.At = storedTime(r.At)
	r.Details = jsonOr(r.Details, "{}")
	if len(r.PolicyIDs) == 0 {
		r.PolicyIDs = nil
	}
	return r, nil
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

	insertAudit = sql1(`INSERT INTO audit_log (` + auditColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`)

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
	if err != nil {
		return AuditRecord{}, c.fail(err)
	}
	return out, nil
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
func auditArgs(r AuditRecord) []any {
	return []any{r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
		r.DefinitionHash, r.ArgumentsHash, r.Decision, string(encodeNames(r.PolicyIDs)), r.PolicyHash,
		r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), string(r.Details), r.PrevHash, r.Hash}
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
		&r.ApprovalID, &r.RunID, &r.Outcome, &latency, &details, &r.PrevHash, &r.Hash); err != nil {
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

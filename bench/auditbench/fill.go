package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// The log's make-up: what each field takes, each record drawing at
// random (with a fixed seed, so every run fills the same log).
var (
	kinds = []string{"decision", "execution_started", "executed", "execution_failed",
		"approval_requested", "approval_decided", "outcome_unknown", "auth_failed"}
	outcomes = []string{"allow", "deny", "approve", "error"}
)

const (
	people  = 2000 // of the reviewer's tenant, and as many of another
	tools   = 40
	servers = 12
	// otherTenant is the share of the records that are another tenant's.
	otherTenant = 0.1
)

// firstAt is the first record's time; each next one is a second later.
var firstAt = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// person is the principal id of person n of the reviewer's tenant, whose
// ids start with scope ("issuer|tenant|").
func person(scope string, n int) string { return scope + "user-" + strconv.Itoa(n) }

// fill writes n records to the audit log by COPY, each chained on the one
// before it by the log's own hash (internal/audit), and updates the
// table's statistics, as autovacuum would after such a load. The
// secondary indexes are dropped for the COPY and built again after it,
// each from its own definition (pg_indexes), as a bulk load is done; the
// records are made and hashed beside the COPY, in a goroutine of their
// own.
func fill(ctx context.Context, db *database, scope string, n int) error {
	indexes, err := secondaryIndexes(ctx, db)
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := db.conn.Exec(ctx, "DROP INDEX "+pgx.Identifier{ix.name}.Sanitize()); err != nil {
			return fmt.Errorf("drop index %s for the load: %w", ix.name, err)
		}
	}
	if err := copyRecords(ctx, db, scope, n); err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := db.conn.Exec(ctx, ix.def); err != nil {
			return fmt.Errorf("build index %s again: %w", ix.name, err)
		}
	}
	if _, err := db.conn.Exec(ctx, "VACUUM (ANALYZE) audit_log"); err != nil {
		return fmt.Errorf("analyze the audit log: %w", err)
	}
	return nil
}

// index is an index's name and its definition (CREATE INDEX ...).
type index struct{ name, def string }

// secondaryIndexes are the audit log's indexes that back no constraint.
func secondaryIndexes(ctx context.Context, db *database) ([]index, error) {
	rows, err := db.conn.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = $1 AND tablename = 'audit_log'
		  AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = 'audit_log'::regclass)
		ORDER BY indexname`, db.schema)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		err := r.Scan(&ix.name, &ix.def)
		return ix, err
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("the audit log has no secondary index: not the schema this benchmark knows")
	}
	return out, err
}

// copyRecords copies n records into the audit log.
func copyRecords(ctx context.Context, db *database, scope string, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make(chan []any, 4096)
	made := make(chan error, 1)
	go func() {
		defer close(rows)
		made <- makeRecords(ctx, scope, n, rows)
	}()
	columns := []string{"seq", "at", "kind", "principal", "client_id", "token_jti", "tool",
		"definition_hash", "arguments_hash", "decision", "policy_ids", "policy_hash",
		"approval_id", "run_id", "outcome", "latency_us", "details", "prev_hash", "hash", "event_id"}
	copied, err := db.conn.CopyFrom(ctx, pgx.Identifier{"audit_log"}, columns, pgx.CopyFromFunc(func() ([]any, error) {
		row, ok := <-rows
		if !ok {
			return nil, <-made
		}
		return row, nil
	}))
	if err != nil {
		return fmt.Errorf("fill the audit log: %w", err)
	}
	if copied != int64(n) {
		return fmt.Errorf("fill the audit log: %d records copied, want %d", copied, n)
	}
	return nil
}

// makeRecords sends n records, as rows of copyRecords's columns, to rows.
func makeRecords(ctx context.Context, scope string, n int, rows chan<- []any) error {
	rng := rand.New(rand.NewPCG(1, 2))
	other := "other-issuer|other-tenant|"
	prev := ""
	seq := 0
	next := func() ([]any, error) {
		seq++
		r := store.AuditRecord{
			Seq:      int64(seq),
			At:       firstAt.Add(time.Duration(seq) * time.Second),
			Kind:     kinds[rng.IntN(len(kinds))],
			Tool:     "tool-" + strconv.Itoa(rng.IntN(tools)),
			Decision: outcomes[rng.IntN(len(outcomes))],
			Outcome:  outcomes[rng.IntN(len(outcomes))],
			Details:  json.RawMessage(`{"server":"server-` + strconv.Itoa(rng.IntN(servers)) + `"}`),
			TokenJTI: "jti-" + strconv.Itoa(seq), PolicyHash: "policy-1", PolicyIDs: []string{"allow-reads"},
			Latency: time.Duration(rng.IntN(100_000)) * time.Microsecond,
			EventID: "bench-" + strconv.Itoa(seq), PrevHash: prev,
		}
		switch {
		case r.Kind == "auth_failed":
			// A refused sign-in belongs to no one.
		case rng.Float64() < otherTenant:
			r.Principal = other + "user-" + strconv.Itoa(rng.IntN(people))
		default:
			r.Principal = person(scope, rng.IntN(people))
		}
		h, err := audit.Hash(r)
		if err != nil {
			return nil, err
		}
		r.Hash, prev = h, h
		policyIDs, _ := json.Marshal(r.PolicyIDs)
		return []any{r.Seq, r.At, r.Kind, r.Principal, r.ClientID, r.TokenJTI, r.Tool,
			r.DefinitionHash, r.ArgumentsHash, r.Decision, json.RawMessage(policyIDs), r.PolicyHash,
			r.ApprovalID, r.RunID, r.Outcome, r.Latency.Microseconds(), r.Details, r.PrevHash, r.Hash, r.EventID}, nil
	}
	for range n {
		row, err := next()
		if err != nil {
			return err
		}
		select {
		case rows <- row:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

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
// table's statistics, as autovacuum would after such a load.
func fill(ctx context.Context, db *database, scope string, n int) error {
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
	columns := []string{"seq", "at", "kind", "principal", "client_id", "token_jti", "tool",
		"definition_hash", "arguments_hash", "decision", "policy_ids", "policy_hash",
		"approval_id", "run_id", "outcome", "latency_us", "details", "prev_hash", "hash", "event_id"}
	copied, err := db.conn.CopyFrom(ctx, pgx.Identifier{"audit_log"}, columns, pgx.CopyFromFunc(func() ([]any, error) {
		if seq == n {
			return nil, nil
		}
		return next()
	}))
	if err != nil {
		return fmt.Errorf("fill the audit log: %w", err)
	}
	if copied != int64(n) {
		return fmt.Errorf("fill the audit log: %d records copied, want %d", copied, n)
	}
	if _, err := db.conn.Exec(ctx, "VACUUM (ANALYZE) audit_log"); err != nil {
		return fmt.Errorf("analyze the audit log: %w", err)
	}
	return nil
}

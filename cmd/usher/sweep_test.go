package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

var errMarkRecord = errors.New("injected: the outcome_unknown record cannot be built")

// failingMarks is a real store whose records, while fail is set, fail: in
// an audited mark, between the executions' mark and their records, inside
// their transaction; alone (AppendAudit), after a mark written on its own.
type failingMarks struct {
	store.Store
	fail atomic.Bool
}

func (f *failingMarks) failed() func(store.AuditHead) (store.AuditRecord, error) {
	return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errMarkRecord }
}

func (f *failingMarks) MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(store.Execution) func(store.AuditHead) (store.AuditRecord, error)) ([]store.Execution, error) {
	return f.Store.MarkOutcomeUnknownAudited(ctx, olderThan, func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		if f.fail.Load() {
			return f.failed()
		}
		return build(e)
	})
}

func (f *failingMarks) EndAwaitingInputAudited(ctx context.Context, olderThan, now time.Time, result json.RawMessage, build func(store.Execution) func(store.AuditHead) (store.AuditRecord, error)) ([]store.Execution, error) {
	return f.Store.EndAwaitingInputAudited(ctx, olderThan, now, result, func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		if f.fail.Load() {
			return f.failed()
		}
		return build(e)
	})
}

func (f *failingMarks) AppendAudit(ctx context.Context, build func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	if f.fail.Load() {
		build = f.failed()
	}
	return f.Store.AppendAudit(ctx, build)
}

// TestSweepMarksWithRecords checks, on both engines, that the abandoned
// execution sweep writes each mark with its outcome_unknown record or not
// at all: after a failed record the execution is still started, and the
// next sweep marks it and records it, once.
func TestSweepMarksWithRecords(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) store.Store{"SQLite": storetest.NewSQLite, "PostgreSQL": storetest.NewPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := &failingMarks{Store: open(t)}
			log, err := audit.New(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
			key := "run-1/call-1"
			if _, _, err := st.BeginExecutionAudited(ctx, store.Execution{
				IdempotencyKey: key, Principal: "issuer|alice", Tool: "fx__echo", ArgumentsHash: "h",
				StartedAt: now.Add(-mcpserver.DefaultAbandonedAfter - time.Second),
			}, nil); err != nil {
				t.Fatal(err)
			}
			sw, err := mcpserver.NewSweeper(&mcpserver.SweeperOptions{Executions: mcpserver.AuditedExecutions{Store: st, Log: log}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			check := func(after string, status store.ExecutionStatus, records int) {
				t.Helper()
				if e, err := st.GetExecution(ctx, key); err != nil || e.Status != status {
					t.Errorf("after %s the execution is %s, %v; want %s", after, e.Status, err, status)
				}
				rs, err := st.AuditRecords(ctx, 0, 10)
				if err != nil || len(rs) != records {
					t.Fatalf("after %s the log holds %d records, %v; want %d", after, len(rs), err, records)
				}
				for _, r := range rs {
					if r.Kind != mcpserver.KindOutcomeUnknown || r.Tool != "fx__echo" {
						t.Errorf("after %s the log holds %s of %s, want outcome_unknown of fx__echo", after, r.Kind, r.Tool)
					}
				}
			}

			st.fail.Store(true)
			if _, err := sw.Sweep(ctx); !errors.Is(err, errMarkRecord) {
				t.Fatalf("Sweep with a failing record = %v, want the injected error", err)
			}
			check("a failed sweep", store.ExecutionStarted, 0)
			st.fail.Store(false)
			if lost, err := sw.Sweep(ctx); err != nil || len(lost) != 1 || lost[0].IdempotencyKey != key {
				t.Fatalf("the next Sweep = %v, %v; want the abandoned execution", lost, err)
			}
			check("the next sweep", store.ExecutionOutcomeUnknown, 1)
			if lost, err := sw.Sweep(ctx); err != nil || len(lost) != 0 {
				t.Errorf("Sweep again = %v, %v; want none", lost, err)
			}
			check("a sweep of none", store.ExecutionOutcomeUnknown, 1)
			if rep, err := audit.Verify(ctx, st); err != nil || !rep.Intact() {
				t.Errorf("audit.Verify = %+v, %v; want intact", rep, err)
			}
		})
	}
}

// TestSweepEndsAwaitingInputWithRecords checks, on both engines, that the
// sweep ends a call its caller never answered with its input_abandoned
// record or not at all, and that the record is in an intact chain.
func TestSweepEndsAwaitingInputWithRecords(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) store.Store{"SQLite": storetest.NewSQLite, "PostgreSQL": storetest.NewPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := &failingMarks{Store: open(t)}
			log, err := audit.New(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
			key, started := "run-1/call-1", now.Add(-mcpserver.DefaultInputAbandonedAfter-time.Second)
			if _, _, err := st.BeginExecutionAudited(ctx, store.Execution{
				IdempotencyKey: key, Principal: "issuer|alice", Tool: "fx__echo", ArgumentsHash: "h", StartedAt: started,
			}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := st.AwaitInputAudited(ctx, key, "", started.Add(time.Second), nil); err != nil {
				t.Fatal(err)
			}
			sw, err := mcpserver.NewSweeper(&mcpserver.SweeperOptions{Executions: mcpserver.AuditedExecutions{Store: st, Log: log}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			st.fail.Store(true)
			if _, err := sw.Sweep(ctx); !errors.Is(err, errMarkRecord) {
				t.Fatalf("Sweep with a failing record = %v, want the injected error", err)
			}
			if e, err := st.GetExecution(ctx, key); err != nil || e.Status != store.ExecutionAwaitingInput {
				t.Errorf("after a failed sweep the call is %s, %v; want awaiting_input", e.Status, err)
			}
			st.fail.Store(false)
			if ended, err := sw.Sweep(ctx); err != nil || len(ended) != 1 || ended[0].Status != store.ExecutionFailed {
				t.Fatalf("the next Sweep = %v, %v; want the call ended failed", ended, err)
			}
			rs, err := st.AuditRecords(ctx, 0, 10)
			if err != nil || len(rs) != 1 || rs[0].Kind != mcpserver.KindInputAbandoned || rs[0].Outcome != mcpserver.OutcomeFailed || rs[0].Tool != "fx__echo" {
				t.Fatalf("the log holds %+v, %v; want one input_abandoned of fx__echo, failed", rs, err)
			}
			if rep, err := audit.Verify(ctx, st); err != nil || !rep.Intact() {
				t.Errorf("audit.Verify = %+v, %v; want intact", rep, err)
			}
		})
	}
}

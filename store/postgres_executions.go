package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The two writes of every tool call ride PostgreSQL's queue of audit
// appends (see appendAudit), each as a step of the append's transaction:
// the execution's statements go in the append's first round trip, before
// the audit lock, so that one waiting for a concurrent write of the same
// key waits without the lock. Every other operation is core's.

// Each step is as few statements as it can be: PostgreSQL's time for a
// transaction grows with its statements (each is bound, planned and run
// on its own), and these are on the path of every tool call.
var (
	// resumeOrGetExecution starts again the execution of key $1 when it is
	// the same call's, awaiting input (resumeExecution), and returns the
	// row as the resume left it, or else as it is, with whether it resumed.
	// It runs after insertExecution, as a statement of its own, so that
	// its snapshot has the row a concurrent insert of the same key that
	// the insert waited for committed. A concurrent resume of the same
	// call, which the UPDATE waits for, leaves this one's snapshot with the
	// row as it was before (awaiting input) and resumed false: the call is
	// not run twice, and its caller is told that it awaits input.
	resumeOrGetExecution = orGetExecution(resumeExecution)

	// finishOrGetExecution is endExecution, the compare-and-swap from
	// started, returning the finished row and true, or else the row as it
	// is and false (no row: there is no execution of the key).
	finishOrGetExecution = orGetExecution(endExecution)
)

// orGetExecution is the statement that runs update, an UPDATE of the
// execution of key $1 that returns executionColumns, and returns the row
// it updated and true, or else the row as it is and false.
func orGetExecution(update stmt) string {
	return `WITH updated AS (` + update.pg + `)
SELECT *, true FROM updated
UNION ALL
SELECT ` + executionColumns + `, false FROM tool_executions
WHERE idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM updated)`
}

// BeginExecutionAudited inserts the execution (or resumes the same call's,
// awaiting input) and reads it back in the append's transaction.
func (s *postgresStore) BeginExecutionAudited(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	if build == nil {
		return s.core.BeginExecutionAudited(ctx, e, nil)
	}
	e, err := s.newExecution(e)
	if err != nil {
		return Execution{}, false, err
	}
	var out Execution
	var started bool
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			// The insert, else the resume of the same call awaiting input
			// (a no-op after an insert), with the row as it is.
			b.Queue(insertExecution.pg, executionArgs(e)...)
			b.Queue(resumeOrGetExecution, resumeArgs(e)...)
		},
		read: func(br pgx.BatchResults) error {
			inserted, err := br.Exec()
			if err != nil {
				return err
			}
			var resumed bool
			out, err = scanExecutionAnd(br.QueryRow(), &resumed)
			started = inserted.RowsAffected() == 1 || resumed
			return err
		},
	}
	if _, err := s.appendAudit(ctx, step, build, appendAnswers); err != nil {
		return Execution{}, false, s.fail(err)
	}
	return begun(out, started, e)
}

// FinishExecutionAudited finishes the execution in the append's
// transaction. The append is lazy (see appendAudit): no caller waits for
// how a call ended, so it may ride in the transaction of the next append;
// unless ctx is marked WriteNow, when it is written as one that is waited
// for.
func (s *postgresStore) FinishExecutionAudited(ctx context.Context, p FinishExecutionParams, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	if build == nil {
		return s.core.FinishExecutionAudited(ctx, p, nil)
	}
	idempotencyKey, status, result, now := p.IdempotencyKey, p.Status, p.Result, p.Now
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	var out Execution
	var refused error
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			b.Queue(finishOrGetExecution, finishArgs(idempotencyKey, status, result, now)...)
		},
		read: func(br pgx.BatchResults) error {
			var finished bool
			row, err := scanExecutionAnd(br.QueryRow(), &finished)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				refused = ErrNotFound
			case err != nil:
				return err
			case finished:
				out, refused = row, nil
			default:
				refused = ErrConflict
			}
			return nil
		},
	}
	kind := appendLazy
	if WritesNow(ctx) {
		kind = appendAlone
	}
	if _, err := s.appendAudit(ctx, step, build, kind); err != nil {
		return Execution{}, s.fail(err)
	}
	if refused != nil {
		return Execution{}, refused
	}
	return out, nil
}

// writeNowKey marks a context of WriteNow.
type writeNowKey struct{}

// WriteNow returns ctx marked for how a call ended when no other call is
// in progress, which no one waits for (its result has gone). A write that
// could wait to ride in the transaction of another
// (FinishExecutionAudited on PostgreSQL) is then written at once: waiting
// for a carrier that does not come would only put the write, and its
// statements, in the way of the next one, which then waits for it. And on
// PostgreSQL the next call's start, coming while such a write
// (FinishExecutionAudited, or AppendAudit) is under way, is sent at once,
// chained on its records (see pgAuditChain), rather than after it.
// SQLite's store writes every write at once, one after another, anyway.
func WriteNow(ctx context.Context) context.Context {
	return context.WithValue(ctx, writeNowKey{}, true)
}

// WritesNow reports whether ctx is marked WriteNow.
func WritesNow(ctx context.Context) bool {
	now, _ := ctx.Value(writeNowKey{}).(bool)
	return now
}

package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The two writes of every tool call ride PostgreSQL's queue of audit
// appends (see appendAudit), each as a step of the append's transaction:
// the execution's statements go in the append's first round trip, before
// the audit lock, so that one waiting for a concurrent write of the same
// key waits without the lock. Every other operation is core's.

// BeginExecutionAudited inserts the execution (or resumes the same call's,
// awaiting input) and reads it back in the append's transaction.
func (s *postgresStore) BeginExecutionAudited(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	e, err := s.newExecution(e)
	if err != nil {
		return Execution{}, false, err
	}
	var out Execution
	var started bool
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			// The insert, else the resume of the same call awaiting input
			// (a no-op after an insert), then the row as it is.
			b.Queue(insertExecution.pg, executionArgs(e)...)
			b.Queue(resumeExecution.pg, resumeArgs(e)...)
			b.Queue(getExecution.pg, e.IdempotencyKey)
		},
		read: func(br pgx.BatchResults) error {
			inserted, err := br.Exec()
			if err != nil {
				return err
			}
			resumed, err := br.Exec()
			if err != nil {
				return err
			}
			started = inserted.RowsAffected() == 1 || resumed.RowsAffected() == 1
			out, err = scanExecution(br.QueryRow())
			return err
		},
	}
	if _, err := s.appendAudit(ctx, step, build, false); err != nil {
		return Execution{}, false, s.fail(err)
	}
	return begun(out, started, e)
}

// FinishExecutionAudited finishes the execution in the append's
// transaction. The append is lazy (see appendAudit): no caller waits for
// how a call ended, so it may ride in the transaction of the next append.
func (s *postgresStore) FinishExecutionAudited(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	var out Execution
	var refused error
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			b.Queue(endExecution.pg, finishArgs(idempotencyKey, status, result, now)...)
			b.Queue(executionExists.pg, idempotencyKey)
		},
		read: func(br pgx.BatchResults) error {
			var err error
			out, err = scanExecution(br.QueryRow())
			finished := err == nil
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			var exists bool
			if err := br.QueryRow().Scan(&exists); err != nil {
				return err
			}
			switch {
			case finished:
				refused = nil
			case exists:
				refused = ErrConflict
			default:
				refused = ErrNotFound
			}
			return nil
		},
	}
	if _, err := s.appendAudit(ctx, step, build, true); err != nil {
		return Execution{}, s.fail(err)
	}
	if refused != nil {
		return Execution{}, refused
	}
	return out, nil
}

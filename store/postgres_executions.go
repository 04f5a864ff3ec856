package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// pgBeginExecution inserts a started execution unless its key is
	// taken; a concurrent insert of the same key makes it wait for that
	// transaction, then do nothing.
	pgBeginExecution = `
INSERT INTO tool_executions (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, started_at)
VALUES ($1, $2, $3, $4, $5, $6, 'started', $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING ` + executionColumns

	// pgInsertExecution is pgBeginExecution for a batch, which reads the
	// record with pgGetExecution in the same transaction.
	pgInsertExecution = `
INSERT INTO tool_executions (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, started_at)
VALUES ($1, $2, $3, $4, $5, $6, 'started', $7)
ON CONFLICT (idempotency_key) DO NOTHING`

	pgGetExecution = `SELECT ` + executionColumns + ` FROM tool_executions WHERE idempotency_key = $1`

	pgExecutionExists = `SELECT EXISTS (SELECT 1 FROM tool_executions WHERE idempotency_key = $1)`

	// pgFinishExecution is the compare-and-swap from started.
	pgFinishExecution = `
UPDATE tool_executions SET status = $2, result = $3, finished_at = $4
WHERE idempotency_key = $1 AND status = 'started'
RETURNING ` + executionColumns

	pgMarkOutcomeUnknown = `
UPDATE tool_executions SET status = 'outcome_unknown'
WHERE status = 'started' AND started_at < $1
RETURNING ` + executionColumns
)

func (s *postgresStore) BeginExecution(ctx context.Context, e Execution) (Execution, bool, error) {
	if e.StartedAt.IsZero() {
		e.StartedAt = s.now()
	}
	if err := checkNewExecution(e); err != nil {
		return Execution{}, false, err
	}
	started := true
	out, err := scanPostgresExecution(s.pool.QueryRow(ctx, pgBeginExecution,
		e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash, nullString(e.ApprovalID), nullString(e.RunID),
		storedTime(e.StartedAt)))
	if errors.Is(err, pgx.ErrNoRows) {
		// The key was taken, and the insert that took it has committed.
		started = false
		out, err = scanPostgresExecution(s.pool.QueryRow(ctx, pgGetExecution, e.IdempotencyKey))
	}
	if err != nil {
		return Execution{}, false, pgError(err)
	}
	if !sameCall(out, e) {
		return Execution{}, false, ErrConflict
	}
	return out, started, nil
}

// BeginExecutionAudited inserts the execution and reads it back before
// the audit lock is taken, in the append's first round trip: an insert
// that waits for a concurrent one of the same key waits without the lock.
func (s *postgresStore) BeginExecutionAudited(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	if e.StartedAt.IsZero() {
		e.StartedAt = s.now()
	}
	if err := checkNewExecution(e); err != nil {
		return Execution{}, false, err
	}
	var out Execution
	var started bool
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			b.Queue(pgInsertExecution, e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash,
				nullString(e.ApprovalID), nullString(e.RunID), storedTime(e.StartedAt))
			b.Queue(pgGetExecution, e.IdempotencyKey)
		},
		read: func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			started = tag.RowsAffected() == 1
			out, err = scanPostgresExecution(br.QueryRow())
			return err
		},
	}
	if _, err := s.appendAudit(ctx, step, build, false); err != nil {
		return Execution{}, false, appendError(err, pgError)
	}
	if !sameCall(out, e) {
		return Execution{}, false, ErrConflict
	}
	return out, started, nil
}

func (s *postgresStore) GetExecution(ctx context.Context, idempotencyKey string) (Execution, error) {
	e, err := scanPostgresExecution(s.pool.QueryRow(ctx, pgGetExecution, idempotencyKey))
	if err != nil {
		return Execution{}, pgError(err)
	}
	return e, nil
}

func (s *postgresStore) FinishExecution(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time) (Execution, error) {
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	var res []byte // nil is NULL
	if len(result) > 0 {
		res = result
	}
	e, err := scanPostgresExecution(s.pool.QueryRow(ctx, pgFinishExecution, idempotencyKey, status, res, storedTime(now)))
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.pool.QueryRow(ctx, pgExecutionExists, idempotencyKey).Scan(&exists); err != nil {
			return Execution{}, pgError(err)
		}
		if !exists {
			return Execution{}, ErrNotFound
		}
		return Execution{}, ErrConflict
	}
	if err != nil {
		return Execution{}, pgError(err)
	}
	return e, nil
}

// FinishExecutionAudited updates the execution before the audit lock is
// taken, in the append's first round trip. The append is lazy (see
// appendAudit): no caller waits for how a call ended, so it may ride in
// the transaction of the next append.
func (s *postgresStore) FinishExecutionAudited(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	var res []byte // nil is NULL
	if len(result) > 0 {
		res = result
	}
	var out Execution
	var outcome error
	step := &pgTxStep{
		queue: func(b *pgx.Batch) {
			b.Queue(pgFinishExecution, idempotencyKey, status, res, storedTime(now))
			b.Queue(pgExecutionExists, idempotencyKey)
		},
		read: func(br pgx.BatchResults) error {
			var err error
			out, err = scanPostgresExecution(br.QueryRow())
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
				outcome = nil
			case !exists:
				outcome = ErrNotFound
			default:
				outcome = ErrConflict
			}
			return nil
		},
	}
	if _, err := s.appendAudit(ctx, step, build, true); err != nil {
		return Execution{}, appendError(err, pgError)
	}
	if outcome != nil {
		return Execution{}, outcome
	}
	return out, nil
}

func (s *postgresStore) MarkOutcomeUnknown(ctx context.Context, olderThan time.Time) ([]Execution, error) {
	return s.MarkOutcomeUnknownAudited(ctx, olderThan, nil)
}

// MarkOutcomeUnknownAudited is MarkOutcomeUnknown when build is nil. The
// update takes the rows' locks before the records take the audit lock
// (see pgAppendAuditInTx); a concurrent finish or sweep of a row waits
// for it, then finds it no longer started.
func (s *postgresStore) MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(Execution) func(AuditHead) (AuditRecord, error)) ([]Execution, error) {
	if err := invalid(checkTime("olderThan", olderThan)); err != nil {
		return nil, err
	}
	var out []Execution
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, pgMarkOutcomeUnknown, storedTime(olderThan))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Execution, error) {
			return scanPostgresExecution(row)
		})
		if err != nil {
			return err
		}
		sortExecutions(out)
		return appendEachInTx(out, build, func(b func(AuditHead) (AuditRecord, error)) error {
			_, err := pgAppendAuditInTx(ctx, tx, b)
			return err
		})
	})
	if err != nil {
		return nil, appendError(err, pgError)
	}
	return out, nil
}

// scanPostgresExecution reads one row of executionColumns.
func scanPostgresExecution(row pgx.Row) (Execution, error) {
	var e Execution
	var result []byte
	var finishedAt *time.Time
	err := row.Scan(&e.IdempotencyKey, &e.Principal, &e.Tool, &e.ArgumentsHash, &e.ApprovalID, &e.RunID,
		&e.Status, &result, &e.StartedAt, &finishedAt)
	if err != nil {
		return Execution{}, err
	}
	if result != nil {
		e.Result = result
	}
	e.StartedAt = e.StartedAt.UTC()
	e.FinishedAt = pgTimeOrZero(finishedAt)
	return e, nil
}

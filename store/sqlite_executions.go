package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

const (
	// sqliteBeginExecution inserts a started execution unless its key is
	// taken.
	sqliteBeginExecution = `
INSERT INTO tool_executions (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, started_at)
VALUES (?, ?, ?, ?, ?, ?, 'started', ?)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING ` + executionColumns

	sqliteGetExecution = `SELECT ` + executionColumns + ` FROM tool_executions WHERE idempotency_key = ?`

	sqliteExecutionExists = `SELECT EXISTS (SELECT 1 FROM tool_executions WHERE idempotency_key = ?)`

	// sqliteFinishExecution is the compare-and-swap from started.
	sqliteFinishExecution = `
UPDATE tool_executions SET status = ?2, result = ?3, finished_at = ?4
WHERE idempotency_key = ?1 AND status = 'started'
RETURNING ` + executionColumns

	sqliteMarkOutcomeUnknown = `
UPDATE tool_executions SET status = 'outcome_unknown'
WHERE status = 'started' AND started_at < ?
RETURNING ` + executionColumns
)

func (s *sqliteStore) BeginExecution(ctx context.Context, e Execution) (Execution, bool, error) {
	return s.beginExecution(ctx, e, nil)
}

func (s *sqliteStore) BeginExecutionAudited(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	return s.beginExecution(ctx, e, build)
}

// beginExecution begins e and, when build is not nil, appends its record,
// in one transaction.
func (s *sqliteStore) beginExecution(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	if e.StartedAt.IsZero() {
		e.StartedAt = s.now()
	}
	if err := checkNewExecution(e); err != nil {
		return Execution{}, false, err
	}
	var out Execution
	var started bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteExecution(tx.QueryRowContext(ctx, sqliteBeginExecution,
			e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash, nullString(e.ApprovalID), nullString(e.RunID),
			sqliteTime(e.StartedAt)))
		switch {
		case err == nil:
			started = true
		case errors.Is(err, sql.ErrNoRows):
			if out, err = scanSQLiteExecution(tx.QueryRowContext(ctx, sqliteGetExecution, e.IdempotencyKey)); err != nil {
				return err
			}
		default:
			return err
		}
		if !sameCall(out, e) && build == nil {
			return ErrConflict
		}
		if build != nil {
			_, err = appendAuditInTx(ctx, tx, build)
		}
		return err
	})
	if err != nil {
		return Execution{}, false, appendError(err, sqliteError)
	}
	if !sameCall(out, e) {
		return Execution{}, false, ErrConflict
	}
	return out, started, nil
}

func (s *sqliteStore) GetExecution(ctx context.Context, idempotencyKey string) (Execution, error) {
	e, err := scanSQLiteExecution(s.read.QueryRowContext(ctx, sqliteGetExecution, idempotencyKey))
	if err != nil {
		return Execution{}, sqliteError(err)
	}
	return e, nil
}

func (s *sqliteStore) FinishExecution(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time) (Execution, error) {
	return s.finishExecution(ctx, idempotencyKey, status, result, now, nil)
}

func (s *sqliteStore) FinishExecutionAudited(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	return s.finishExecution(ctx, idempotencyKey, status, result, now, build)
}

// finishExecution finishes the execution and, when build is not nil,
// appends its record, in one transaction.
func (s *sqliteStore) finishExecution(ctx context.Context, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	var res any
	if len(result) > 0 {
		res = string(result)
	}
	var out Execution
	var outcome error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteExecution(tx.QueryRowContext(ctx, sqliteFinishExecution,
			idempotencyKey, string(status), res, sqliteTime(now)))
		outcome = nil
		if errors.Is(err, sql.ErrNoRows) {
			var exists bool
			if err := tx.QueryRowContext(ctx, sqliteExecutionExists, idempotencyKey).Scan(&exists); err != nil {
				return err
			}
			outcome = ErrConflict
			if !exists {
				outcome = ErrNotFound
			}
			if build == nil {
				return outcome
			}
		} else if err != nil {
			return err
		}
		if build != nil {
			_, err = appendAuditInTx(ctx, tx, build)
		}
		return err
	})
	if err != nil {
		return Execution{}, appendError(err, sqliteError)
	}
	if outcome != nil {
		return Execution{}, outcome
	}
	return out, nil
}

func (s *sqliteStore) MarkOutcomeUnknown(ctx context.Context, olderThan time.Time) ([]Execution, error) {
	return s.MarkOutcomeUnknownAudited(ctx, olderThan, nil)
}

// MarkOutcomeUnknownAudited is MarkOutcomeUnknown when build is nil.
func (s *sqliteStore) MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(Execution) func(AuditHead) (AuditRecord, error)) ([]Execution, error) {
	if err := invalid(checkTime("olderThan", olderThan)); err != nil {
		return nil, err
	}
	var out []Execution
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, sqliteMarkOutcomeUnknown, sqliteTime(olderThan))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanSQLiteExecution(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		sortExecutions(out)
		return appendEachInTx(out, build, func(b func(AuditHead) (AuditRecord, error)) error {
			_, err := appendAuditInTx(ctx, tx, b)
			return err
		})
	})
	if err != nil {
		return nil, appendError(err, sqliteError)
	}
	return out, nil
}

// sortExecutions orders executions oldest first; RETURNING promises no
// order.
func sortExecutions(es []Execution) {
	slices.SortFunc(es, func(a, b Execution) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.IdempotencyKey, b.IdempotencyKey))
	})
}

// scanSQLiteExecution reads one row of executionColumns.
func scanSQLiteExecution(row interface{ Scan(...any) error }) (Execution, error) {
	var e Execution
	var status, startedAt string
	var result, finishedAt sql.NullString
	err := row.Scan(&e.IdempotencyKey, &e.Principal, &e.Tool, &e.ArgumentsHash, &e.ApprovalID, &e.RunID,
		&status, &result, &startedAt, &finishedAt)
	if err != nil {
		return Execution{}, err
	}
	e.Status = ExecutionStatus(status)
	if result.Valid {
		e.Result = json.RawMessage(result.String)
	}
	var tp sqliteTimeParser
	e.StartedAt = tp.parse(startedAt)
	e.FinishedAt = tp.parseNull(finishedAt)
	return e, tp.err
}

package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ExecutionStatus is the state of one execution of a tool call.
type ExecutionStatus string

// The execution states. Started and awaiting input are the open ones.
const (
	ExecutionStarted ExecutionStatus = "started"
	// ExecutionAwaitingInput marks a call whose last round ended asking
	// its caller for input (a multi round-trip request of protocol
	// 2026-07-28): it is not running, and BeginExecutionAudited of the same
	// call starts it again, for the round that brings the answers. It is one
	// execution however many rounds it takes.
	ExecutionAwaitingInput ExecutionStatus = "awaiting_input"
	ExecutionSucceeded     ExecutionStatus = "succeeded"
	ExecutionFailed        ExecutionStatus = "failed"
	// ExecutionOutcomeUnknown marks an execution that started but whose
	// end was never recorded: its process stopped, or could not record the
	// outcome and said so (FinishExecutionAudited to outcome_unknown). It is
	// reported, never run again: the tool may or may not have acted.
	ExecutionOutcomeUnknown ExecutionStatus = "outcome_unknown"
)

// Execution is the record that makes a tool call run at most once: the
// first caller with an idempotency key starts it, every later caller with
// the same key finds it.
type Execution struct {
	// IdempotencyKey names the call: run and tool call id, or a key the
	// client supplied. Callers scope client keys (by principal, say) so
	// that two callers cannot collide.
	IdempotencyKey string
	Principal      string
	Tool           string
	ArgumentsHash  string
	ApprovalID     string // the approval consumed for the call (its latest round), if any
	RunID          string // empty outside a run
	Status         ExecutionStatus
	// Result is the tool's result as JSON once finished; nil before, and
	// for outcomes never recorded.
	Result json.RawMessage
	// StartedAt is when the call's latest round started: its start, or
	// when it was started again after awaiting input.
	StartedAt time.Time
	// FinishedAt is when FinishExecutionAudited ended it; zero while started
	// and for an execution MarkOutcomeUnknownAudited found abandoned (nobody
	// knows when that one ended).
	FinishedAt time.Time
}

// FinishExecutionParams is what FinishExecutionAudited takes: how the
// started execution IdempotencyKey ended, at Now.
type FinishExecutionParams struct {
	IdempotencyKey string
	// Status is succeeded, failed or outcome_unknown.
	Status ExecutionStatus
	// Result is the tool's result as JSON; none for outcome_unknown.
	Result json.RawMessage
	Now    time.Time
}

// executionColumns is the column list of an Execution, in field order.
const executionColumns = `idempotency_key, principal, tool, arguments_hash,
	coalesce(approval_id, ''), coalesce(run_id, ''), status, result, started_at, finished_at`

// checkNewExecution validates what BeginExecutionAudited takes from the
// caller; e has its StartedAt set.
func checkNewExecution(e Execution) error {
	var errs []error
	required := []struct{ name, value string }{
		{"idempotency key", e.IdempotencyKey},
		{"principal", e.Principal},
		{"tool", e.Tool},
		{"arguments hash", e.ArgumentsHash},
	}
	for _, f := range required {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("execution %s is empty", f.name))
		}
		errs = append(errs, checkText("execution "+f.name, f.value))
	}
	if e.Status != "" && e.Status != ExecutionStarted {
		errs = append(errs, fmt.Errorf("a new execution is started, not %q", e.Status))
	}
	if len(e.Result) != 0 || !e.FinishedAt.IsZero() {
		errs = append(errs, errors.New("a new execution has no result yet"))
	}
	errs = append(errs,
		checkText("execution approval id", e.ApprovalID),
		checkText("execution run id", e.RunID),
		checkTime("execution StartedAt", e.StartedAt))
	return invalid(errs...)
}

// checkFinish validates what FinishExecutionAudited records.
func checkFinish(key string, status ExecutionStatus, result json.RawMessage, now time.Time) error {
	var errs []error
	if key == "" {
		errs = append(errs, errors.New("execution idempotency key is empty"))
	}
	switch status {
	case ExecutionSucceeded, ExecutionFailed:
	case ExecutionOutcomeUnknown:
		if len(result) != 0 {
			errs = append(errs, errors.New("an execution whose outcome is unknown has no result"))
		}
	default:
		errs = append(errs, fmt.Errorf("an execution finishes succeeded, failed or outcome_unknown, not %q", status))
	}
	errs = append(errs, checkJSON("execution result", result), checkNow(now))
	return invalid(errs...)
}

// sameCall reports whether an execution found under a key is the call a
// caller began again: a key reused for another call is a conflict, never
// an answer.
func sameCall(found, began Execution) bool {
	return found.Principal == began.Principal && found.Tool == began.Tool &&
		found.ArgumentsHash == began.ArgumentsHash
}

var (
	// insertExecution inserts a started execution unless its key is
	// taken; on PostgreSQL a concurrent insert of the same key makes it
	// wait for that transaction, then do nothing.
	insertExecution = sql1(`
INSERT INTO tool_executions (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, started_at)
VALUES ($1, $2, $3, $4, $5, $6, 'started', $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING ` + executionColumns)

	// resumeExecution starts again the execution of the same call that
	// awaits input; on PostgreSQL a concurrent resume waits for the row
	// lock, then finds it started.
	resumeExecution = sql1(`
UPDATE tool_executions SET status = 'started', approval_id = $5, started_at = $6
WHERE idempotency_key = $1 AND status = 'awaiting_input' AND principal = $2 AND tool = $3 AND arguments_hash = $4
RETURNING ` + executionColumns)

	// suspendExecution is the compare-and-swap from started to awaiting
	// input.
	suspendExecution = sql1(`
UPDATE tool_executions SET status = 'awaiting_input'
WHERE idempotency_key = $1 AND status = 'started'
RETURNING ` + executionColumns)

	getExecution = sql1(`SELECT ` + executionColumns + ` FROM tool_executions WHERE idempotency_key = $1`)

	executionExists = sql1(`SELECT EXISTS (SELECT 1 FROM tool_executions WHERE idempotency_key = $1)`)

	// endExecution is the compare-and-swap from started.
	endExecution = sql1(`
UPDATE tool_executions SET status = $2, result = $3, finished_at = $4
WHERE idempotency_key = $1 AND status = 'started'
RETURNING ` + executionColumns)

	// markAbandonedExecutions: on PostgreSQL the update takes the rows'
	// locks, so a concurrent finish or sweep of a row waits for it, then
	// finds the row no longer started.
	markAbandonedExecutions = sql1(`
UPDATE tool_executions SET status = 'outcome_unknown'
WHERE status = 'started' AND started_at < $1
RETURNING ` + executionColumns)

	// endAwaitingInputExecutions: as markAbandonedExecutions, of the
	// executions awaiting input; a resume of a row waits for it, then
	// finds it no longer awaiting input.
	endAwaitingInputExecutions = sql1(`
UPDATE tool_executions SET status = 'failed', result = $2, finished_at = $3
WHERE status = 'awaiting_input' AND started_at < $1
RETURNING ` + executionColumns)
)

// newExecution is e as BeginExecutionAudited starts it: a zero StartedAt is
// now.
func (c *core) newExecution(e Execution) (Execution, error) {
	if e.StartedAt.IsZero() {
		e.StartedAt = c.now()
	}
	return e, checkNewExecution(e)
}

// executionArgs are insertExecution's arguments for e.
func executionArgs(e Execution) []any {
	return []any{e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash,
		nullString(e.ApprovalID), nullString(e.RunID), storedTime(e.StartedAt)}
}

// resumeArgs are resumeExecution's arguments for e.
func resumeArgs(e Execution) []any {
	return []any{e.IdempotencyKey, e.Principal, e.Tool, e.ArgumentsHash, nullString(e.ApprovalID), storedTime(e.StartedAt)}
}

// finishArgs are endExecution's arguments; an empty result is NULL.
func finishArgs(idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time) []any {
	if len(result) == 0 {
		result = nil
	}
	return []any{idempotencyKey, status, result, storedTime(now)}
}

// begun is what BeginExecutionAudited returns for the execution found under the
// key of the one it began: a key of another call is a conflict.
func begun(found Execution, started bool, began Execution) (Execution, bool, error) {
	if !sameCall(found, began) {
		return Execution{}, false, ErrConflict
	}
	return found, started, nil
}

// BeginExecutionAudited: PostgreSQL's store overrides it with its queue
// of appends, for a build.
func (c *core) BeginExecutionAudited(ctx context.Context, e Execution, build func(AuditHead) (AuditRecord, error)) (Execution, bool, error) {
	e, err := c.newExecution(e)
	if err != nil {
		return Execution{}, false, err
	}
	var out Execution
	var started bool
	err = c.writeAudited(ctx, build, func(x executor) (err error) {
		out, started, err = beginExecution(ctx, x, e)
		return err
	})
	if err != nil {
		return Execution{}, false, c.fail(err)
	}
	return begun(out, started, e)
}

// beginExecution inserts e, or starts again the execution of the same
// call that awaits input, or reads the execution its key names (started
// false), whichever call that is of.
func beginExecution(ctx context.Context, x executor, e Execution) (_ Execution, started bool, _ error) {
	out, err := scanExecution(x.row(ctx, insertExecution, executionArgs(e)...))
	if errors.Is(err, sql.ErrNoRows) {
		// The key was taken, and (on PostgreSQL, which waited for it) the
		// insert that took it has committed.
		out, err = scanExecution(x.row(ctx, resumeExecution, resumeArgs(e)...))
		if err == nil {
			return out, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Execution{}, false, err
		}
		out, err = scanExecution(x.row(ctx, getExecution, e.IdempotencyKey))
		return out, false, err
	}
	return out, err == nil, err
}

func (c *core) GetExecution(ctx context.Context, idempotencyKey string) (Execution, error) {
	e, err := scanExecution(c.reader().row(ctx, getExecution, idempotencyKey))
	if err != nil {
		return Execution{}, c.fail(err)
	}
	return e, nil
}

// FinishExecutionAudited appends the record whether or not the execution
// was finished by it. PostgreSQL's store overrides it with its queue of
// appends, for a build.
func (c *core) FinishExecutionAudited(ctx context.Context, p FinishExecutionParams, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	idempotencyKey, status, result, now := p.IdempotencyKey, p.Status, p.Result, p.Now
	if err := checkFinish(idempotencyKey, status, result, now); err != nil {
		return Execution{}, err
	}
	if build == nil {
		var out Execution
		err := c.writeOne(ctx, func(x executor) (err error) {
			out, err = finishExecution(ctx, x, idempotencyKey, status, result, now)
			return err
		})
		if err != nil {
			return Execution{}, c.fail(err)
		}
		return out, nil
	}
	var out Execution
	var refused error
	err := c.inTx(ctx, func(tx executor) (err error) {
		out, refused = finishExecution(ctx, tx, idempotencyKey, status, result, now)
		if refused != nil && !errors.Is(refused, ErrNotFound) && !errors.Is(refused, ErrConflict) {
			return refused
		}
		_, err = appendAuditTx(ctx, tx, build)
		return err
	})
	if err != nil {
		return Execution{}, c.fail(err)
	}
	if refused != nil {
		return Execution{}, refused
	}
	return out, nil
}

// finishExecution ends the started execution idempotencyKey:
// ErrNotFound or ErrConflict as FinishExecutionAudited says.
func finishExecution(ctx context.Context, x executor, idempotencyKey string, status ExecutionStatus, result json.RawMessage, now time.Time) (Execution, error) {
	e, err := scanExecution(x.row(ctx, endExecution, finishArgs(idempotencyKey, status, result, now)...))
	if errors.Is(err, sql.ErrNoRows) {
		return Execution{}, missingOrConflict(ctx, x, executionExists, idempotencyKey)
	}
	return e, err
}

func (c *core) AwaitInputAudited(ctx context.Context, idempotencyKey, approvalID string, now time.Time, build func(AuditHead) (AuditRecord, error)) (Execution, error) {
	if err := invalid(checkText("execution idempotency key", idempotencyKey), checkText("approval id", approvalID), checkNow(now)); err != nil {
		return Execution{}, err
	}
	var out Execution
	err := c.inTx(ctx, withAudit(ctx, func(tx executor) (err error) {
		if idempotencyKey != "" {
			out, err = scanExecution(tx.row(ctx, suspendExecution, idempotencyKey))
			if errors.Is(err, sql.ErrNoRows) {
				return missingOrConflict(ctx, tx, executionExists, idempotencyKey)
			}
			if err != nil {
				return err
			}
		}
		if approvalID != "" {
			if _, err := swapApproval(ctx, tx, approvalID, releaseApproval, approvalID, storedTime(now)); err != nil {
				return err
			}
		}
		return nil
	}, build))
	if err != nil {
		return Execution{}, c.fail(err)
	}
	return out, nil
}

// MarkOutcomeUnknownAudited: the update takes the rows' locks before the
// records take the audit lock.
func (c *core) MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(Execution) func(AuditHead) (AuditRecord, error)) ([]Execution, error) {
	if err := invalid(checkTime("olderThan", olderThan)); err != nil {
		return nil, err
	}
	return c.markAudited(ctx, func(x executor) ([]Execution, error) { return markOutcomeUnknown(ctx, x, olderThan) }, build)
}

func (c *core) EndAwaitingInputAudited(ctx context.Context, olderThan, now time.Time, result json.RawMessage, build func(Execution) func(AuditHead) (AuditRecord, error)) ([]Execution, error) {
	var noResult error
	if len(result) == 0 {
		noResult = errors.New("an execution that no answer came for is ended with a result")
	}
	if err := invalid(checkTime("olderThan", olderThan), checkNow(now), checkJSON("execution result", result), noResult); err != nil {
		return nil, err
	}
	return c.markAudited(ctx, func(x executor) ([]Execution, error) {
		es, err := queryAll(ctx, x, endAwaitingInputExecutions, scanExecution, storedTime(olderThan), result, storedTime(now))
		sortExecutions(es)
		return es, err
	}, build)
}

// markAudited runs mark, which changes executions and returns them, and
// appends the record build(e) makes of each e, in one transaction; with a
// nil build it runs mark alone.
func (c *core) markAudited(ctx context.Context, mark func(executor) ([]Execution, error), build func(Execution) func(AuditHead) (AuditRecord, error)) ([]Execution, error) {
	var out []Execution
	run := func(x executor) (err error) {
		out, err = mark(x)
		return err
	}
	var err error
	if build == nil {
		err = c.writeOne(ctx, run)
	} else {
		err = c.inTx(ctx, func(tx executor) error {
			if err := run(tx); err != nil {
				return err
			}
			for _, e := range out {
				if _, err := appendAuditTx(ctx, tx, build(e)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}

// markOutcomeUnknown marks the executions still started before olderThan
// outcome_unknown and returns them, oldest first.
func markOutcomeUnknown(ctx context.Context, x executor, olderThan time.Time) ([]Execution, error) {
	es, err := queryAll(ctx, x, markAbandonedExecutions, scanExecution, storedTime(olderThan))
	sortExecutions(es)
	return es, err
}

// sortExecutions orders executions oldest first; RETURNING promises no
// order.
func sortExecutions(es []Execution) {
	slices.SortFunc(es, func(a, b Execution) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.IdempotencyKey, b.IdempotencyKey))
	})
}

// scanExecution reads one row of executionColumns, on either engine.
func scanExecution(row rowScanner) (Execution, error) { return scanExecutionAnd(row) }

// scanExecutionAnd reads one row of executionColumns and then the columns
// of extra.
func scanExecutionAnd(row rowScanner, extra ...any) (Execution, error) {
	var e Execution
	var status string
	var result []byte
	err := row.Scan(append([]any{&e.IdempotencyKey, &e.Principal, &e.Tool, &e.ArgumentsHash, &e.ApprovalID, &e.RunID,
		&status, &result, at(&e.StartedAt), at(&e.FinishedAt)}, extra...)...)
	if err != nil {
		return Execution{}, err
	}
	e.Status = ExecutionStatus(status)
	if result != nil {
		e.Result = result
	}
	return e, nil
}

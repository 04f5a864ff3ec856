package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ExecutionStatus is the state of one execution of a tool call.
type ExecutionStatus string

// The execution states. Started is the only open one.
const (
	ExecutionStarted   ExecutionStatus = "started"
	ExecutionSucceeded ExecutionStatus = "succeeded"
	ExecutionFailed    ExecutionStatus = "failed"
	// ExecutionOutcomeUnknown marks an execution that started but whose
	// end was never recorded: its process stopped, or could not record the
	// outcome and said so (FinishExecution to outcome_unknown). It is
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
	ApprovalID     string // the approval consumed for the call, if any
	RunID          string // empty outside a run
	Status         ExecutionStatus
	// Result is the tool's result as JSON once finished; nil before, and
	// for outcomes never recorded.
	Result    json.RawMessage
	StartedAt time.Time
	// FinishedAt is when FinishExecution ended it; zero while started and
	// for an execution MarkOutcomeUnknown found abandoned (nobody knows
	// when that one ended).
	FinishedAt time.Time
}

// executionColumns is the column list of an Execution, in field order.
const executionColumns = `idempotency_key, principal, tool, arguments_hash,
	coalesce(approval_id, ''), coalesce(run_id, ''), status, result, started_at, finished_at`

// checkNewExecution validates what BeginExecution takes from the caller; e
// has its StartedAt set.
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

// checkFinish validates what FinishExecution records.
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

// appendEachInTx appends, with appendInTx, the record build makes of each
// execution of es, in order (see MarkOutcomeUnknownAudited); nothing when
// build is nil.
func appendEachInTx(es []Execution, build func(Execution) func(AuditHead) (AuditRecord, error), appendInTx func(func(AuditHead) (AuditRecord, error)) error) error {
	if build == nil {
		return nil
	}
	for _, e := range es {
		if err := appendInTx(build(e)); err != nil {
			return err
		}
	}
	return nil
}

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// This file makes what the server needs (Auditor, Executions, Approvals)
// of Usher's hash-chained audit log, its store and its approvals service.
// The server itself reaches them only through those interfaces.

// AuditLog is the part of the audit log (audit.Log) the server's events
// go to: appended on their own, or built into the transaction of the
// change they record.
type AuditLog interface {
	Append(ctx context.Context, e audit.Entry) error
	Builder(e audit.Entry) (func(store.AuditHead) (store.AuditRecord, error), error)
}

// eventDetails are the details of an event's record. The fields are in the
// byte order of their JSON names, so that encoding/json writes the keys
// sorted, as the audit log keeps them.
type eventDetails struct {
	Action         Action   `json:"action,omitempty"`
	IdempotencyKey string   `json:"idempotency_key"`
	Reasons        []string `json:"reasons"`
	Server         string   `json:"server"`
	Suppressed     int      `json:"suppressed,omitempty"`
}

// Entry is the audit log's entry of the event.
func (e Event) Entry() (audit.Entry, error) {
	details, err := json.Marshal(eventDetails{
		Action: e.Action, IdempotencyKey: e.IdempotencyKey, Reasons: e.Reasons, Server: e.Server,
		Suppressed: max(e.Suppressed, 0),
	})
	if err != nil {
		return audit.Entry{}, err
	}
	return audit.Entry{
		Kind: audit.Kind(e.Kind), EventID: e.EventID, At: e.At, Principal: e.Principal, ClientID: e.ClientID,
		TokenJTI: e.TokenID, Tool: e.Tool, DefinitionHash: e.DefinitionHash,
		ArgumentsHash: e.ArgumentsHash, Decision: string(e.Decision), PolicyIDs: e.PolicyIDs,
		PolicyHash: e.PolicyHash, ApprovalID: e.ApprovalID, RunID: e.RunID, Outcome: e.Outcome,
		Latency: e.Latency, Details: details,
	}, nil
}

// LogAuditor is the Auditor that appends each event to Log.
type LogAuditor struct{ Log AuditLog }

// Record appends e's entry to the log.
func (a LogAuditor) Record(ctx context.Context, e Event) error {
	entry, err := e.Entry()
	if err != nil {
		return err
	}
	return a.Log.Append(ctx, entry)
}

// ExecutionStore is the part of the store that keeps executions, each
// change written in one transaction with its audit record; store.Store
// implements it.
type ExecutionStore interface {
	GetExecution(ctx context.Context, key string) (store.Execution, error)
	BeginExecutionAudited(ctx context.Context, e store.Execution, build func(head store.AuditHead) (store.AuditRecord, error)) (_ store.Execution, started bool, _ error)
	FinishExecutionAudited(ctx context.Context, p store.FinishExecutionParams, build func(head store.AuditHead) (store.AuditRecord, error)) (store.Execution, error)
	AwaitInputAudited(ctx context.Context, idempotencyKey, approvalID string, now time.Time, build func(head store.AuditHead) (store.AuditRecord, error)) (store.Execution, error)
	MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(e store.Execution) func(head store.AuditHead) (store.AuditRecord, error)) ([]store.Execution, error)
	EndAwaitingInputAudited(ctx context.Context, olderThan, now time.Time, result json.RawMessage, build func(e store.Execution) func(head store.AuditHead) (store.AuditRecord, error)) ([]store.Execution, error)
}

// AuditedExecutions is the Executions (and the sweeper's
// AbandonedExecutions) that keeps executions in Store, writing each start,
// each finish, each round that asks for input and each sweep's marks in
// one transaction with their events' records in Log.
type AuditedExecutions struct {
	Store ExecutionStore
	Log   AuditLog
}

func (x AuditedExecutions) GetExecution(ctx context.Context, key string) (store.Execution, error) {
	return x.Store.GetExecution(ctx, key)
}

func (x AuditedExecutions) BeginExecution(ctx context.Context, e store.Execution, ev Event) (store.Execution, bool, error) {
	build, err := x.builder(ev)
	if err != nil {
		return store.Execution{}, false, err
	}
	return x.Store.BeginExecutionAudited(ctx, e, build)
}

func (x AuditedExecutions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error) {
	build, err := x.builder(ev)
	if err != nil {
		return store.Execution{}, err
	}
	return x.Store.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: key, Status: status, Result: result, Now: now}, build)
}

func (x AuditedExecutions) AwaitInput(ctx context.Context, key, approvalID string, now time.Time, ev Event) error {
	build, err := x.builder(ev)
	if err != nil {
		return err
	}
	_, err = x.Store.AwaitInputAudited(ctx, key, approvalID, now, build)
	return err
}

func (x AuditedExecutions) MarkAbandoned(ctx context.Context, olderThan time.Time, event func(store.Execution) Event) ([]store.Execution, error) {
	return x.Store.MarkOutcomeUnknownAudited(ctx, olderThan, x.builders(event))
}

func (x AuditedExecutions) EndAwaitingInput(ctx context.Context, olderThan, now time.Time, result json.RawMessage, event func(store.Execution) Event) ([]store.Execution, error) {
	return x.Store.EndAwaitingInputAudited(ctx, olderThan, now, result, x.builders(event))
}

// builders returns the function that makes event(e) the next audit
// record, for each execution e a sweep changes; an event that cannot be
// encoded fails the sweep's transaction.
func (x AuditedExecutions) builders(event func(store.Execution) Event) func(store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
	return func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		build, err := x.builder(event(e))
		if err != nil {
			return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, err }
		}
		return build
	}
}

// builder returns the function that makes ev the next audit record.
func (x AuditedExecutions) builder(ev Event) (func(store.AuditHead) (store.AuditRecord, error), error) {
	entry, err := ev.Entry()
	if err != nil {
		return nil, err
	}
	return x.Log.Builder(entry)
}

// ApprovalService is the part of the approvals service (approvals.Service)
// the server asks for and uses approvals through.
type ApprovalService interface {
	Consume(ctx context.Context, b store.ApprovalBinding, e *store.Execution, record audit.Entry) (_ store.Approval, _ store.Execution, started bool, _ error)
	RequestCurrent(ctx context.Context, r approvals.Request) (store.Approval, error)
}

// ServiceApprovals is the Approvals that asks for and uses approvals
// through Service.
type ServiceApprovals struct{ Service ApprovalService }

// Consume uses the approval bound to exactly b, recording ev
// (approvals.Service.Consume).
func (a ServiceApprovals) Consume(ctx context.Context, b store.ApprovalBinding, e *store.Execution, ev Event) (store.Approval, store.Execution, bool, error) {
	entry, err := ev.Entry()
	if err != nil {
		return store.Approval{}, store.Execution{}, false, err
	}
	used, rec, started, err := a.Service.Consume(ctx, b, e, entry)
	if errors.Is(err, approvals.ErrNotApproved) {
		err = ErrNotApproved
	}
	return used, rec, started, err
}

// Request records (or finds) the request for this exact call, for the
// tool's current definition: approvals of the tool's earlier definitions
// are revoked first (approvals.Service.RequestCurrent).
func (a ServiceApprovals) Request(ctx context.Context, r ApprovalRequest) (store.Approval, error) {
	return a.Service.RequestCurrent(ctx, approvals.Request{
		Binding: r.Binding, Tenant: r.Tenant,
		Arguments: r.Arguments, PolicyIDs: r.PolicyIDs, Reason: r.Reason, Approvers: r.Approvers,
		ToolCallID: r.ToolCallID, IdempotencyKey: r.IdempotencyKey,
	})
}

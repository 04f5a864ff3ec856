package mcpserver

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/jcs"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// Decision is what the policy says of a call.
type Decision string

// The decisions. Any other value, the zero value included, denies.
const (
	// Allow runs the call unattended.
	Allow Decision = "allow"
	// Approve runs the call only with a human's approval of exactly it.
	Approve Decision = "approve"
	// Deny refuses the call.
	Deny Decision = "deny"
)

// Call is what a Decider judges: who calls which tool with which
// arguments. It deliberately carries no tool annotations (readOnlyHint and
// the like): they are the tool server's claims, never an input to a
// decision.
type Call struct {
	// Principal is the caller's subject.
	Principal string
	// Tenant and Groups are the caller's, from its token (see Caller), for
	// a Decider's conditions on them.
	Tenant string
	Groups []string
	// ClientID is the OAuth client making the call.
	ClientID string
	// RunID is the run the call is made in; empty outside a run.
	RunID string
	// TokenID is the caller's token id ("jti").
	TokenID string
	// Tool is the tool's name as Usher exposes it (with an upstream's
	// prefix).
	Tool string
	// Server is the upstream server offering the tool; empty for a built-in
	// tool.
	Server string
	// DefinitionHash is the tool's definition hash (see
	// CatalogOptions.DefinitionHash), to compare with the tool lock.
	DefinitionHash string
	// Arguments are the call's arguments as canonical (RFC 8785) JSON: an
	// object. Nil when Listing.
	Arguments json.RawMessage
	// ArgumentsHash is the lower-case hex SHA-256 of Arguments; empty when
	// Listing.
	ArgumentsHash string
	// Listing is set when a listing (tools/list, resources/list,
	// resources/templates/list, prompts/list) asks whether to show the
	// item: there are no arguments, and a Decider should deny only what it
	// denies whatever the arguments.
	Listing bool
	// Action is what the call does; empty for a tools/call
	// (ActionCallTool). For the other actions Tool names what it acts on:
	// a resource's URI, a prompt's name, or (for ActionComplete) either,
	// as Ref says; Server is its upstream and DefinitionHash the hash of
	// its listed definition (a resource, template or prompt).
	Action Action
	// Template is, for ActionReadResource, the exposed URI template that
	// Tool matched (empty for a listed resource), and for ActionComplete of
	// a template, the template.
	Template string
	// Ref is, for ActionComplete, RefPrompt or RefResource.
	Ref string
}

// Verdict is a Decider's answer.
type Verdict struct {
	// Decision is Allow, Approve or Deny; anything else denies.
	Decision Decision
	// PolicyIDs are the ids of the policies that determined the decision.
	PolicyIDs []string
	// PolicyHash is the hash of the policy that decided; approvals are
	// bound to it.
	PolicyHash string
	// Reasons explain the decision, for the audit log and the human asked
	// to approve. They are not shown to the caller of a denied call.
	Reasons []string
	// Approvers are the groups whose members may approve the call; empty
	// means the caller decides.
	Approvers []string
}

// Decider decides calls; the policy package implements it. An error denies.
type Decider interface {
	Decide(ctx context.Context, c Call) (Verdict, error)
}

// DeciderFunc is a Decider made of a function.
type DeciderFunc func(ctx context.Context, c Call) (Verdict, error)

// Decide calls f.
func (f DeciderFunc) Decide(ctx context.Context, c Call) (Verdict, error) { return f(ctx, c) }

// ApprovalRequest asks for a human decision about one exact call.
type ApprovalRequest struct {
	// Binding is the exact call: an approval matches a retry only when
	// every field is equal.
	Binding store.ApprovalBinding
	// Tenant is the caller's tenant (see Caller): approver groups are
	// groups of that tenant.
	Tenant string
	// Arguments are the canonical arguments, for the human to read.
	Arguments json.RawMessage
	// PolicyIDs, Reason and Approvers come from the Verdict.
	PolicyIDs []string
	Reason    string
	Approvers []string
	// ToolCallID and IdempotencyKey name the call, so that it can be
	// retried; empty when the caller sent none.
	ToolCallID     string
	IdempotencyKey string
}

// Approvals keeps the approval records; the approvals package implements
// it.
type Approvals interface {
	// Consume finds an approved, unexpired approval bound to exactly b and
	// consumes it once, in one transaction with recording ev (its
	// ApprovalID set to the approval's) and, when e is not nil, with
	// starting the execution e (its ApprovalID set too; see
	// Executions.BeginExecution): after an error none of them is written,
	// unless the error hid a commit (an answer lost with its connection),
	// which the caller tells by reading the execution back. It fails with
	// ErrNotApproved when there is no approval to use. When
	// e's key already names an execution, nothing is written, and that
	// execution is returned with started false.
	Consume(ctx context.Context, b store.ApprovalBinding, e *store.Execution, ev Event) (_ store.Approval, _ store.Execution, started bool, _ error)
	// Request records a pending approval for the call, or returns the
	// identical pending one, or, for a call outside a run, the identical
	// denied one whose denial the caller has not been told of (once).
	Request(ctx context.Context, r ApprovalRequest) (store.Approval, error)
}

// ErrNotApproved is the error of Approvals.Consume when no approval
// matches the call: one is to be requested.
var ErrNotApproved = errors.New("mcpserver: no approval for this call")

// Executions records tool executions so that a call runs at most once per
// idempotency key. An execution's start and its finish are each written
// together with the audit record that goes with them, in one transaction:
// the log holds why a call runs before it runs and how it ended once it
// returned, at the price of one durable write each (the finish is written
// after the result has gone back; see outcomes). cmd/usher implements it
// with the store and the audit log.
type Executions interface {
	// GetExecution returns the execution of key, or store.ErrNotFound.
	GetExecution(ctx context.Context, key string) (store.Execution, error)
	// BeginExecution records ev and starts e, or finds the execution its
	// key already names (started false), atomically: after an error
	// neither is written, except store.ErrConflict, a key already used for
	// another call, after which ev is recorded and the execution untouched.
	BeginExecution(ctx context.Context, e store.Execution, ev Event) (_ store.Execution, started bool, _ error)
	// FinishExecution records how a started execution ended, and ev,
	// atomically: after an error neither is written, except
	// store.ErrNotFound and store.ErrConflict (the execution is not
	// started), after which ev is recorded all the same.
	FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error)
	// AwaitInput records that a round of a call ended asking its caller
	// for input, and ev, atomically: the started execution key (none when
	// empty) awaits input, to be started again by BeginExecution of the
	// round that brings the answers, and the approval approvalID (none
	// when empty) that the round used is unused again, so that only the
	// round that completes the call uses it up (see
	// store.Store.AwaitInputAudited). After an error nothing is written.
	AwaitInput(ctx context.Context, key, approvalID string, now time.Time, ev Event) error
}

// Auditor appends events to the audit log; the audit package implements
// it. A decision that cannot be recorded is not acted on.
type Auditor interface {
	Record(ctx context.Context, e Event) error
}

// The kinds of audit events the endpoint records. They are lower-case
// words, as the audit log requires, and share its names where they mean the
// same.
const (
	// KindAuthFailed: a presented token was refused. Its Suppressed
	// counts the refusals before it that were not recorded.
	KindAuthFailed = "auth_failed"
	// KindAuthFailuresSuppressed: Suppressed refused tokens were not
	// recorded one by one (see Server's sampling of auth_failed).
	KindAuthFailuresSuppressed = "auth_failures_suppressed"
	// KindUnknownTool: a call named no tool of the catalog.
	KindUnknownTool = "tool_unknown"
	// KindInvalidArguments: a call's arguments were not acceptable.
	KindInvalidArguments = "arguments_invalid"
	// KindDecision: the Decider's verdict on a call.
	KindDecision = "decision"
	// KindApprovalRequired: a call that needs approval was answered with
	// its pending approval (created or found by Approvals.Request).
	KindApprovalRequired = "approval_required"
	// KindApprovalDenied: a call was answered with the denial of the
	// identical call's approval, which it had not been told of.
	KindApprovalDenied = "approval_denied"
	// KindApprovalConsumed: a call used its approval.
	KindApprovalConsumed = "approval_consumed"
	// KindExecuted: a tool ran and succeeded.
	KindExecuted = "executed"
	// KindExecutionFailed: a tool ran and failed (or answered an error).
	KindExecutionFailed = "execution_failed"
	// KindOutcomeUnknown: a tool call may or may not have acted.
	KindOutcomeUnknown = "outcome_unknown"
	// KindReplayed: a retried call was answered from its execution
	// record instead of running again.
	KindReplayed = "replayed"
)

// Outcomes of an executed call.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	// OutcomeUnknown: the call may or may not have acted (its upstream
	// connection broke, or it was cancelled). Its execution record stays
	// started, to be reported as outcome_unknown, never run again.
	OutcomeUnknown = "outcome_unknown"
	// OutcomeInputRequired: the round ended asking the caller for input
	// (KindInputRequired); the call goes on with the caller's retry.
	OutcomeInputRequired = "input_required"
)

// Event is one audit record of the endpoint. It never holds a token or
// arguments: ArgumentsHash stands for them.
type Event struct {
	Kind string
	// EventID is the event's identity, made with it (stamp): every
	// attempt to record the event carries it, so that a retry of a write
	// that committed unacknowledged is not recorded twice.
	EventID string
	// Action is the request's action; empty for a tool call. For the
	// other actions Tool names what it acts on (see Call.Action).
	Action         Action
	At             time.Time
	Principal      string
	ClientID       string
	TokenID        string
	RunID          string
	Tool           string
	Server         string
	DefinitionHash string
	ArgumentsHash  string
	Decision       Decision
	PolicyIDs      []string
	PolicyHash     string
	Reasons        []string
	ApprovalID     string
	IdempotencyKey string
	Outcome        string
	Latency        time.Duration
	// Suppressed is, for KindAuthFailed and KindAuthFailuresSuppressed,
	// how many refused tokens before this record were not recorded.
	Suppressed int
}

// Keys of _meta that the endpoint reads from calls or writes to results.
const (
	// MetaToolCallID is the id of a model's tool call, set by the
	// assistant; with the token's run it forms the idempotency key.
	MetaToolCallID = "usher/tool_call_id"
	// MetaIdempotencyKey is a client's own idempotency key, used when
	// there is no run and tool call id. It is scoped to the caller.
	MetaIdempotencyKey = "usher/idempotency_key"
	// MetaApproval, on a result, describes the approval a call needs:
	// {"id", "status", "url"}.
	MetaApproval = "usher/approval"
)

// maxMetaValue is the longest tool call id or idempotency key accepted.
const maxMetaValue = 256

// callTool is the enforcement point: every tools/call passes through it,
// top to bottom, and only its last step runs a tool.
func (s *Server) callTool(ctx context.Context, c Caller, p *mcp.CallToolParamsRaw, caps *mcp.ClientCapabilities) *mcp.CallToolResult {
	start, deciding := s.opts.Now(), time.Now()
	s.calls.Add(1)
	defer s.calls.Add(-1)
	ev := Event{Principal: c.Subject, ClientID: c.ClientID, TokenID: c.TokenID, RunID: c.RunID, Tool: truncate(p.Name, 128)}

	t, ok := s.catalog.lookup(ctx, p.Name)
	if !ok {
		s.record(ctx, ev, KindUnknownTool)
		return errorResult(fmt.Sprintf("There is no tool named %.64q.", p.Name))
	}
	// A built-in tool's records name its server as the policy, the tool
	// lock and the reviewers' API do: builtin.
	ev.Server, ev.DefinitionHash = cmp.Or(t.server, policy.BuiltinServer), t.hash
	args, argsHash, err := s.canonicalArguments(p.Arguments)
	if err == nil && t.validate != nil {
		err = t.validate(args)
	}
	if err != nil {
		s.record(ctx, ev, KindInvalidArguments)
		return errorResult("The arguments are not valid: " + argumentProblem(err))
	}
	ev.ArgumentsHash = argsHash
	call := Call{Principal: c.Subject, Tenant: c.Tenant, Groups: c.Groups, ClientID: c.ClientID, RunID: c.RunID, TokenID: c.TokenID,
		Tool: t.def.Name, Server: t.server, DefinitionHash: t.hash, Arguments: args, ArgumentsHash: argsHash}

	v, err := s.opts.Decider.Decide(ctx, call)
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: the policy failed; denying", "tool", call.Tool, "err", err)
		v = Verdict{Decision: Deny, Reasons: []string{"the policy could not be evaluated"}}
	}
	since(s.stages.decide, deciding)
	ev.Decision, ev.PolicyIDs, ev.PolicyHash, ev.Reasons = v.Decision, v.PolicyIDs, v.PolicyHash, v.Reasons
	if v.Decision != Allow && v.Decision != Approve {
		if res := s.recordOrFail(ctx, ev, KindDecision); res != nil {
			return res
		}
		return deniedResult(v)
	}
	key, toolCallID, err := idempotencyKey(c, p.Meta)
	ev.IdempotencyKey = key
	if err != nil {
		if res := s.recordOrFail(ctx, ev, KindDecision); res != nil {
			return res
		}
		return errorResult(err.Error() + ".")
	}
	// A round of protocol 2026-07-28 is decided as any call is; a retry's
	// state must be this very call's.
	r, refusal := s.openRound(call, key, newRoundRequest(p.Meta, caps, p.InputResponses, p.RequestState))
	if refusal != nil {
		if res := s.recordOrFail(ctx, ev, KindDecision); res != nil {
			return res
		}
		if err := s.refuseRound(ctx, ev, refusal); err != nil {
			return failedResult(err)
		}
		if sessionless(p.Meta) {
			// Protocol 2026-07-28: a JSON-RPC error, as for a prompt or a resource.
			return reject(ctx, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: refusal.text})
		}
		return errorResult(refusal.text)
	}
	if r != nil {
		ctx = context.WithValue(ctx, roundKey{}, r)
	}
	// A retry finds the call's execution finished, not running, when this
	// process is still recording how it ended (or knows it could not).
	s.outcomes.await(ctx, key)
	if v.Decision == Allow {
		// The decision is recorded with the execution's start.
		return s.execute(ctx, t, call, ev, KindDecision, start)
	}

	if res := s.recordOrFail(ctx, ev, KindDecision); res != nil {
		return res
	}
	if key != "" {
		// A retry of a call that has run is answered before an approval is
		// looked for, so that it never uses up another one.
		// A call awaiting input is not over: the round that brings the
		// answers uses the approval, as every round does while it runs.
		if rec, err := s.opts.Executions.GetExecution(ctx, key); err == nil && rec.Status != store.ExecutionAwaitingInput {
			s.record(ctx, ev, KindReplayed)
			return s.replayed(rec, call)
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.ErrorContext(ctx, "mcpserver: reading an execution failed", "err", err)
			return failedResult(err)
		}
	}
	// The approval's use, its record and the execution's start are one
	// transaction: a call never runs on an unrecorded use, and an
	// approval is never used up by a call that did not start.
	var begin *store.Execution
	if key != "" {
		e := newExecution(call, key, "")
		begin = &e
	}
	recording := time.Now()
	a, rec, started, err := s.consume(ctx, binding(call, v), begin, s.stamp(ev, KindApprovalConsumed))
	since(s.stages.record, recording)
	switch {
	case errors.Is(err, ErrNotApproved):
		return s.requestApproval(ctx, ev, call, v, toolCallID, key)
	case errors.Is(err, errStartUnconfirmed):
		return errorResult("The call was not run: the use of its approval could not be recorded because of an error on the server, " +
			"and whether it was recorded could not be confirmed. It has been logged. Retrying the same call later " +
			"either runs it (its approval was not used) or reports that it was not run.")
	case err != nil:
		s.log.ErrorContext(ctx, "mcpserver: using an approval failed", "tool", call.Tool, "err", err)
		return failedResult(err)
	case begin != nil && !started:
		// The key's execution started meanwhile: the approval is unused.
		s.record(ctx, ev, KindReplayed)
		return s.replayed(rec, call)
	}
	ev.ApprovalID = a.ID
	return s.run(ctx, t, call, ev, start)
}

// newExecution is the execution record of a call under key.
func newExecution(call Call, key, approvalID string) store.Execution {
	return store.Execution{
		IdempotencyKey: key, Principal: call.Principal, Tool: call.Tool, ArgumentsHash: call.ArgumentsHash,
		ApprovalID: approvalID, RunID: call.RunID,
	}
}

// binding is the approval binding of a call under a verdict.
func binding(c Call, v Verdict) store.ApprovalBinding {
	return store.ApprovalBinding{
		Principal: c.Principal, Tool: c.Tool, Server: c.Server, DefinitionHash: c.DefinitionHash,
		ArgumentsHash: c.ArgumentsHash, PolicyHash: v.PolicyHash, RunID: c.RunID, ClientID: c.ClientID,
	}
}

// requestApproval records (or finds) the pending approval of a call and
// answers the result that tells the caller about it.
func (s *Server) requestApproval(ctx context.Context, ev Event, call Call, v Verdict, toolCallID, key string) *mcp.CallToolResult {
	a, err := s.opts.Approvals.Request(ctx, ApprovalRequest{
		Binding: binding(call, v), Tenant: call.Tenant, Arguments: call.Arguments, PolicyIDs: v.PolicyIDs,
		Reason: strings.Join(v.Reasons, "; "), Approvers: v.Approvers, ToolCallID: toolCallID, IdempotencyKey: key,
	})
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: requesting an approval failed", "tool", call.Tool, "err", err)
		return failedResult(err)
	}
	ev.ApprovalID = a.ID
	url := s.opts.ApprovalURL(a.ID)
	var res *mcp.CallToolResult
	if a.Status == store.ApprovalDenied {
		s.record(ctx, ev, KindApprovalDenied)
		res = errorResult(fmt.Sprintf("A person denied this call of %s (approval %s, %s); it did not run.%s "+
			"Calling it again asks for a new approval.", call.Tool, a.ID, url, theirReason(a)))
	} else {
		s.record(ctx, ev, KindApprovalRequired)
		res = errorResult(fmt.Sprintf("This call of %s needs a person's approval before it runs. "+
			"Approval %s is %s: ask the user to review it at %s, then retry exactly the same call.", call.Tool, a.ID, a.Status, url))
	}
	res.Meta = mcp.Meta{MetaApproval: map[string]any{"id": a.ID, "status": string(a.Status), "url": url}}
	return res
}

// theirReason is the sentence that gives the reason of a denial, if
// the person gave one.
func theirReason(a store.Approval) string {
	if a.DecisionReason == "" {
		return ""
	}
	return " Their reason: " + a.DecisionReason
}

// execute runs the tool, at most once per idempotency key, after recording
// ev as kind (with the execution's start, when there is a key), and records
// how it ended (with the execution's finish). Records written after the
// tool ran do not depend on the caller's context, which may be gone by
// then.
func (s *Server) execute(ctx context.Context, t *tool, call Call, ev Event, kind string, start time.Time) *mcp.CallToolResult {
	key := ev.IdempotencyKey
	recording := time.Now()
	if key == "" {
		res := s.recordOrFail(ctx, ev, kind)
		since(s.stages.record, recording)
		if res != nil {
			return res
		}
	} else {
		rec, started, err := s.begin(ctx, newExecution(call, key, ev.ApprovalID), s.stamp(ev, kind))
		since(s.stages.record, recording)
		switch {
		case errors.Is(err, store.ErrConflict):
			// ev is recorded; the execution of the key is another call's.
			return errorResult("This idempotency key was already used for a different call.")
		case errors.Is(err, errStartUnconfirmed):
			return errorResult("The call was not run: its start could not be recorded because of an error on the server, " +
				"and whether it was recorded could not be confirmed. It has been logged. Retrying the same call later " +
				"either runs it (its start was never recorded) or reports that it was not run.")
		case err != nil:
			s.log.ErrorContext(ctx, "mcpserver: starting an execution failed", "err", err)
			return failedResult(err)
		case !started:
			s.record(ctx, ev, KindReplayed)
			return s.replayed(rec, call)
		}
	}
	return s.run(ctx, t, call, ev, start)
}

// run runs the tool of a call whose start is recorded, and records how it
// ended (with the execution's finish, when it has an idempotency key).
func (s *Server) run(ctx context.Context, t *tool, call Call, ev Event, start time.Time) *mcp.CallToolResult {
	key := ev.IdempotencyKey
	r, rounds := roundOf(ctx)
	if rounds {
		s.recordAnswers(ctx, ev, r)
	}
	calling := time.Now()
	res, err := t.call(ctx, call.Arguments)
	since(s.stages.upstream, calling)
	if rounds && err == nil && res.InputRequests != nil {
		// The round asks the caller for input: the call goes on with the
		// caller's retry, unless the requests cannot be passed on.
		state, askErr := s.askForInput(ctx, call, ev, key, r, askOf(true, res.InputRequests, res.RequestState), start)
		if askErr == nil {
			return incompleteTool(res.InputRequests, state)
		}
		s.log.WarnContext(ctx, "mcpserver: an upstream's request for input was not passed on", "tool", call.Tool, "err", askErr)
		// A call held open for the round asks nothing more of anyone.
		s.catalog.held.cancel(res.RequestState)
		res = errorResult("The tool could not go on: " + askErr.Error() + ".")
		if errors.Is(askErr, store.ErrUnavailable) {
			res = errorResult(inputUnavailableText)
		}
	}
	after := context.WithoutCancel(ctx)
	ev.Latency = s.opts.Now().Sub(start)
	switch {
	case errors.Is(err, errOutcomeUnknown) || (err != nil && ctx.Err() != nil):
		ev.Outcome = OutcomeUnknown
		s.log.WarnContext(after, "mcpserver: a tool call's outcome is unknown", "tool", call.Tool, "err", err)
		text, reason := outcomeUnknownText(err)
		if reason != "" {
			ev.Reasons = append(slices.Clip(ev.Reasons), reason)
		}
		res = errorResult(text)
	case err != nil && rounds && isMissingCapability(err):
		// The upstream did not run the tool: the caller lacks what it
		// needs, which the caller is told as the upstream said it.
		ev.Outcome = OutcomeFailed
		ev.Reasons = append(slices.Clip(ev.Reasons), "the upstream server requires a client capability the caller did not declare")
		je, _ := missingCapability(err)
		res = reject(ctx, upstreamRefusal(je))
	case err != nil:
		ev.Outcome = OutcomeFailed
		s.log.ErrorContext(after, "mcpserver: a tool failed", "tool", call.Tool, "err", err)
		res = errorResult("The tool failed. The error has been logged.")
		if errors.Is(err, store.ErrUnavailable) {
			// A built-in tool's store: each is idempotent, so trying
			// again is safe even when a write had committed.
			res = errorResult(builtinUnavailableText)
		}
	case res.IsError:
		ev.Outcome = OutcomeFailed
	default:
		ev.Outcome = OutcomeSucceeded
	}
	kind := KindExecuted
	status := store.ExecutionSucceeded
	switch ev.Outcome {
	case OutcomeFailed:
		kind, status = KindExecutionFailed, store.ExecutionFailed
	case OutcomeUnknown:
		// Reported, never run again.
		kind, status = KindOutcomeUnknown, store.ExecutionOutcomeUnknown
	}
	var stored json.RawMessage
	if key != "" && status != store.ExecutionOutcomeUnknown {
		// Encoded now: the result is the caller's once it is returned.
		if stored, err = json.Marshal(res); err != nil {
			s.log.ErrorContext(after, "mcpserver: a result does not encode; its outcome is recorded unknown", "tool", call.Tool, "err", err)
			status, stored = store.ExecutionOutcomeUnknown, nil
		}
	}
	if status == store.ExecutionOutcomeUnknown {
		s.unknown.Inc()
	}
	ev = s.stamp(ev, kind)
	after = s.outcomeContext(after)
	s.outcomes.write(after, key, func(ctx context.Context, lost func()) {
		s.recordOutcome(ctx, ev, status, stored, lost)
	})
	return res
}

// outcomeContext is ctx for writing how a call or a governed request
// ended: marked store.WriteNow when no other is in progress here. No start
// is then coming soon for the outcome to ride with (waiting for one would
// only put it in the next call's way), and a start that comes while it is
// written goes at once, chained on it.
func (s *Server) outcomeContext(ctx context.Context) context.Context {
	if s.calls.Load() == 1 {
		return store.WriteNow(ctx)
	}
	return ctx
}

// replayed answers a call whose idempotency key already has an execution:
// its recorded result, never a second run.
func (s *Server) replayed(rec store.Execution, call Call) *mcp.CallToolResult {
	if rec.Principal != call.Principal || rec.Tool != call.Tool || rec.ArgumentsHash != call.ArgumentsHash {
		return errorResult("This idempotency key was already used for a different call.")
	}
	switch rec.Status {
	case store.ExecutionSucceeded, store.ExecutionFailed:
		var res mcp.CallToolResult
		if err := json.Unmarshal(rec.Result, &res); err != nil {
			s.log.Error("mcpserver: a recorded result does not decode", "key", rec.IdempotencyKey, "err", err)
			return internalErrorResult()
		}
		return plainResult(&res)
	case store.ExecutionAwaitingInput:
		return errorResult("This call is waiting for its caller's input: retry it with the inputResponses and requestState of the result that asked for them.")
	case store.ExecutionStarted:
		if s.outcomes.lost(rec.IdempotencyKey) {
			// The record says started until outcome_unknown can be written.
			return errorResult(unrecordedOutcome)
		}
		return errorResult(fmt.Sprintf("This call started at %s and how it ended is not recorded yet: it may still be running, "+
			"or its process may have stopped, in which case it is reported as outcome unknown. "+
			"It will not be run again automatically; retry it later to get its outcome.", rec.StartedAt.UTC().Format(time.RFC3339)))
	default:
		return errorResult("An earlier attempt of this call stopped without a recorded outcome: it may or may not have taken effect, and it will not be run again automatically.")
	}
}

// unrecordedOutcome answers a retry of a call that ran but whose outcome
// this process could not record.
const unrecordedOutcome = "This call ran, but how it ended could not be recorded, so its outcome is unknown: " +
	"it may or may not have taken effect. It will not be run again automatically; check before calling again."

// plainResult is the result of a tool as Usher passes it on: its _meta,
// content, structured content and error flag, and nothing else. What the
// protocol adds around them (a request for input, the result type) is for
// the hop it came over, and the endpoint sets its own (see completeResult).
func plainResult(res *mcp.CallToolResult) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Meta: res.Meta, Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	return out
}

// canonicalArguments returns the canonical form of a call's arguments,
// which must be a JSON object (absent means {}), and its SHA-256.
func (s *Server) canonicalArguments(raw json.RawMessage) (json.RawMessage, string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{}`)
	}
	canon, err := s.opts.Canonicalize(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", errNotCanonical, err)
	}
	if len(canon) == 0 || canon[0] != '{' {
		return nil, "", errNotObject
	}
	// Two names that differ only in case are refused before the policy
	// sees them: the policy reads one, and a tool that matches names
	// case-insensitively (encoding/json) may read the other.
	first, second, found, err := jcs.FoldCollision(canon)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", errNotCanonical, err)
	}
	if found {
		return nil, "", argumentErrorf("the argument names %+.64q and %+.64q differ only in letter case (Unicode case folding); "+
			"a tool could read either, so they are refused. Send each name once.", first, second)
	}
	sum := sha256.Sum256(canon)
	return canon, hex.EncodeToString(sum[:]), nil
}

// Problems with arguments that the caller is told about.
var (
	errNotCanonical = errors.New("the arguments must be I-JSON (RFC 7493)")
	errNotObject    = errors.New("the arguments must be a JSON object")
)

// argumentProblem returns what the caller may read of an argument error:
// the validation messages of built-in tools are written for callers; the
// canonicalizer's are not.
func argumentProblem(err error) string {
	var ae argumentError
	switch {
	case errors.As(err, &ae):
		return ae.msg
	case errors.Is(err, errNotCanonical):
		return errNotCanonical.Error() + "."
	case errors.Is(err, errNotObject):
		return errNotObject.Error() + "."
	}
	return "they do not match the tool's input schema."
}

// idempotencyKey returns the call's idempotency key: the run and the tool
// call id, or else the client's own key scoped to the caller, or else none
// (the call then runs every time it is made). The parts are encoded as a
// JSON array, so no two different tuples give one key.
func idempotencyKey(c Caller, meta mcp.Meta) (key, toolCallID string, err error) {
	toolCallID, err = metaString(meta, MetaToolCallID)
	if err != nil {
		return "", "", err
	}
	clientKey, err := metaString(meta, MetaIdempotencyKey)
	if err != nil {
		return "", "", err
	}
	var parts []string
	switch {
	case c.RunID != "" && toolCallID != "":
		parts = []string{"run", c.RunID, toolCallID}
	case clientKey != "":
		parts = []string{"client", c.Subject, c.ClientID, clientKey}
	default:
		return "", toolCallID, nil
	}
	b, _ := json.Marshal(parts) // strings always encode
	return string(b), toolCallID, nil
}

// metaString reads an optional short string from _meta.
func metaString(meta mcp.Meta, key string) (string, error) {
	v, ok := meta[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok || len(s) > maxMetaValue || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("_meta[%q] must be a string of at most %d bytes without control characters", key, maxMetaValue)
	}
	return s, nil
}

// stamp returns ev as a record of kind, made now.
func (s *Server) stamp(ev Event, kind string) Event {
	ev.Kind, ev.At, ev.EventID = kind, s.opts.Now(), newEventID()
	return ev
}

// record appends an audit event and reports whether it was recorded.
func (s *Server) record(ctx context.Context, ev Event, kind string) bool {
	return s.recordErr(ctx, ev, kind) == nil
}

// recordOrFail appends an audit event: nil when it was recorded, else the
// result of a call that is not run for want of its record (failedResult).
func (s *Server) recordOrFail(ctx context.Context, ev Event, kind string) *mcp.CallToolResult {
	if err := s.recordErr(ctx, ev, kind); err != nil {
		return failedResult(err)
	}
	return nil
}

// recordErr appends an audit event: nil when it was recorded, else the
// failure, logged, for the answer to tell (failedResult, failedError)
// and never to quote.
func (s *Server) recordErr(ctx context.Context, ev Event, kind string) error {
	if err := s.opts.Auditor.Record(ctx, s.stamp(ev, kind)); err != nil {
		s.log.ErrorContext(ctx, "mcpserver: writing the audit log failed", "kind", kind, "tool", ev.Tool, "err", err)
		return err
	}
	return nil
}

// errorResult is a tool result reporting a problem the model can read.
func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// internalErrorResult is the result of a failure on Usher's side; the
// detail is in the log.
func internalErrorResult() *mcp.CallToolResult {
	return errorResult("The call could not be processed because of an error on the server. It has been logged; nothing was run.")
}

// outageText ends the answer to a request that failed because the
// database was out of reach (store.ErrUnavailable): the model, or the
// person, may try it again shortly.
const outageText = "Usher cannot reach its database just now. Try it again in a moment."

// unavailableText is the result of a call not run because the database
// was out of reach.
const unavailableText = "The call was not run: " + outageText

// inputUnavailableText is the result of a call whose upstream asked for
// input that was not passed on because the database was out of reach (its
// request, or the round's end, could not be recorded): the held call is
// cancelled, and a new call starts over.
const inputUnavailableText = "The tool could not go on: its request for input was not passed on, as Usher cannot reach its database just now. " +
	"Nothing more of this call runs. Call the tool again in a moment to start over."

// builtinUnavailableText is the result of a built-in tool that failed
// because the database was out of reach.
const builtinUnavailableText = "The tool failed: " + outageText

// failedResult is the result of a call that failed on Usher's side before
// anything ran, for err: unavailableText when the database was out of
// reach, else internalErrorResult.
func failedResult(err error) *mcp.CallToolResult {
	if errors.Is(err, store.ErrUnavailable) {
		return errorResult(unavailableText)
	}
	return internalErrorResult()
}

// deniedResult is the result of a denied call: a generic reason and the
// ids of the policies that denied it.
func deniedResult(v Verdict) *mcp.CallToolResult {
	text := "The policy denies this call."
	if len(v.PolicyIDs) > 0 {
		text += " Policies: " + strings.Join(v.PolicyIDs, ", ") + "."
	}
	return errorResult(text)
}

// truncate returns at most n bytes of s, cut at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

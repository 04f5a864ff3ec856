package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ApprovalStatus is the state of an approval request. A request starts
// pending; a human approves or denies it; an approved one is consumed by
// the one call it was granted for. Expired and revoked end it without a
// use.
type ApprovalStatus string

// The approval states. Only pending and approved are open: every other
// state is final.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalExpired  ApprovalStatus = "expired"
	ApprovalConsumed ApprovalStatus = "consumed"
	ApprovalRevoked  ApprovalStatus = "revoked"
)

// approvalStatuses lists every state, for listings that filter by none.
var approvalStatuses = []ApprovalStatus{
	ApprovalPending, ApprovalApproved, ApprovalDenied,
	ApprovalExpired, ApprovalConsumed, ApprovalRevoked,
}

// Valid reports whether s is one of the defined states.
func (s ApprovalStatus) Valid() bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalConsumed, ApprovalRevoked:
		return true
	}
	return false
}

// ApprovalBinding is the exact call an approval is for. A retried call
// matches an approval only when every field is equal.
type ApprovalBinding struct {
	Principal      string // who calls: the principal id, never an email
	Tool           string // the tool's name as Usher exposes it
	Server         string // the upstream server offering the tool; empty for built-ins
	DefinitionHash string // SHA-256 of the tool's canonical definition
	ArgumentsHash  string // SHA-256 of the call's canonical (RFC 8785) arguments
	PolicyHash     string // SHA-256 of the policy that asked for approval
	RunID          string // the run the call is made in; empty outside a run
	ClientID       string // the OAuth client making the call
}

// Approval is a request for a human decision about one exact tool call, and
// that decision.
type Approval struct {
	ID      string
	Binding ApprovalBinding
	// Tenant is the requester's tenant (empty for an issuer without
	// tenants): approver groups are groups of that tenant, and only their
	// members in it may see and decide the approval.
	Tenant string
	// Arguments are the call's canonical arguments, kept for display;
	// Binding.ArgumentsHash is what binds. Stored and returned byte for
	// byte.
	Arguments json.RawMessage
	PolicyIDs []string // the policies that asked for approval
	Reason    string   // why approval is needed, for the human deciding
	// Approvers are the groups whose members may decide; empty means the
	// requesting principal decides.
	Approvers []string
	// ToolCallID and IdempotencyKey name the call that asked, so that the
	// caller can retry it; they are not part of the binding.
	ToolCallID     string
	IdempotencyKey string

	Status         ApprovalStatus
	DecidedBy      string // the principal id of who decided
	DecisionReason string
	DecidedAt      time.Time // zero until decided
	ConsumedAt     time.Time // zero until consumed
	ExpiresAt      time.Time // after it, the approval can be neither decided nor consumed
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// approvalColumns is the column list every query returning an Approval
// selects, in the order the engines' scanners read it.
const approvalColumns = `id, principal, tool, server, definition_hash, arguments_hash, policy_hash,
	coalesce(run_id, ''), client_id,
	arguments, policy_ids, reason, approvers,
	coalesce(tool_call_id, ''), coalesce(idempotency_key, ''),
	status, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at,
	tenant`

// errKeyTaken rolls back a consumption whose execution's key is taken
// (see ConsumeApprovalAudited).
var errKeyTaken = errors.New("store: the idempotency key names an execution")

// checkNewApproval validates what CreateApproval takes from the caller;
// a has its CreatedAt set.
func checkNewApproval(a Approval) error {
	var errs []error
	if a.ID == "" {
		errs = append(errs, errors.New("approval ID is empty"))
	}
	errs = append(errs, checkBinding("approval", a.Binding))
	if a.Status != "" && a.Status != ApprovalPending {
		errs = append(errs, fmt.Errorf("a new approval is pending, not %q", a.Status))
	}
	if a.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("approval ExpiresAt is zero"))
	} else if !a.ExpiresAt.After(a.CreatedAt) {
		errs = append(errs, errors.New("approval expires before it is created"))
	}
	errs = append(errs,
		checkTime("approval CreatedAt", a.CreatedAt),
		checkTime("approval ExpiresAt", a.ExpiresAt),
		checkJSON("approval arguments", a.Arguments),
		checkNames("approval policy id", a.PolicyIDs),
		checkNames("approval approver", a.Approvers),
		checkText("approval reason", a.Reason),
		checkText("approval tenant", a.Tenant),
		checkText("approval tool call id", a.ToolCallID),
		checkText("approval idempotency key", a.IdempotencyKey),
	)
	return invalid(errs...)
}

// checkBinding validates a binding; only Server, RunID and ClientID may be
// empty.
func checkBinding(what string, b ApprovalBinding) error {
	var errs []error
	fields := []struct {
		name, value string
		required    bool
	}{
		{"principal", b.Principal, true},
		{"tool", b.Tool, true},
		{"server", b.Server, false},
		{"definition hash", b.DefinitionHash, true},
		{"arguments hash", b.ArgumentsHash, true},
		{"policy hash", b.PolicyHash, true},
		{"run id", b.RunID, false},
		{"client id", b.ClientID, false},
	}
	for _, f := range fields {
		if f.required && f.value == "" {
			errs = append(errs, fmt.Errorf("%s %s is empty", what, f.name))
		}
		errs = append(errs, checkText(what+" "+f.name, f.value))
	}
	return errors.Join(errs...)
}

// checkDecision validates a decision of DecideApproval.
func checkDecision(to ApprovalStatus, decidedBy, reason string, now time.Time) error {
	var errs []error
	if to != ApprovalApproved && to != ApprovalDenied {
		errs = append(errs, fmt.Errorf("an approval is decided approved or denied, not %q", to))
	}
	if decidedBy == "" {
		errs = append(errs, errors.New("approval decider is empty"))
	}
	errs = append(errs,
		checkText("approval decider", decidedBy),
		checkText("approval decision reason", reason),
		checkNow(now))
	return invalid(errs...)
}

// checkStatuses validates the states a listing filters by.
func checkStatuses(statuses []ApprovalStatus) error {
	var errs []error
	for _, s := range statuses {
		if !s.Valid() {
			errs = append(errs, fmt.Errorf("approval status %q is unknown", s))
		}
	}
	return invalid(errs...)
}

// statusFilter returns the states a listing selects: statuses, or every
// state for none.
func statusFilter(statuses []ApprovalStatus) []string {
	if len(statuses) == 0 {
		statuses = approvalStatuses
	}
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// checkRevoke validates a revocation of RevokeApprovals.
func checkRevoke(tool, keepDefinitionHash string, now time.Time) error {
	var errs []error
	if tool == "" {
		errs = append(errs, errors.New("the tool to revoke approvals of is empty"))
	}
	if keepDefinitionHash == "" {
		errs = append(errs, errors.New("the definition hash to keep is empty"))
	}
	errs = append(errs, checkNow(now))
	return invalid(errs...)
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ApprovalStatus is the state of an approval request. A request starts
// pending; a human approves or denies it; an approved one is consumed by
// the one call it was granted for. Expired, revoked and withdrawn (the
// turn that asked was stopped, or its run closed or deleted) end it
// without a use.
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
	// ApprovalWithdrawn: the person stopped the turn that asked for it,
	// or the run was completed, cancelled, failed or deleted.
	ApprovalWithdrawn ApprovalStatus = "withdrawn"
)

// approvalStatuses lists every state, for listings that filter by none.
var approvalStatuses = []ApprovalStatus{
	ApprovalPending, ApprovalApproved, ApprovalDenied,
	ApprovalExpired, ApprovalConsumed, ApprovalRevoked, ApprovalWithdrawn,
}

// Valid reports whether s is one of the defined states.
func (s ApprovalStatus) Valid() bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalConsumed, ApprovalRevoked, ApprovalWithdrawn:
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

// EndedAt is when a stopped being pending: when it was decided, or else
// when it expired or was revoked (its last update). Zero while pending.
// The list of decided approvals is in this order.
func (a Approval) EndedAt() time.Time {
	switch {
	case a.Status == ApprovalPending:
		return time.Time{}
	case !a.DecidedAt.IsZero():
		return a.DecidedAt
	}
	return a.UpdatedAt
}

// DecideApprovalParams is what DecideApprovalAudited takes: the decision
// of the approval ID.
type DecideApprovalParams struct {
	ID string
	// To is approved or denied.
	To ApprovalStatus
	// DecidedBy is the principal id of who decides; Reason, why.
	DecidedBy string
	Reason    string
	// Now is when; an approval expired at Now cannot be decided.
	Now time.Time
}

// ConsumeApprovalParams is what ConsumeApprovalAudited takes: the use of
// the approval ID by the call Binding, at Now.
type ConsumeApprovalParams struct {
	ID      string
	Binding ApprovalBinding
	Now     time.Time
	// Execution, when not nil, is started with the use (its StartedAt,
	// when zero, is Now).
	Execution *Execution
}

// MaxDecidedApprovals bounds one page of ListDecidedApprovals.
const MaxDecidedApprovals = 100

// DecidedApprovals asks ListDecidedApprovals for a page of the decided
// approvals someone may see.
type DecidedApprovals struct {
	// Principal is the requester whose approvals are listed; required.
	Principal string
	// Tenant and Groups add the approvals of that tenant that name one of
	// the groups among their approvers (none without groups).
	Tenant string
	Groups []string
	// After is where the page starts: after the approval it names. The
	// zero cursor starts from the newest.
	After ApprovalCursor
	// Limit is the page's size: 1 to MaxDecidedApprovals.
	Limit int
}

// ApprovalCursor is a place in the list of decided approvals: the EndedAt
// and ID of the last approval of a page. Once an approval is no longer
// pending its EndedAt does not change, so a cursor stays valid.
type ApprovalCursor struct {
	EndedAt time.Time
	ID      string
}

// IsZero reports whether c is the start of the list.
func (c ApprovalCursor) IsZero() bool { return c.EndedAt.IsZero() && c.ID == "" }

// MaxTenantApprovals bounds one page of ListTenantApprovals.
const MaxTenantApprovals = 100

// TenantApprovals asks ListTenantApprovals for a page of every approval of
// one tenant, in any state, as a security reviewer reads them.
type TenantApprovals struct {
	// Tenant is the requesters' tenant (Approval.Tenant), and Scope the
	// start of their principal ids ("issuer|tenant|"): an approval is of
	// the tenant when both match. Scope is required.
	Tenant, Scope string
	// Status, Tool and Principal, when set, keep only the approvals in
	// that stored state, bound to that name (Binding.Tool) and requested
	// by that principal.
	Status    ApprovalStatus
	Tool      string
	Principal string
	// After is where the page starts: after the approval it names, whose
	// creation time its EndedAt holds (see CreatedCursorOf). The zero
	// cursor starts from the newest.
	After ApprovalCursor
	// Limit is the page's size: 1 to MaxTenantApprovals.
	Limit int
}

// CreatedCursorOf is the cursor just after a in the list of a tenant's
// approvals (ListTenantApprovals), which is by creation time.
func CreatedCursorOf(a Approval) ApprovalCursor {
	return ApprovalCursor{EndedAt: a.CreatedAt, ID: a.ID}
}

// CursorOf is the cursor just after a in the list of decided approvals.
func CursorOf(a Approval) ApprovalCursor { return ApprovalCursor{EndedAt: a.EndedAt(), ID: a.ID} }

// listStart stands for the zero cursor: after every time an approval ends.
var listStart = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// checkDecidedQuery validates a query of ListDecidedApprovals.
func checkDecidedQuery(q DecidedApprovals) error {
	var errs []error
	if q.Principal == "" {
		errs = append(errs, errors.New("the principal of the decided approvals is empty"))
	}
	if q.Limit < 1 || q.Limit > MaxDecidedApprovals {
		errs = append(errs, fmt.Errorf("the limit of decided approvals is %d, want 1 to %d", q.Limit, MaxDecidedApprovals))
	}
	if !q.After.IsZero() {
		if q.After.ID == "" {
			errs = append(errs, errors.New("the cursor has a time and no id"))
		}
		errs = append(errs, checkTime("the cursor's time", q.After.EndedAt))
		if !q.After.EndedAt.Before(listStart) {
			errs = append(errs, errors.New("the cursor's time is out of range"))
		}
	}
	errs = append(errs,
		checkText("the principal of the decided approvals", q.Principal),
		checkText("the tenant of the decided approvals", q.Tenant),
		checkText("the cursor's id", q.After.ID))
	return invalid(errs...)
}

// approvalColumns is the column list every query returning an Approval
// selects, in the order scanApproval reads it.
const approvalColumns = `id, principal, tool, server, definition_hash, arguments_hash, policy_hash,
	coalesce(run_id, ''), client_id,
	arguments, policy_ids, reason, approvers,
	coalesce(tool_call_id, ''), coalesce(idempotency_key, ''),
	status, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at,
	tenant`

// errKeyTaken rolls back a consumption whose execution's key is taken
// (see ConsumeApprovalAudited).
var errKeyTaken = errors.New("store: the idempotency key names an execution")

// checkNewApproval validates what CreateApprovalAudited takes from the caller;
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

// checkDecision validates a decision of DecideApprovalAudited.
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

// checkRevoke validates a revocation of RevokeApprovalsAudited.
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

// approvalBindingMatch selects the approvals bound to exactly the call
// whose binding is $1 to $8 (see bindingArgs). run_id is NULL outside a
// run, and IS NOT DISTINCT FROM compares NULL as equal to NULL.
const approvalBindingMatch = `principal = $1 AND tool = $2 AND server = $3 AND definition_hash = $4
	AND arguments_hash = $5 AND policy_hash = $6 AND run_id IS NOT DISTINCT FROM $7 AND client_id = $8`

// afterCursor selects the approvals after the cursor ($4, $5) in the
// list of decided approvals.
const afterCursor = `(coalesce(decided_at, updated_at) < $4 OR (coalesce(decided_at, updated_at) = $4 AND id < $5))`

var (
	// expireStalePending retires an identical pending approval whose time
	// has passed ($9 is now), so that a new request can take its place in
	// the unique pending index.
	expireStalePending = sql1(`
UPDATE approvals SET status = 'expired', updated_at = $9
WHERE status = 'pending' AND expires_at <= $9 AND ` + approvalBindingMatch)

	// insertApproval inserts a pending approval unless an identical one is
	// pending; the conflict target is approvals_pending_binding_key. On
	// PostgreSQL a concurrent identical insert makes it wait for that
	// transaction, then do nothing.
	insertApproval = sql1(`
INSERT INTO approvals (principal, tool, server, definition_hash, arguments_hash, policy_hash, run_id, client_id,
	id, arguments, policy_ids, reason, approvers, tool_call_id, idempotency_key,
	status, expires_at, created_at, updated_at, tenant)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'pending', $16, $17, $17, $18)
ON CONFLICT (principal, tool, server, definition_hash, arguments_hash, policy_hash, coalesce(run_id, ''), client_id)
	WHERE status = 'pending' DO NOTHING
RETURNING ` + approvalColumns)

	// reportDenial marks the newest identical approval denied, unexpired
	// and not yet reported as reported, and returns it: the denial a
	// retry of the call is told of, once. Of concurrent retries on
	// PostgreSQL, the first takes the row lock; the others re-check
	// denial_reported_at after it commits and find none.
	reportDenial = sql1(`
UPDATE approvals SET denial_reported_at = $9
WHERE denial_reported_at IS NULL AND id = (SELECT id FROM approvals
	WHERE status = 'denied' AND denial_reported_at IS NULL AND expires_at > $9 AND ` + approvalBindingMatch + `
	ORDER BY decided_at DESC, id DESC LIMIT 1)
RETURNING ` + approvalColumns)

	findPendingApproval = sql1(`SELECT ` + approvalColumns + ` FROM approvals WHERE status = 'pending' AND ` + approvalBindingMatch)

	getApproval = sql1(`SELECT ` + approvalColumns + ` FROM approvals WHERE id = $1`)

	approvalExists = sql1(`SELECT EXISTS (SELECT 1 FROM approvals WHERE id = $1)`)

	// listApprovals takes the states as a JSON array ($2). The engines
	// name the function that reads one differently.
	listApprovals = perEngine(`
SELECT `+approvalColumns+` FROM approvals
WHERE principal = $1 AND status IN (SELECT value FROM json_array_elements_text($2::json))
ORDER BY created_at, id`, `
SELECT `+approvalColumns+` FROM approvals
WHERE principal = $1 AND status IN (SELECT value FROM json_each($2))
ORDER BY created_at, id`)

	// listApprovalsForApprovers takes the groups ($1) and the states ($2)
	// as JSON arrays, and the tenant ($3).
	listApprovalsForApprovers = perEngine(`
SELECT `+approvalColumns+` FROM approvals
WHERE status IN (SELECT value FROM json_array_elements_text($2::json)) AND tenant = $3
	AND EXISTS (SELECT 1 FROM json_array_elements_text(approvers) AS g(name)
		WHERE g.name IN (SELECT value FROM json_array_elements_text($1::json)))
ORDER BY created_at, id`, `
SELECT `+approvalColumns+` FROM approvals
WHERE status IN (SELECT value FROM json_each($2)) AND tenant = $3
	AND EXISTS (SELECT 1 FROM json_each(approvals.approvers) AS g
		WHERE g.value IN (SELECT value FROM json_each($1)))
ORDER BY created_at, id`)

	// listDecidedApprovals takes the principal ($1), the groups as a
	// JSON array ($2), the tenant ($3), the cursor ($4, $5) and the limit
	// ($6). Each half reads its own index (approvals_*_ended_idx, whose
	// key and predicate it repeats) up to the limit; the page is the
	// newest of both.
	listDecidedApprovals = perEngine(decidedApprovals(`json_array_elements_text(approvers) AS g(name)
				WHERE g.name IN (SELECT value FROM json_array_elements_text($2::json))`),
		decidedApprovals(`json_each(approvals.approvers) AS g
				WHERE g.value IN (SELECT value FROM json_each($2))`))

	// listTenantApprovals takes the tenant ($1), the principals' prefix
	// ($2), the state, tool and principal filters ("" for none: $3, $4,
	// $5), the cursor ($6, $7) and the limit ($8). It reads
	// approvals_tenant_created_idx (migration 00023) in its order.
	listTenantApprovals = sql1(`
SELECT ` + approvalColumns + ` FROM approvals
WHERE tenant = $1 AND substr(principal, 1, length($2::text)) = $2::text
	AND ($3::text = '' OR status = $3::text) AND ($4::text = '' OR tool = $4::text) AND ($5::text = '' OR principal = $5::text)
	AND (created_at < $6 OR (created_at = $6 AND id < $7))
ORDER BY created_at DESC, id DESC LIMIT $8`)

	// setApprovalDecision is the compare-and-swap of a decision.
	setApprovalDecision = sql1(`
UPDATE approvals SET status = $2, decided_by = $3, decision_reason = $4, decided_at = $5, updated_at = $5
WHERE id = $1 AND status = 'pending' AND expires_at > $5
RETURNING ` + approvalColumns)

	findApprovedApproval = sql1(`
SELECT ` + approvalColumns + ` FROM approvals
WHERE status = 'approved' AND expires_at > $9 AND ` + approvalBindingMatch + `
ORDER BY decided_at, id
LIMIT 1`)

	// useApproval is the single use of an approval: one update that checks
	// the state, the deadline and every field of the binding. Of
	// concurrent consumers on PostgreSQL, the first takes the row lock; the
	// others re-check the state after it commits and find it consumed.
	useApproval = sql1(`
UPDATE approvals SET status = 'consumed', consumed_at = $9, updated_at = $9
WHERE id = $10 AND status = 'approved' AND expires_at > $9 AND ` + approvalBindingMatch + `
RETURNING ` + approvalColumns)

	// releaseApproval gives back the use of an approval whose call's round
	// ended asking for input (see AwaitInputAudited): the round that
	// completes the call uses it up.
	releaseApproval = sql1(`
UPDATE approvals SET status = 'approved', consumed_at = NULL, updated_at = $2
WHERE id = $1 AND status = 'consumed'
RETURNING ` + approvalColumns)

	revokeChangedApprovals = sql1(`
UPDATE approvals SET status = 'revoked', updated_at = $3
WHERE tool = $1 AND definition_hash <> $2 AND status IN ('pending', 'approved')`)

	// withdrawRunApprovals withdraws the open approvals of the run $1, as
	// decided by $2 (the run's owner) for the reason $3 at $4.
	withdrawRunApprovals = sql1(`
UPDATE approvals SET status = 'withdrawn', decided_by = $2, decision_reason = $3, decided_at = $4, updated_at = $4
WHERE run_id = $1 AND status IN ('pending', 'approved')
RETURNING ` + approvalColumns)

	expireOpenApprovals = sql1(`
UPDATE approvals SET status = 'expired', updated_at = $1
WHERE status IN ('pending', 'approved') AND expires_at <= $1`)
)

// bindingArgs are the statement arguments of a binding, in the order of
// approvalBindingMatch, followed by more.
func bindingArgs(b ApprovalBinding, more ...any) []any {
	return append([]any{b.Principal, b.Tool, b.Server, b.DefinitionHash, b.ArgumentsHash, b.PolicyHash,
		nullString(b.RunID), b.ClientID}, more...)
}

// createApprovalAttempts bounds CreateApprovalAudited's attempts: on PostgreSQL
// an identical pending approval may be decided between the insert that it
// blocked and the read that looks for it.
const createApprovalAttempts = 3

// errPendingGone ends an attempt of CreateApprovalAudited whose insert an
// identical pending approval blocked, and which then found none pending.
var errPendingGone = errors.New("store: the identical pending approval was decided meanwhile")

// CreateApprovalAudited: the insert, which may wait for a concurrent
// identical one, comes before the audit lock.
func (c *core) CreateApprovalAudited(ctx context.Context, a Approval, build func(AuditHead) (AuditRecord, error)) (Approval, bool, error) {
	if a.CreatedAt.IsZero() {
		a.CreatedAt = c.now()
	}
	if err := checkNewApproval(a); err != nil {
		return Approval{}, false, err
	}
	for range createApprovalAttempts {
		var out Approval
		var created bool
		err := c.inTx(ctx, func(tx executor) (err error) {
			if out, created, err = createApproval(ctx, tx, a); err != nil || !created || build == nil {
				return err
			}
			_, err = appendAuditTx(ctx, tx, build)
			return err
		})
		if errors.Is(err, errPendingGone) {
			continue
		}
		if err != nil {
			return Approval{}, false, c.fail(err)
		}
		return out, created, nil
	}
	return Approval{}, false, ErrConflict
}

// createApproval creates a, first expiring an identical pending approval
// whose time has passed, or finds the identical pending one (created
// false); errPendingGone when that one is no longer pending. Outside a
// run, an identical denial not yet reported comes first: it is marked
// reported and returned (created false).
func createApproval(ctx context.Context, x executor, a Approval) (_ Approval, created bool, _ error) {
	now := storedTime(a.CreatedAt)
	if _, err := x.exec(ctx, expireStalePending, bindingArgs(a.Binding, now)...); err != nil {
		return Approval{}, false, err
	}
	if a.Binding.RunID == "" {
		denied, err := scanApproval(x.row(ctx, reportDenial, bindingArgs(a.Binding, now)...))
		if err == nil {
			return denied, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Approval{}, false, err
		}
	}
	out, err := scanApproval(x.row(ctx, insertApproval, bindingArgs(a.Binding,
		a.ID, string(jsonOr(a.Arguments, "{}")), string(encodeNames(a.PolicyIDs)), a.Reason,
		string(encodeNames(a.Approvers)), nullString(a.ToolCallID), nullString(a.IdempotencyKey),
		storedTime(a.ExpiresAt), now, a.Tenant)...))
	if err == nil {
		x.notify(approvalNotification(out))
		return out, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Approval{}, false, err
	}
	// An identical approval is pending. SQLite's writer holds the database,
	// so it still is; PostgreSQL's read committed statement sees the one
	// whose insert blocked this one, unless it was decided meanwhile.
	out, err = scanApproval(x.row(ctx, findPendingApproval, bindingArgs(a.Binding)...))
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, false, errPendingGone
	}
	return out, false, err
}

func (c *core) GetApproval(ctx context.Context, id string) (Approval, error) {
	a, err := scanApproval(c.reader().row(ctx, getApproval, id))
	if err != nil {
		return Approval{}, c.fail(err)
	}
	return a, nil
}

func (c *core) ListApprovals(ctx context.Context, principal string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, c.reader(), listApprovals, scanApproval,
		principal, string(encodeNames(statusFilter(status))))
	return out, c.fail(err)
}

func (c *core) ListApprovalsForApprovers(ctx context.Context, tenant string, groups []string, status ...ApprovalStatus) ([]Approval, error) {
	if err := checkStatuses(status); err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return nil, nil
	}
	out, err := queryAll(ctx, c.reader(), listApprovalsForApprovers, scanApproval,
		string(encodeNames(groups)), string(encodeNames(statusFilter(status))), tenant)
	return out, c.fail(err)
}

func (c *core) ListDecidedApprovals(ctx context.Context, q DecidedApprovals) ([]Approval, error) {
	if err := checkDecidedQuery(q); err != nil {
		return nil, err
	}
	after := q.After
	if after.IsZero() {
		after.EndedAt = listStart
	}
	out, err := queryAll(ctx, c.reader(), listDecidedApprovals, scanApproval,
		q.Principal, string(encodeNames(q.Groups)), q.Tenant, storedTime(after.EndedAt), after.ID, int64(q.Limit))
	return out, c.fail(err)
}

func (c *core) ListTenantApprovals(ctx context.Context, q TenantApprovals) ([]Approval, error) {
	var errs []error
	if q.Scope == "" {
		errs = append(errs, errors.New("the scope of the tenant's approvals is empty"))
	}
	if q.Limit < 1 || q.Limit > MaxTenantApprovals {
		errs = append(errs, fmt.Errorf("the limit of the tenant's approvals is %d, want 1 to %d", q.Limit, MaxTenantApprovals))
	}
	if q.Status != "" {
		errs = append(errs, checkStatuses([]ApprovalStatus{q.Status}))
	}
	if !q.After.IsZero() {
		errs = append(errs, checkTime("the cursor's time", q.After.EndedAt))
	}
	for name, v := range map[string]string{"tenant": q.Tenant, "scope": q.Scope, "tool": q.Tool, "principal": q.Principal, "cursor's id": q.After.ID} {
		errs = append(errs, checkText("the "+name+" of the tenant's approvals", v))
	}
	if err := invalid(errs...); err != nil {
		return nil, err
	}
	after := q.After
	if after.IsZero() {
		after.EndedAt = listStart
	}
	out, err := queryAll(ctx, c.reader(), listTenantApprovals, scanApproval,
		q.Tenant, q.Scope, string(q.Status), q.Tool, q.Principal, storedTime(after.EndedAt), after.ID, int64(q.Limit))
	return out, c.fail(err)
}

func (c *core) DecideApprovalAudited(ctx context.Context, p DecideApprovalParams, build func(AuditHead) (AuditRecord, error)) (Approval, error) {
	id, to, decidedBy, reason, now := p.ID, p.To, p.DecidedBy, p.Reason, p.Now
	if err := checkDecision(to, decidedBy, reason, now); err != nil {
		return Approval{}, err
	}
	var out Approval
	err := c.writeAudited(ctx, build, func(x executor) (err error) {
		out, err = decideApproval(ctx, x, id, to, decidedBy, reason, now)
		return err
	})
	if err != nil {
		return Approval{}, c.fail(err)
	}
	return out, nil
}

// decideApproval moves the pending approval id to to: ErrNotFound or
// ErrConflict as DecideApprovalAudited says.
func decideApproval(ctx context.Context, x executor, id string, to ApprovalStatus, decidedBy, reason string, now time.Time) (Approval, error) {
	return swapApproval(ctx, x, id, setApprovalDecision, id, to, decidedBy, reason, storedTime(now))
}

// swapApproval runs s, a compare-and-swap of the approval id returning
// it, with args: ErrNotFound when the approval does not exist,
// ErrConflict when it was not in the state s expects.
func swapApproval(ctx context.Context, x executor, id string, s stmt, args ...any) (Approval, error) {
	a, err := scanApproval(x.row(ctx, s, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, missingOrConflict(ctx, x, approvalExists, id)
	}
	if err != nil {
		return Approval{}, err
	}
	x.notify(approvalNotification(a))
	return a, nil
}

func (c *core) FindApproved(ctx context.Context, b ApprovalBinding, now time.Time) (Approval, error) {
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, err
	}
	a, err := scanApproval(c.reader().row(ctx, findApprovedApproval, bindingArgs(b, storedTime(now))...))
	if err != nil {
		return Approval{}, c.fail(err)
	}
	return a, nil
}

// ConsumeApprovalAudited: the consumption and the execution's insert,
// which may wait for row locks, come before the audit lock.
func (c *core) ConsumeApprovalAudited(ctx context.Context, p ConsumeApprovalParams, build func(AuditHead) (AuditRecord, error)) (Approval, Execution, bool, error) {
	id, b, now, e := p.ID, p.Binding, p.Now, p.Execution
	if err := invalid(checkBinding("binding", b), checkNow(now)); err != nil {
		return Approval{}, Execution{}, false, err
	}
	if e != nil {
		if e.StartedAt.IsZero() {
			e.StartedAt = now
		}
		if err := checkNewExecution(*e); err != nil {
			return Approval{}, Execution{}, false, err
		}
	}
	var out Approval
	var exec Execution
	consume := func(x executor) (err error) {
		if out, err = consumeApproval(ctx, x, id, b, now); err != nil || e == nil {
			return err
		}
		var started bool
		if exec, started, err = beginExecution(ctx, x, *e); err == nil && !started {
			err = errKeyTaken
		}
		return err
	}
	var err error
	if e == nil {
		err = c.writeAudited(ctx, build, consume)
	} else {
		err = c.inTx(ctx, withAudit(ctx, consume, build))
	}
	if errors.Is(err, errKeyTaken) {
		return Approval{}, exec, false, nil
	}
	if err != nil {
		return Approval{}, Execution{}, false, c.fail(err)
	}
	return out, exec, e != nil, nil
}

// consumeApproval uses the approval id, bound to b: ErrNotFound or
// ErrConflict as ConsumeApprovalAudited says.
func consumeApproval(ctx context.Context, x executor, id string, b ApprovalBinding, now time.Time) (Approval, error) {
	return swapApproval(ctx, x, id, useApproval, bindingArgs(b, storedTime(now), id)...)
}

// RevokeApprovalsAudited: the record says how many were revoked, which only the update knows: it is appended
// after it, in its transaction.
func (c *core) RevokeApprovalsAudited(ctx context.Context, tool, keepDefinitionHash string, now time.Time, build func(int) func(AuditHead) (AuditRecord, error)) (int, error) {
	if err := checkRevoke(tool, keepDefinitionHash, now); err != nil {
		return 0, err
	}
	var n int
	revoke := func(x executor) (err error) {
		n, err = revokeApprovals(ctx, x, tool, keepDefinitionHash, now)
		return err
	}
	var err error
	if build == nil {
		err = c.writeOne(ctx, revoke)
	} else {
		err = c.inTx(ctx, func(tx executor) error {
			if err := revoke(tx); err != nil || n == 0 {
				return err
			}
			_, err := appendAuditTx(ctx, tx, build(n))
			return err
		})
	}
	if err != nil {
		return 0, c.fail(err)
	}
	return n, nil
}

// revokeApprovals revokes the open approvals of tool whose definition
// hash is not keepDefinitionHash, and returns how many.
func revokeApprovals(ctx context.Context, x executor, tool, keepDefinitionHash string, now time.Time) (int, error) {
	n, err := x.exec(ctx, revokeChangedApprovals, tool, keepDefinitionHash, storedTime(now))
	if err == nil && n > 0 {
		// Many approvals of many people: everyone looks again.
		x.notify(Notification{Kind: NotifyApproval})
	}
	return int(n), err
}

func (c *core) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	var n int
	err := c.writeOne(ctx, func(x executor) (err error) {
		n, err = expireApprovals(ctx, x, now)
		return err
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return n, nil
}

// expireApprovals expires the open approvals whose time has passed at
// now, and returns how many.
func expireApprovals(ctx context.Context, x executor, now time.Time) (int, error) {
	n, err := x.exec(ctx, expireOpenApprovals, storedTime(now))
	if err == nil && n > 0 {
		// Many approvals of many people: everyone looks again.
		x.notify(Notification{Kind: NotifyApproval})
	}
	return int(n), err
}

// Withdrawal is how StopTurn, CloseRun and DeleteRun withdraw the open
// approvals (pending, or approved and unused) of the run whose turn they
// stop or which they close: none of them can be decided or used after.
type Withdrawal struct {
	// Reason is their decision reason.
	Reason string
	// Audit returns the audit record of a's withdrawal, appended in the
	// stop's (or close's) transaction; nil records none.
	Audit func(a Approval) (func(AuditHead) (AuditRecord, error), error)
}

// withdrawApprovals withdraws the open approvals of the run r, whose row
// lock tx holds, as w says, each with its audit record.
func withdrawApprovals(ctx context.Context, tx executor, r Run, w Withdrawal, now time.Time) error {
	list, err := queryAll(ctx, tx, withdrawRunApprovals, scanApproval, r.ID, r.Owner, w.Reason, storedTime(now))
	if err != nil {
		return err
	}
	for _, a := range list {
		tx.notify(approvalNotification(a))
		if err := appendAuditOf(ctx, tx, a, w.Audit); err != nil {
			return err
		}
	}
	return nil
}

// approvalNotification tells live-update subscribers that a changed:
// its owner's views, and its run's.
func approvalNotification(a Approval) Notification {
	return Notification{Kind: NotifyApproval, ApprovalID: a.ID, Owner: a.Binding.Principal, RunID: a.Binding.RunID}
}

// scanApproval reads one row of approvalColumns, on either engine.
func scanApproval(row rowScanner) (Approval, error) {
	var a Approval
	var arguments, policyIDs, approvers []byte
	var status string
	b := &a.Binding
	err := row.Scan(&a.ID, &b.Principal, &b.Tool, &b.Server, &b.DefinitionHash, &b.ArgumentsHash, &b.PolicyHash,
		&b.RunID, &b.ClientID,
		&arguments, &policyIDs, &a.Reason, &approvers,
		&a.ToolCallID, &a.IdempotencyKey,
		&status, &a.DecidedBy, &a.DecisionReason, at(&a.DecidedAt), at(&a.ConsumedAt),
		at(&a.ExpiresAt), at(&a.CreatedAt), at(&a.UpdatedAt),
		&a.Tenant)
	if err != nil {
		return Approval{}, err
	}
	a.Arguments = arguments
	a.Status = ApprovalStatus(status)
	if a.PolicyIDs, err = decodeNames("approvals.policy_ids", policyIDs); err != nil {
		return Approval{}, err
	}
	if a.Approvers, err = decodeNames("approvals.approvers", approvers); err != nil {
		return Approval{}, err
	}
	return a, nil
}

// decidedApprovals is listDecidedApprovals with member, the engine's
// clause that finds one of the approval's approver groups among $2.
func decidedApprovals(member string) string {
	return `
SELECT ` + approvalColumns + ` FROM approvals
WHERE id IN (
	SELECT id FROM (
		SELECT id FROM approvals
		WHERE principal = $1 AND status <> 'pending' AND ` + afterCursor + `
		ORDER BY coalesce(decided_at, updated_at) DESC, id DESC LIMIT $6) AS mine
	UNION
	SELECT id FROM (
		SELECT id FROM approvals
		WHERE tenant = $3 AND status <> 'pending' AND ` + afterCursor + `
			AND EXISTS (SELECT 1 FROM ` + member + `)
		ORDER BY coalesce(decided_at, updated_at) DESC, id DESC LIMIT $6) AS theirs)
ORDER BY coalesce(decided_at, updated_at) DESC, id DESC LIMIT $6`
}

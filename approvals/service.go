package approvals

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// Binding is the exact call an approval is for; see store.ApprovalBinding.
// Every field must match for an approval to be consumed.
type Binding = store.ApprovalBinding

// Approval is an approval request and its decision, as stored.
type Approval = store.Approval

// Errors the service returns; callers branch with errors.Is.
var (
	// ErrNotFound: no such approval, or one the caller may not see.
	ErrNotFound = errors.New("approvals: not found")
	// ErrForbidden: the caller may see the approval but not make this
	// decision (the requester approving where approver groups decide).
	ErrForbidden = errors.New("approvals: not allowed to decide")
	// ErrDecided: the approval is no longer pending.
	ErrDecided = errors.New("approvals: already decided")
	// ErrExpired: the approval expired before it was decided.
	ErrExpired = errors.New("approvals: expired")
	// ErrWithdrawn: the turn that asked for the approval was stopped, or
	// its run closed or deleted; it can no longer be decided. It wraps
	// ErrDecided.
	ErrWithdrawn = fmt.Errorf("%w: withdrawn", ErrDecided)
	// ErrNotApproved: no approved, unexpired, unused approval matches the
	// call.
	ErrNotApproved = errors.New("approvals: no approval for this call")
	// ErrInvalid: the request is malformed (a missing binding field,
	// arguments that are not JSON, a reason too long).
	ErrInvalid = errors.New("approvals: invalid request")
)

// MaxReasonRunes bounds a decision's reason.
const MaxReasonRunes = 2000

// DefaultTTL is how long an approval stays open by default.
const DefaultTTL = 24 * time.Hour

// consumeAttempts bounds Consume's retries: another consumer may take the
// approval it found, and a second approved one may match.
const consumeAttempts = 3

// Store is the part of store.Store the service uses.
type Store interface {
	GetApproval(ctx context.Context, id string) (store.Approval, error)
	ListApprovals(ctx context.Context, principal string, status ...store.ApprovalStatus) ([]store.Approval, error)
	ListApprovalsForApprovers(ctx context.Context, tenant string, groups []string, status ...store.ApprovalStatus) ([]store.Approval, error)
	ListDecidedApprovals(ctx context.Context, q store.DecidedApprovals) ([]store.Approval, error)
	ListTenantApprovals(ctx context.Context, q store.TenantApprovals) ([]store.Approval, error)
	CreateApprovalAudited(ctx context.Context, a store.Approval, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, bool, error)
	DecideApprovalAudited(ctx context.Context, p store.DecideApprovalParams, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, error)
	FindApproved(ctx context.Context, b store.ApprovalBinding, now time.Time) (store.Approval, error)
	GetExecution(ctx context.Context, idempotencyKey string) (store.Execution, error)
	ConsumeApprovalAudited(ctx context.Context, p store.ConsumeApprovalParams, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, store.Execution, bool, error)
	RevokeApprovalsAudited(ctx context.Context, tool, keepDefinitionHash string, now time.Time, build func(revoked int) func(store.AuditHead) (store.AuditRecord, error)) (int, error)
	ExpireApprovals(ctx context.Context, now time.Time) (int, error)
}

// Options configures New. A nil *Options means every default.
type Options struct {
	// TTL is how long a request stays open, to be decided and then
	// consumed. Default: DefaultTTL (24 h).
	TTL time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// PublicURL is the external base URL of Usher, such as
	// https://usher.example.com; URL builds the links to approvals under
	// it. Default: empty, which makes links relative ("/approvals/<id>").
	PublicURL string
	// Audit receives every request, decision and revocation. Default:
	// nil, no audit.
	Audit *audit.Log
	// Logger receives what the handlers cannot tell clients. Default:
	// discard.
	Logger *slog.Logger
	// Decided, when set, is called after every decision is recorded, with
	// the decided approval: the assistant requeues the run that waits for
	// it. Default: nil.
	Decided func(ctx context.Context, a Approval)
	// IsReviewer reports whether a signed-in person is a security
	// reviewer (review.API.IsReviewer), who lists every approval of their
	// tenant with GET /api/approvals?scope=all. Default: nil, nobody is.
	IsReviewer func(identity.Principal) bool
}

// Service records approval requests, decides and consumes them.
type Service struct {
	st        Store
	ttl       time.Duration
	now       func() time.Time
	publicURL string
	audit     *audit.Log
	log       *slog.Logger
	decided   func(ctx context.Context, a Approval)
	// isReviewer is Options.IsReviewer.
	isReviewer func(identity.Principal) bool
}

// New returns a Service on st, or one error naming every problem of opts.
func New(st Store, opts *Options) (*Service, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var errs []error
	if st == nil {
		errs = append(errs, errors.New("a store is required"))
	}
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL is %v, want 0 (the default) or more", o.TTL))
	}
	if o.PublicURL != "" {
		u, err := url.Parse(o.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("PublicURL %q is not an http(s) URL without query, fragment or user", o.PublicURL))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	s := &Service{
		st:        st,
		ttl:       cmp.Or(o.TTL, DefaultTTL),
		now:       o.Now,
		publicURL: strings.TrimSuffix(o.PublicURL, "/"),
		audit:     o.Audit,
		log:       o.Logger,
		decided:   o.Decided,

		isReviewer: o.IsReviewer,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// URL returns the link that opens the approval in the Sessions UI.
func (s *Service) URL(id string) string {
	return s.publicURL + "/approvals/" + url.PathEscape(id)
}

// Request is a call that needs a human decision.
type Request struct {
	// Binding is the exact call.
	Binding Binding
	// Tenant is the requester's tenant (empty for an issuer without
	// tenants): only members of the approver groups in it decide.
	Tenant string
	// Arguments are the call's canonical arguments, shown to whoever
	// decides (Binding.ArgumentsHash is what binds).
	Arguments json.RawMessage
	// PolicyIDs and Reason say why approval is needed.
	PolicyIDs []string
	Reason    string
	// Approvers are the groups whose members decide; none: the requester
	// decides.
	Approvers []string
	// ToolCallID and IdempotencyKey name the call, so that it can be
	// retried; empty when the caller sent none.
	ToolCallID     string
	IdempotencyKey string
}

// Request records that the call r.Binding needs a human decision, or
// finds the identical pending request, and returns it. For a call outside
// a run, an identical denial the caller has not been told of comes first:
// it is returned (status denied), once, and nothing is requested (see
// store.Store.CreateApprovalAudited). A new request and
// its audit record are written together, in one transaction: when the
// record cannot be written, neither is the request, and the call may be
// made again.
func (s *Service) Request(ctx context.Context, r Request) (Approval, error) {
	b := r.Binding
	if err := checkBinding(b); err != nil {
		return Approval{}, err
	}
	if len(r.Arguments) > 0 && !json.Valid(r.Arguments) {
		return Approval{}, fmt.Errorf("%w: the arguments are not JSON", ErrInvalid)
	}
	groups, err := approverGroups(r.Approvers)
	if err != nil {
		return Approval{}, err
	}
	now := s.now()
	in := store.Approval{
		ID:             rand.Text(),
		Binding:        b,
		Tenant:         r.Tenant,
		Arguments:      r.Arguments,
		PolicyIDs:      r.PolicyIDs,
		Reason:         r.Reason,
		Approvers:      groups,
		ToolCallID:     r.ToolCallID,
		IdempotencyKey: r.IdempotencyKey,
		CreatedAt:      now,
		ExpiresAt:      now.Add(s.ttl),
	}
	build, err := s.builder(audit.Entry{
		Kind: audit.KindApprovalRequested, At: now,
		Principal: b.Principal, ClientID: b.ClientID, Tool: b.Tool,
		DefinitionHash: b.DefinitionHash, ArgumentsHash: b.ArgumentsHash,
		Decision: "approve", PolicyIDs: r.PolicyIDs, PolicyHash: b.PolicyHash,
		ApprovalID: in.ID, RunID: b.RunID,
		Details: details(map[string]any{"server": b.Server, "tenant": r.Tenant, "approvers": groups, "expires_at": in.ExpiresAt}),
	})
	if err != nil {
		return Approval{}, err
	}
	a, _, err := s.st.CreateApprovalAudited(ctx, in, build)
	if errors.Is(err, store.ErrInvalid) {
		return Approval{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("approvals: request: %w", err)
	}
	return a, nil
}

// Get returns the approval id if p may see it: its requester, or a member
// of one of its approver groups. To anyone else it does not exist.
func (s *Service) Get(ctx context.Context, id string, p identity.Principal) (Approval, error) {
	a, err := s.st.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Approval{}, ErrNotFound
	}
	if err != nil {
		return Approval{}, fmt.Errorf("approvals: get: %w", err)
	}
	if !canSee(a, p) {
		return Approval{}, ErrNotFound
	}
	return a, nil
}

// Pending returns the open requests p may act on: the ones p made and the
// ones p may decide as a member of an approver group, oldest first.
// Requests past their expiry are left out.
func (s *Service) Pending(ctx context.Context, p identity.Principal) ([]Approval, error) {
	if !identified(p) {
		return nil, nil
	}
	own, err := s.st.ListApprovals(ctx, p.ID(), store.ApprovalPending)
	if err != nil {
		return nil, fmt.Errorf("approvals: list: %w", err)
	}
	theirs, err := s.st.ListApprovalsForApprovers(ctx, p.Tenant, memberships(p), store.ApprovalPending)
	if err != nil {
		return nil, fmt.Errorf("approvals: list: %w", err)
	}
	now := s.now()
	var out []Approval
	for _, a := range append(own, theirs...) {
		if now.Before(a.ExpiresAt) && !slices.ContainsFunc(out, func(b Approval) bool { return b.ID == a.ID }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Approval) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Paging of Decided.
const (
	// DefaultDecidedLimit is the page size of Decided when none is asked.
	DefaultDecidedLimit = 20
	// MaxDecidedLimit is the largest page Decided returns.
	MaxDecidedLimit = 50
	// maxCursorLength bounds a cursor's text.
	maxCursorLength = 256
)

// Decided returns a page of the approvals that are no longer pending
// which p may see — the ones p requested and the ones p may see as a
// member of an approver group, as for Pending — newest first by when they
// ended (decided, expired or revoked), at most limit of them (0:
// DefaultDecidedLimit), after the cursor (""; the newest). next is the
// cursor of the page after, "" when there is none. ErrInvalid for a
// limit out of 0 to MaxDecidedLimit or a cursor this service did not
// make.
func (s *Service) Decided(ctx context.Context, p identity.Principal, cursor string, limit int) (_ []Approval, next string, _ error) {
	if limit < 0 || limit > MaxDecidedLimit {
		return nil, "", fmt.Errorf("%w: the limit is %d, want 1 to %d", ErrInvalid, limit, MaxDecidedLimit)
	}
	after, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	if !identified(p) {
		return nil, "", nil
	}
	limit = cmp.Or(limit, DefaultDecidedLimit)
	// One more than the page: whether there is a next one.
	list, err := s.st.ListDecidedApprovals(ctx, store.DecidedApprovals{
		Principal: p.ID(), Tenant: p.Tenant, Groups: memberships(p), After: after, Limit: limit + 1,
	})
	if err != nil {
		return nil, "", fmt.Errorf("approvals: decided: %w", err)
	}
	if len(list) > limit {
		list = list[:limit]
		next = formatCursor(store.CursorOf(list[limit-1]))
	}
	// The store selects by the same rules; what it returns is checked
	// again, so that a listing never shows what Get would not.
	out := list[:0:0]
	for _, a := range list {
		if canSee(a, p) {
			out = append(out, a)
		}
	}
	return out, next, nil
}

// formatCursor writes c as the opaque text clients pass back: the time
// in microseconds since the epoch and the id, base64url-encoded.
func formatCursor(c store.ApprovalCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.EndedAt.UnixMicro(), 10) + " " + c.ID))
}

// parseCursor reads a cursor of formatCursor; "" is the start.
func parseCursor(text string) (store.ApprovalCursor, error) {
	if text == "" {
		return store.ApprovalCursor{}, nil
	}
	bad := fmt.Errorf("%w: the cursor is not one this server gave", ErrInvalid)
	if len(text) > maxCursorLength {
		return store.ApprovalCursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		return store.ApprovalCursor{}, bad
	}
	micros, id, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || n <= 0 || id == "" || len(id) > maxIDLength || !utf8.ValidString(id) ||
		strings.ContainsFunc(id, unicode.IsControl) || strconv.FormatInt(n, 10) != micros {
		return store.ApprovalCursor{}, bad
	}
	at := time.UnixMicro(n).UTC()
	if at.Year() > 9000 {
		return store.ApprovalCursor{}, bad
	}
	return store.ApprovalCursor{EndedAt: at, ID: id}, nil
}

// Decide records decider's decision on the approval id: approve or deny,
// with a reason for the record. See the package documentation for who may
// decide. It fails with ErrNotFound when decider may not see the approval,
// ErrForbidden when they may not make this decision, ErrDecided when it
// is no longer pending (ErrWithdrawn when its turn was stopped or its run
// closed),
// ErrExpired when its time has passed, and
// ErrInvalid for a reason over MaxReasonRunes or holding control
// characters other than line breaks and tabs.
func (s *Service) Decide(ctx context.Context, id string, decider identity.Principal, approve bool, reason string) (Approval, error) {
	if err := checkReason(reason); err != nil {
		return Approval{}, err
	}
	a, err := s.Get(ctx, id, decider)
	if err != nil {
		return Approval{}, err
	}
	if !mayDecide(a, decider, approve) {
		return Approval{}, ErrForbidden
	}
	now := s.now()
	if err := openAt(a, now); err != nil {
		return Approval{}, err
	}
	to, decision := store.ApprovalDenied, "denied"
	if approve {
		to, decision = store.ApprovalApproved, "approved"
	}
	build, err := s.builder(audit.Entry{
		Kind: audit.KindApprovalDecided, At: now,
		Principal: decider.ID(), ClientID: a.Binding.ClientID, Tool: a.Binding.Tool,
		DefinitionHash: a.Binding.DefinitionHash, ArgumentsHash: a.Binding.ArgumentsHash,
		Decision: decision, PolicyIDs: a.PolicyIDs, PolicyHash: a.Binding.PolicyHash,
		ApprovalID: a.ID, RunID: a.Binding.RunID,
		Details: details(map[string]any{"requested_by": a.Binding.Principal, "reason": reason}),
	})
	if err != nil {
		return Approval{}, err
	}
	// The decision and its record are one transaction: an approval is
	// never approved without the record of who approved it.
	out, err := s.st.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: to, DecidedBy: decider.ID(), Reason: reason, Now: now}, build)
	if errors.Is(err, store.ErrConflict) {
		// Decided or expired since it was read: say which.
		if a, err := s.st.GetApproval(ctx, id); err == nil {
			if err := openAt(a, now); err != nil {
				return Approval{}, err
			}
		}
		return Approval{}, ErrDecided
	}
	if err != nil {
		return Approval{}, fmt.Errorf("approvals: decide: %w", err)
	}
	if s.decided != nil {
		s.decided(ctx, out)
	}
	return out, nil
}

// Consume finds the approved, unexpired, unused approval bound to exactly
// the call b and uses it, atomically: of concurrent identical calls, one
// gets the approval, the others ErrNotApproved. ErrNotApproved also when
// nothing matches: a call that differs in any field of its binding, an
// approval still pending, denied, expired, revoked or already used. Any
// other error is the store's or the audit log's, and uses nothing.
//
// The use is written in one transaction with record, the audit entry of
// the call that uses it (its ApprovalID is set here), and, when e is not
// nil, with the start of the call's execution e (its ApprovalID set too;
// see store.Store.BeginExecutionAudited): a call never runs on an approval whose
// use is not recorded, and an approval is never used up by a call that
// did not start. When e's idempotency key already names an execution of
// this call, nothing is used or recorded, and that execution is returned
// with started false, for the caller to answer the call with it: also
// when no approval is left because that execution used it (a retry racing
// the one that ran), so that such a retry never asks for another.
func (s *Service) Consume(ctx context.Context, b Binding, e *store.Execution, record audit.Entry) (_ Approval, _ store.Execution, started bool, _ error) {
	if err := checkBinding(b); err != nil {
		return Approval{}, store.Execution{}, false, err
	}
	now := s.now()
	for range consumeAttempts {
		a, err := s.st.FindApproved(ctx, b, now)
		if errors.Is(err, store.ErrNotFound) {
			return s.notApproved(ctx, b, e)
		}
		if err != nil {
			return Approval{}, store.Execution{}, false, fmt.Errorf("approvals: consume: %w", err)
		}
		record.ApprovalID = a.ID
		build, err := s.builder(record)
		if err != nil {
			return Approval{}, store.Execution{}, false, err
		}
		var start *store.Execution
		if e != nil {
			exec := *e
			exec.ApprovalID = a.ID
			start = &exec
		}
		out, exec, started, err := s.st.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: a.ID, Binding: b, Now: now, Execution: start}, build)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			continue // another call took it first
		}
		if err != nil {
			return Approval{}, store.Execution{}, false, fmt.Errorf("approvals: consume: %w", err)
		}
		return out, exec, started, nil
	}
	return s.notApproved(ctx, b, e)
}

// notApproved is Consume's answer when no approval is left for the call
// b: the execution e's key names, when it is this call's and has started
// (its use of the approval and its start were one transaction, so a retry
// that lost the race to it finds it here), or ErrNotApproved.
func (s *Service) notApproved(ctx context.Context, b Binding, e *store.Execution) (Approval, store.Execution, bool, error) {
	if e == nil || e.IdempotencyKey == "" {
		return Approval{}, store.Execution{}, false, ErrNotApproved
	}
	rec, err := s.st.GetExecution(ctx, e.IdempotencyKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Approval{}, store.Execution{}, false, ErrNotApproved
	case err != nil:
		return Approval{}, store.Execution{}, false, fmt.Errorf("approvals: consume: %w", err)
	case rec.Principal != b.Principal || rec.Tool != b.Tool || rec.ArgumentsHash != b.ArgumentsHash ||
		rec.Status == store.ExecutionAwaitingInput:
		// Another call's, or one whose next round needs an approval of
		// its own.
		return Approval{}, store.Execution{}, false, ErrNotApproved
	}
	return Approval{}, rec, false, nil
}

// RequestCurrent is Request for the tool's current definition, as the MCP
// server asks: it first revokes the tool's open approvals of any other
// definition (RevokeChanged), so that a person is never shown a request
// for a tool that has since changed, then records (or finds) the request.
// Without r.Tenant, the tenant is the one in the principal's id
// (identity.TenantOf).
func (s *Service) RequestCurrent(ctx context.Context, r Request) (Approval, error) {
	if _, err := s.RevokeChanged(ctx, r.Binding.Tool, r.Binding.DefinitionHash); err != nil {
		return Approval{}, err
	}
	r.Tenant = cmp.Or(r.Tenant, identity.TenantOf(r.Binding.Principal))
	return s.Request(ctx, r)
}

// RevokeChanged revokes the tool's pending and approved, unused approvals
// that were granted for another definition than currentHash, and returns
// how many. Call it whenever a tool's definition hash changes. The
// revocation is written in one transaction with its audit record: after
// an error nothing is revoked.
func (s *Service) RevokeChanged(ctx context.Context, tool, currentHash string) (int, error) {
	now := s.now()
	var build func(int) func(store.AuditHead) (store.AuditRecord, error)
	if s.audit != nil {
		build = func(n int) func(store.AuditHead) (store.AuditRecord, error) {
			b, err := s.builder(audit.Entry{
				Kind: audit.KindApprovalsRevoked, At: now, Tool: tool, DefinitionHash: currentHash,
				Details: details(map[string]any{"revoked": n}),
			})
			if err != nil {
				return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, err }
			}
			return b
		}
	}
	n, err := s.st.RevokeApprovalsAudited(ctx, tool, currentHash, now, build)
	if errors.Is(err, store.ErrInvalid) {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return 0, fmt.Errorf("approvals: revoke: %w", err)
	}
	return n, nil
}

// Expire marks every open approval past its expiry as expired, and returns
// how many. Expiry holds without it (an expired approval is never decided
// nor consumed); the sweep keeps listings and the database tidy.
func (s *Service) Expire(ctx context.Context) (int, error) {
	n, err := s.st.ExpireApprovals(ctx, s.now())
	if err != nil {
		return 0, fmt.Errorf("approvals: expire: %w", err)
	}
	return n, nil
}

// builder returns the function that makes e the next audit record, for a
// store write that appends it in its own transaction; nil when there is
// no audit log.
func (s *Service) builder(e audit.Entry) (func(store.AuditHead) (store.AuditRecord, error), error) {
	if s.audit == nil {
		return nil, nil
	}
	build, err := s.audit.Builder(e)
	if err != nil {
		return nil, fmt.Errorf("approvals: audit %s of approval %s: %w", e.Kind, e.ApprovalID, err)
	}
	return build, nil
}

// openAt returns nil when a can be decided at now, and otherwise why not.
func openAt(a Approval, now time.Time) error {
	switch {
	case a.Status == store.ApprovalExpired:
		return ErrExpired
	case a.Status == store.ApprovalWithdrawn:
		return ErrWithdrawn
	case a.Status != store.ApprovalPending:
		return ErrDecided
	case !now.Before(a.ExpiresAt):
		return ErrExpired
	}
	return nil
}

// identified reports whether p names someone: a zero principal must never
// match a requester or a decider.
func identified(p identity.Principal) bool {
	return p.Issuer != "" && cmp.Or(p.ObjectID, p.Subject) != ""
}

// canSee reports whether p may see a: the requester, or a member of one of
// its approver groups in the requester's tenant.
func canSee(a Approval, p identity.Principal) bool {
	if !identified(p) {
		return false
	}
	return p.ID() == a.Binding.Principal || approver(a, p)
}

// approver reports whether p is one of a's approvers: a member of one of
// its groups, in its tenant. A group name is a tenant's own: the same name
// in another tenant is another group.
func approver(a Approval, p identity.Principal) bool {
	return p.Tenant == a.Tenant && inGroups(p, a.Approvers)
}

// mayDecide reports whether p may approve (or deny) a. Without approver
// groups the requester decides. With them, their members in the
// requester's tenant decide, and the
// requester may only deny: nobody approves their own request when others
// were asked to.
func mayDecide(a Approval, p identity.Principal, approve bool) bool {
	if !identified(p) {
		return false
	}
	requester := p.ID() == a.Binding.Principal
	if len(a.Approvers) == 0 {
		return requester
	}
	if requester {
		return !approve
	}
	return approver(a, p)
}

// inGroups reports whether p is a member of one of groups: one of p's
// groups or app roles, as review.groups and admin.groups name theirs, so
// that a policy's @approvers("Usher.Admin") names the role's holders.
func inGroups(p identity.Principal, groups []string) bool {
	return p.InAnyOf(groups)
}

// memberships are what p is a member of, for the store to select the
// approvals whose approver groups name one: p's groups and app roles,
// without empty names.
func memberships(p identity.Principal) []string {
	var out []string
	for _, g := range slices.Concat(p.Groups, p.Roles) {
		if g != "" && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// checkBinding requires what a binding needs to be exact; only Server and
// RunID may be empty.
func checkBinding(b Binding) error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"principal", b.Principal}, {"tool", b.Tool}, {"definition hash", b.DefinitionHash},
		{"arguments hash", b.ArgumentsHash}, {"policy hash", b.PolicyHash}, {"client id", b.ClientID},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the binding has no %s", ErrInvalid, strings.Join(missing, ", "))
	}
	return nil
}

// approverGroups returns the approver groups without repeats, refusing
// empty names.
func approverGroups(groups []string) ([]string, error) {
	var out []string
	for _, g := range groups {
		if strings.TrimSpace(g) == "" {
			return nil, fmt.Errorf("%w: an approver group is empty", ErrInvalid)
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out, nil
}

// checkReason refuses a reason that is too long or holds control
// characters other than line breaks and tabs.
func checkReason(reason string) error {
	if !utf8.ValidString(reason) {
		return fmt.Errorf("%w: the reason is not UTF-8", ErrInvalid)
	}
	if utf8.RuneCountInString(reason) > MaxReasonRunes {
		return fmt.Errorf("%w: the reason is longer than %d characters", ErrInvalid, MaxReasonRunes)
	}
	if strings.ContainsFunc(reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' }) {
		return fmt.Errorf("%w: the reason holds control characters", ErrInvalid)
	}
	return nil
}

// details encodes an audit entry's details.
func details(v map[string]any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

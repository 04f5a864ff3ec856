package approvals

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// TenantFilter keeps some of a tenant's approvals: those in a stored
// state, bound to a name (a tool's, or "<action>:<name>") and requested
// by a principal id, each when set.
type TenantFilter struct {
	Status    store.ApprovalStatus
	Tool      string
	Principal string
}

// Tenant returns a page of every approval of reviewer's tenant (issuer
// and tenant), in any state, newest first by creation, with f's filters;
// next is the cursor of the page after it ("" after the last). The
// caller decides that reviewer is a reviewer: Options.IsReviewer is the
// check the API makes. limit 0 means DefaultDecidedLimit.
func (s *Service) Tenant(ctx context.Context, reviewer identity.Principal, f TenantFilter, cursor string, limit int) (_ []Approval, next string, _ error) {
	if limit < 0 || limit > MaxDecidedLimit {
		return nil, "", fmt.Errorf("%w: the limit is %d, want 1 to %d", ErrInvalid, limit, MaxDecidedLimit)
	}
	after, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	if !identified(reviewer) {
		return nil, "", nil
	}
	limit = cmp.Or(limit, DefaultDecidedLimit)
	list, err := s.st.ListTenantApprovals(ctx, store.TenantApprovals{
		Tenant: reviewer.Tenant, Scope: reviewer.Issuer + "|" + reviewer.Tenant + "|",
		Status: f.Status, Tool: f.Tool, Principal: f.Principal, After: after, Limit: limit + 1,
	})
	if err != nil {
		return nil, "", fmt.Errorf("approvals: tenant: %w", err)
	}
	if len(list) > limit {
		list = list[:limit]
		next = formatCursor(store.CreatedCursorOf(list[limit-1]))
	}
	return list, next, nil
}

// errReviewerRequired answers scope=all to someone who is not a security
// reviewer (Options.IsReviewer).
var errReviewerRequired = httpx.Errorf(http.StatusForbidden, "reviewer_required",
	"Only security reviewers (review.groups) may list every approval of the tenant.")

// errBadTenantList answers a scope=all listing whose query is not one.
var errBadTenantList = httpx.Errorf(http.StatusBadRequest, "invalid_request", fmt.Sprintf(
	"With scope=all the query may hold status (pending, approved, denied, consumed, expired or revoked), tool, principal, "+
		"a limit of 1 to %d and the cursor of a previous page (next_cursor), each at most once, and nothing else.", MaxDecidedLimit))

// tenantParams are the parameters of a scope=all listing.
var tenantParams = []string{"scope", "status", "tool", "principal", "limit", "cursor"}

// maxFilterLength bounds a filter's value.
const maxFilterLength = 1024

// listTenant answers GET /api/approvals?scope=all: every approval of the
// reviewer's tenant, a page at a time, for reviewers only.
func (h *handler) listTenant(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	if h.s.isReviewer == nil || !h.s.isReviewer(p) {
		httpx.WriteError(w, r, h.log, errReviewerRequired)
		return
	}
	f, cursor, limit, ok := parseTenantQuery(r)
	ok = ok && r.URL.Query().Get("scope") == "all"
	if !ok {
		httpx.WriteError(w, r, h.log, errBadTenantList)
		return
	}
	list, next, err := h.s.Tenant(r.Context(), p, f, cursor, limit)
	if err != nil {
		if errors.Is(err, ErrInvalid) || errors.Is(err, store.ErrInvalid) {
			h.log.InfoContext(r.Context(), "approvals: listing refused", "reason", err)
			err = errBadTenantList
		}
		h.fail(w, r, err)
		return
	}
	h.writePage(w, list, p, next)
}

// parseTenantQuery reads a scope=all listing's query strictly.
func parseTenantQuery(r *http.Request) (f TenantFilter, cursor string, limit int, ok bool) {
	values := r.URL.Query()
	for k, v := range values {
		if !slices.Contains(tenantParams, k) || len(v) != 1 || len(v[0]) > maxFilterLength || !utf8.ValidString(v[0]) {
			return f, "", 0, false
		}
	}
	f = TenantFilter{Status: store.ApprovalStatus(values.Get("status")), Tool: values.Get("tool"), Principal: values.Get("principal")}
	if f.Status != "" && !f.Status.Valid() {
		return f, "", 0, false
	}
	limit, err := parseLimit(values)
	if err != nil {
		return f, "", 0, false
	}
	if values.Has("cursor") && values.Get("cursor") == "" {
		return f, "", 0, false
	}
	return f, values.Get("cursor"), limit, true
}

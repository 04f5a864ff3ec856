package approvals

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
)

// maxDecisionBody bounds the body of a decision: a reason of
// MaxReasonRunes characters, each escaped, fits.
const maxDecisionBody = 16 << 10

// maxIDLength bounds the approval ids the handlers look up.
const maxIDLength = 128

// API errors of the handlers, in the one error shape of httpx.
var (
	errUnauthenticated = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in to see and decide approvals.")
	errForbidden       = httpx.Errorf(http.StatusForbidden, "approval_forbidden", "You may not make this decision: another approver must decide this request.")
	errDecided         = httpx.Errorf(http.StatusConflict, "approval_decided", "The approval is no longer pending: it was decided, used or revoked.")
	errExpired         = httpx.Errorf(http.StatusGone, "approval_expired", "The approval has expired.")
	errWithdrawn       = httpx.Errorf(http.StatusConflict, "approval_withdrawn", "The approval was withdrawn: the turn that asked for it was stopped, or its session closed, and the call will not run.")
	errBadDecision     = httpx.Errorf(http.StatusBadRequest, "invalid_request", fmt.Sprintf(
		`The body must be one JSON object: {"decision": "approve" or "deny", "reason": optional text of at most %d characters}.`, MaxReasonRunes))
	errBadReason = httpx.Errorf(http.StatusBadRequest, "invalid_request", fmt.Sprintf(
		"The reason must be at most %d characters, without control characters.", MaxReasonRunes))
	errBadList = httpx.Errorf(http.StatusBadRequest, "invalid_request", fmt.Sprintf(
		"The query must be state=pending (the default) or state=decided, with state=decided an optional limit of 1 to %d and the cursor of a previous page (next_cursor), each at most once.", MaxDecidedLimit))
	errNotJSON = httpx.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Send the decision as application/json.")
)

// view is an approval as the API shows it.
type view struct {
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	URL            string          `json:"url"`
	Tool           string          `json:"tool"`
	Action         string          `json:"action"`
	Name           string          `json:"name"`
	Server         string          `json:"server,omitempty"`
	Arguments      json.RawMessage `json:"arguments"`
	ArgumentsHash  string          `json:"arguments_hash"`
	DefinitionHash string          `json:"definition_hash"`
	PolicyIDs      []string        `json:"policy_ids"`
	PolicyHash     string          `json:"policy_hash"`
	Reason         string          `json:"reason"`
	RunID          string          `json:"run_id,omitempty"`
	ClientID       string          `json:"client_id"`
	RequestedBy    string          `json:"requested_by"`
	Approvers      []string        `json:"approvers"`
	CanApprove     bool            `json:"can_approve"`
	CanDeny        bool            `json:"can_deny"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
	ConsumedAt     *time.Time      `json:"consumed_at,omitempty"`
	EndedAt        *time.Time      `json:"ended_at,omitempty"`
	ExpiresAt      time.Time       `json:"expires_at"`
	CreatedAt      time.Time       `json:"created_at"`
}

// viewOf shows a to p at now. A pending approval past its expiry shows as
// expired: expiry holds before the sweep records it.
func (s *Service) viewOf(a Approval, p identity.Principal, now time.Time) view {
	state := openAt(a, now)
	open := state == nil
	status := string(a.Status)
	if errors.Is(state, ErrExpired) {
		status = "expired"
	}
	v := view{
		ID: a.ID, Status: status, URL: s.URL(a.ID),
		Tool: a.Binding.Tool, Server: a.Binding.Server,
		Arguments: a.Arguments, ArgumentsHash: a.Binding.ArgumentsHash,
		DefinitionHash: a.Binding.DefinitionHash,
		PolicyIDs:      nonNil(a.PolicyIDs), PolicyHash: a.Binding.PolicyHash,
		Reason: a.Reason, RunID: a.Binding.RunID, ClientID: a.Binding.ClientID,
		RequestedBy: a.Binding.Principal, Approvers: nonNil(a.Approvers),
		CanApprove:     open && mayDecide(a, p, true),
		CanDeny:        open && mayDecide(a, p, false),
		DecidedBy:      a.DecidedBy,
		DecisionReason: a.DecisionReason,
		DecidedAt:      timeOrNil(a.DecidedAt),
		ConsumedAt:     timeOrNil(a.ConsumedAt),
		EndedAt:        timeOrNil(a.EndedAt()),
		ExpiresAt:      a.ExpiresAt,
		CreatedAt:      a.CreatedAt,
	}
	if len(v.Arguments) == 0 {
		v.Arguments = json.RawMessage(`{}`)
	}
	v.Action, v.Name = actionOf(a.Binding.Tool)
	return v
}

// boundActions are the actions other than a tool call whose approvals the
// MCP server binds to "<action>:<name>" (the resource's URI, the prompt's
// name), so that no approval of one kind of request serves another.
var boundActions = []string{"read_resource", "get_prompt", "complete"}

// actionOf splits the name an approval is bound to into the action it
// allows and what that acts on: a tool's name (which holds no colon) is a
// call_tool of it.
func actionOf(bound string) (action, name string) {
	for _, a := range boundActions {
		if rest, ok := strings.CutPrefix(bound, a+":"); ok && rest != "" {
			return a, rest
		}
	}
	return "call_tool", bound
}

// Handler serves the approvals API:
//
//	GET  /api/approvals                  the caller's open requests, and those the caller may decide
//	GET  /api/approvals?state=decided    the decided ones the caller may see, newest first (&limit=, &cursor=)
//	GET  /api/approvals?scope=all        every approval of the caller's tenant, to security reviewers only, newest first
//	                                     (&status=, &tool=, &principal=, &limit=, &cursor=)
//	GET  /api/approvals/{id}             one approval, to its requester or an eligible approver
//	POST /api/approvals/{id}/decision    {"decision": "approve"|"deny", "reason": "…"}
//
// It expects an authenticated request: mount it behind the identity
// middleware, which puts the principal in the context, and behind
// broker.RefuseTokens. A request without a principal is answered 401. An
// approval the caller may not see is 404, as if it did not exist. A
// decision must be sent as application/json (which a cross-site form
// cannot send), strictly: one object, no unknown or repeated members, no
// trailing data. Errors are log's to see; clients get the one error shape.
func (s *Service) Handler(log *slog.Logger) http.Handler {
	if log == nil {
		log = s.log
	}
	h := &handler{s: s, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/approvals", h.list)
	mux.HandleFunc("GET /api/approvals/{id}", h.get)
	mux.HandleFunc("POST /api/approvals/{id}/decision", h.decide)
	for p, allow := range map[string]string{"/api/approvals": "GET, HEAD", "/api/approvals/{id}": "GET, HEAD", "/api/approvals/{id}/decision": "POST"} {
		mux.HandleFunc(p, h.methodNotAllowed(allow))
	}
	mux.HandleFunc("/api/approvals/", h.notFound)
	return mux
}

type handler struct {
	s   *Service
	log *slog.Logger
}

// principal returns the caller, or answers 401.
func (h *handler) principal(w http.ResponseWriter, r *http.Request) (identity.Principal, bool) {
	p, ok := identity.FromContext(r.Context())
	if !ok || !identified(p) {
		httpx.WriteError(w, r, h.log, errUnauthenticated)
		return identity.Principal{}, false
	}
	return p, true
}

// listQuery is a listing's query: the state (pending or decided) and,
// for decided, the page.
type listQuery struct {
	decided bool
	limit   int
	cursor  string
}

// parseListQuery reads ?state=pending|decided&limit=N&cursor=C strictly:
// each at most once, limit and cursor only with state=decided. Other
// parameters are left alone.
func parseListQuery(r *http.Request) (listQuery, error) {
	var q listQuery
	values := r.URL.Query()
	for _, name := range []string{"state", "limit", "cursor"} {
		if len(values[name]) > 1 {
			return q, fmt.Errorf("%s is repeated", name)
		}
	}
	switch state := values.Get("state"); state {
	case "", "pending":
	case "decided":
		q.decided = true
	default:
		return q, fmt.Errorf("state %q is neither pending nor decided", state)
	}
	if !q.decided && (values.Has("limit") || values.Has("cursor")) {
		return q, errors.New("limit and cursor page the decided approvals only")
	}
	var err error
	if q.limit, err = parseLimit(values); err != nil {
		return q, err
	}
	if values.Has("cursor") {
		if q.cursor = values.Get("cursor"); q.cursor == "" {
			return q, errors.New("cursor is empty")
		}
	}
	return q, nil
}

// parseLimit reads the limit of a page: 1 to MaxDecidedLimit, in plain
// decimal; 0 when absent.
func parseLimit(values url.Values) (int, error) {
	if !values.Has("limit") {
		return 0, nil
	}
	text := values.Get("limit")
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > MaxDecidedLimit || strconv.Itoa(n) != text {
		return 0, fmt.Errorf("limit %q is not 1 to %d", text, MaxDecidedLimit)
	}
	return n, nil
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Has("scope") {
		h.listTenant(w, r, p)
		return
	}
	q, err := parseListQuery(r)
	if err != nil {
		h.log.InfoContext(r.Context(), "approvals: listing refused", "reason", err)
		httpx.WriteError(w, r, h.log, errBadList)
		return
	}
	if q.decided {
		h.listDecided(w, r, p, q)
		return
	}
	list, err := h.s.Pending(r.Context(), p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Approvals []view `json:"approvals"`
	}{h.views(list, p)})
}

// listDecided answers a page of the decided approvals p may see.
func (h *handler) listDecided(w http.ResponseWriter, r *http.Request, p identity.Principal, q listQuery) {
	list, next, err := h.s.Decided(r.Context(), p, q.cursor, q.limit)
	if errors.Is(err, ErrInvalid) {
		h.log.InfoContext(r.Context(), "approvals: listing refused", "reason", err)
		httpx.WriteError(w, r, h.log, errBadList)
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writePage(w, list, p, next)
}

// writePage answers a page of approvals as p sees them, and the cursor
// of the next page ("" after the last).
func (h *handler) writePage(w http.ResponseWriter, list []Approval, p identity.Principal, next string) {
	httpx.WriteJSON(w, http.StatusOK, struct {
		Approvals  []view `json:"approvals"`
		NextCursor string `json:"next_cursor,omitempty"`
	}{h.views(list, p), next})
}

// views shows each approval of list as p sees it now.
func (h *handler) views(list []Approval, p identity.Principal) []view {
	now := h.s.now()
	out := make([]view, len(list))
	for i, a := range list {
		out[i] = h.s.viewOf(a, p, now)
	}
	return out
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if len(id) > maxIDLength {
		httpx.WriteError(w, r, h.log, httpx.ErrNotFound)
		return
	}
	a, err := h.s.Get(r.Context(), id, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, h.s.viewOf(a, p, h.s.now()))
}

func (h *handler) decide(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if len(id) > maxIDLength {
		httpx.WriteError(w, r, h.log, httpx.ErrNotFound)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		httpx.WriteError(w, r, h.log, errNotJSON)
		return
	}
	d, err := decodeDecision(http.MaxBytesReader(w, r.Body, maxDecisionBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpx.WriteError(w, r, h.log, httpx.ErrBodyTooLarge)
			return
		}
		h.log.InfoContext(r.Context(), "approvals: decision refused", "id", id, "reason", err)
		httpx.WriteError(w, r, h.log, errBadDecision)
		return
	}
	a, err := h.s.Decide(r.Context(), id, p, d.approve, d.reason)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, h.s.viewOf(a, p, h.s.now()))
}

// methodNotAllowed answers a method a route does not take, with the
// methods it takes (allow).
func (h *handler) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httpx.WriteError(w, r, h.log, httpx.ErrMethodNotAllowed)
	}
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	httpx.WriteError(w, r, h.log, httpx.ErrNotFound)
}

// fail answers err: the service's errors by their meaning, anything else
// a logged 500.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		err = httpx.ErrNotFound
	case errors.Is(err, ErrForbidden):
		err = errForbidden
	case errors.Is(err, ErrWithdrawn):
		err = errWithdrawn
	case errors.Is(err, ErrDecided):
		err = errDecided
	case errors.Is(err, ErrExpired):
		err = errExpired
	case errors.Is(err, ErrInvalid):
		err = errBadReason
	}
	httpx.WriteError(w, r, h.log, err)
}

// decision is a decoded decision body.
type decision struct {
	approve bool
	reason  string
}

// decodeDecision reads {"decision": "approve"|"deny", "reason": "…"}
// strictly: one JSON object; member names exactly as written, each at most
// once; string values; nothing after the object. encoding/json alone would
// take "Decision" for "decision" and the last of repeated members.
func decodeDecision(r io.Reader) (decision, error) {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil {
		return decision{}, err
	} else if tok != json.Delim('{') {
		return decision{}, errors.New("the body is not a JSON object")
	}
	var d decision
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return decision{}, err
		}
		name, _ := tok.(string)
		if seen[name] {
			return decision{}, fmt.Errorf("member %q repeated", name)
		}
		seen[name] = true
		if name != "decision" && name != "reason" {
			return decision{}, fmt.Errorf("unknown member %q", name)
		}
		tok, err = dec.Token()
		if err != nil {
			return decision{}, err
		}
		value, ok := tok.(string)
		if !ok {
			return decision{}, fmt.Errorf("member %q is not a string", name)
		}
		switch name {
		case "decision":
			switch value {
			case "approve":
				d.approve = true
			case "deny":
				d.approve = false
			default:
				return decision{}, fmt.Errorf("decision %q is neither approve nor deny", value)
			}
		case "reason":
			d.reason = value
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return decision{}, err
	}
	if !seen["decision"] {
		return decision{}, errors.New("no decision")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return decision{}, err
		}
		return decision{}, errors.New("data after the JSON object")
	}
	return d, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

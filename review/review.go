package review

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/mod/sumdb/note"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// Store is what the reviewer's API reads: the audit log in order, and by
// what its records hold.
type Store interface {
	AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]store.AuditRecord, error)
	ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]store.AuditCheckpoint, error)
	QueryAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error)
	EachAudit(ctx context.Context, q store.AuditQuery, fn func(store.AuditRecord) error) error
}

// Verifiers gives the audit verifier keys, as
// /.well-known/usher-audit-key publishes them; *audit.Keys is one.
type Verifiers interface {
	Verifiers(ctx context.Context) (note.Verifiers, error)
}

// DefaultVerifyLimit is how many records one GET /api/audit/verify checks
// at most, by default.
const DefaultVerifyLimit = 100_000

// Options configures New. A nil *Options means every default.
type Options struct {
	// Groups are the reviewers' groups (config review.groups). Default
	// none: nobody is a reviewer.
	Groups []string
	// VerifyLimit is how many records one verification step checks at
	// most. Default DefaultVerifyLimit.
	VerifyLimit int64
	// Checkpoints lists the audit log's signed checkpoints
	// (audit.CheckpointsHandler), served to reviewers at GET
	// /api/audit/checkpoints. Default none: that route is not found.
	Checkpoints http.Handler
	// AuditKeys gives the published audit verifier keys (*audit.Keys),
	// which GET /api/audit/verify checks the checkpoints of each step's
	// records against. Default none: a step checks the chain alone.
	AuditKeys Verifiers
	// Policy is the policy the MCP server decides with, served to
	// reviewers at GET /api/policy and explained at GET
	// /api/policy/explain. Default none: the policy and tools routes are
	// not found. With it, Catalog is required.
	Policy *policy.Policy
	// Lock is the tool lock the MCP server decides with. Default nil,
	// which reviews no tool.
	Lock *policy.Lock
	// Catalog is the MCP server's catalog (mcpserver.Catalog), listed at
	// GET /api/tools and resolving what an explain names. Required with
	// Policy.
	Catalog Catalog
	// Logger records the errors clients see only as a generic 500.
	// Default slog.Default().
	Logger *slog.Logger
}

// API is the reviewers' audit API.
type API struct {
	st          Store
	groups      []string
	verifyLimit int64
	checkpoints http.Handler
	auditKeys   Verifiers
	policy      *policy.Policy
	lock        *policy.Lock
	catalog     Catalog
	log         *slog.Logger
}

// New returns the reviewers' API over st.
func New(st Store, opts *Options) (*API, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var errs []error
	if st == nil {
		errs = append(errs, errors.New("review: New needs a store"))
	}
	if slices.Contains(o.Groups, "") {
		errs = append(errs, errors.New("review: a reviewers' group is empty"))
	}
	if o.VerifyLimit < 0 {
		errs = append(errs, fmt.Errorf("review: verify limit %d is negative", o.VerifyLimit))
	}
	if (o.Policy == nil) != (o.Catalog == nil) {
		errs = append(errs, errors.New("review: the policy and the catalog go together"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.VerifyLimit == 0 {
		o.VerifyLimit = DefaultVerifyLimit
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &API{st: st, groups: slices.Clone(o.Groups), verifyLimit: o.VerifyLimit, checkpoints: o.Checkpoints, auditKeys: o.AuditKeys,
		policy: o.Policy, lock: o.Lock, catalog: o.Catalog, log: o.Logger}, nil
}

// IsReviewer reports whether p is a reviewer: one of the reviewers' groups
// is among p's groups or app roles.
func (a *API) IsReviewer(p identity.Principal) bool { return Reviewers(a.groups).IsReviewer(p) }

// Reviewers are the reviewers' groups (config review.groups), for the
// parts that answer reviewers outside this API, such as every approval of
// the tenant (approvals.Options.IsReviewer).
type Reviewers []string

// IsReviewer reports whether p is a reviewer: one of the groups is among
// p's groups or app roles. An empty group names no one.
func (r Reviewers) IsReviewer(p identity.Principal) bool { return p.InAnyOf(r) }

// API errors of the handlers, in the one error shape of httpx.
var (
	errUnauthenticated  = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in to read the audit log.")
	errReviewerRequired = httpx.Errorf(http.StatusForbidden, "reviewer_required", "Only security reviewers (review.groups) may read the audit log, the policy and the tools.")
	errBadSeq           = httpx.Errorf(http.StatusBadRequest, "invalid_seq", "A record's sequence number is a positive integer.")
)

// Handler serves the routes of the package documentation. It expects an
// authenticated request (the principal in the context): mount it behind
// the identity middleware and broker.RefuseTokens.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/audit", a.list)
	mux.HandleFunc("GET /api/audit/export", a.export)
	mux.HandleFunc("GET /api/audit/verify", a.verify)
	mux.HandleFunc("GET /api/audit/{seq}", a.get)
	if a.checkpoints != nil {
		mux.HandleFunc("GET /api/audit/checkpoints", a.listCheckpoints)
	}
	if a.policy != nil {
		mux.HandleFunc("GET /api/policy", a.policyDoc)
		mux.HandleFunc("GET /api/policy/explain", a.explain)
		mux.HandleFunc("GET /api/policy/matrix", a.matrix)
		mux.HandleFunc("GET /api/tools", a.tools)
	} else {
		mux.HandleFunc("GET /api/policy", a.notFound)
		mux.HandleFunc("GET /api/tools", a.notFound)
	}
	for _, p := range Paths {
		mux.HandleFunc("GET "+p+"/", a.notFound)
		mux.HandleFunc(p, a.readOnly)
		mux.HandleFunc(p+"/", a.readOnly)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.FromContext(r.Context())
		switch {
		case !ok:
			httpx.WriteError(w, r, a.log, errUnauthenticated)
		case !a.IsReviewer(p):
			httpx.WriteError(w, r, a.log, errReviewerRequired)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// Paths are the roots of the routes Handler serves: mount it at each,
// and at each followed by a slash.
var Paths = []string{"/api/audit", "/api/policy", "/api/tools"}

// notFound answers a GET of no route.
func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	httpx.WriteError(w, r, a.log, httpx.ErrNotFound)
}

// readOnly answers every method but GET (and HEAD, which GET serves).
func (a *API) readOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	httpx.WriteError(w, r, a.log, httpx.ErrMethodNotAllowed)
}

// scope is the AuditQuery.Scope of the reviewer of r: their issuer and
// tenant.
func scope(r *http.Request) string {
	p, _ := identity.FromContext(r.Context())
	return p.Issuer + "|" + p.Tenant + "|"
}

// listCheckpoints serves the audit log's checkpoints (Options.Checkpoints)
// under this API's rules for a query: after (a sequence number) and limit
// (1 to audit.MaxCheckpointsPage) only, each at most once.
func (a *API) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	q, err := onlyParams(r, "after", "limit")
	if err == nil {
		_, err = seqParam(q, "after")
	}
	if s := q.Get("limit"); err == nil && q.Has("limit") {
		if n, perr := strconv.Atoi(s); perr != nil || n < 1 || n > audit.MaxCheckpointsPage || s[0] == '+' {
			err = badParameter("limit", fmt.Sprintf("an integer from 1 to %d", audit.MaxCheckpointsPage))
		}
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	a.checkpoints.ServeHTTP(w, r)
}

// get answers one record of the reviewer's tenant.
func (a *API) get(w http.ResponseWriter, r *http.Request) {
	if err := noParameters(r); err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	seq, err := parseSeq(r.PathValue("seq"))
	if err != nil || seq < 1 {
		httpx.WriteError(w, r, a.log, errBadSeq)
		return
	}
	// Before is seq + 1 but for the greatest seq, where it is none: the
	// record after it could not be numbered.
	q := store.AuditQuery{Scope: scope(r), After: seq - 1, Limit: 1}
	if seq < math.MaxInt64 {
		q.Before = seq + 1
	}
	rs, err := a.st.QueryAudit(r.Context(), q)
	if len(rs) == 1 && rs[0].Seq != seq {
		rs = nil
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	if len(rs) == 0 {
		httpx.WriteError(w, r, a.log, httpx.ErrNotFound)
		return
	}
	line, err := audit.Line(rs[0])
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	writeJSONBytes(w, line)
}

// parseSeq parses a sequence number: decimal digits only.
func parseSeq(s string) (int64, error) {
	if s == "" || len(s) > 19 || s[0] == '+' || s[0] == '-' {
		return 0, errBadSeq
	}
	return strconv.ParseInt(s, 10, 64)
}

// writeJSONBytes answers 200 with body, JSON already encoded, and its
// length (so that it is sent as it is, not in chunks).
func writeJSONBytes(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

package status

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
)

// APIOptions configures NewAPI. A nil *APIOptions means every default.
type APIOptions struct {
	// Admins are the admins' groups (config admin.groups). Default none:
	// nobody is an admin.
	Admins Admins
	// Logger records the errors clients see only as a generic 500.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// APIStore is what the admins' API reads: the report's and the usage's
// store.
type APIStore interface {
	ReportStore
	UsageStore
}

// API is the admins' status API.
type API struct {
	st     APIStore
	admins Admins
	log    *slog.Logger
	now    func() time.Time
}

// NewAPI returns the admins' API over st.
func NewAPI(st APIStore, opts *APIOptions) (*API, error) {
	var o APIOptions
	if opts != nil {
		o = *opts
	}
	if st == nil {
		return nil, errors.New("status: NewAPI needs a store")
	}
	for _, g := range o.Admins {
		if g == "" {
			return nil, errors.New("status: an admins' group is empty")
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &API{st: st, admins: o.Admins, log: o.Logger, now: o.Now}, nil
}

// Paths are the roots of the routes Handler serves: mount it at each,
// and at each followed by a slash.
var Paths = []string{"/api/admin"}

// API errors of the handler, in the one error shape of httpx.
var (
	errUnauthenticated = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in to read the status.")
	errAdminRequired   = httpx.Errorf(http.StatusForbidden, "admin_required", "Only admins (admin.groups) may read the status and the usage of the installation.")
	errNoParameters    = httpx.Errorf(http.StatusBadRequest, "unknown_parameter", "GET /api/admin/status takes no query parameters.")
)

// Handler serves GET /api/admin/status and GET /api/admin/usage (what
// each person's model requests used), to admins only. It expects an
// authenticated request (the principal in the context): mount it behind
// the identity middleware and broker.RefuseTokens.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/admin/status", a.status)
	mux.HandleFunc("GET /api/admin/usage", a.usage)
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
		case !a.admins.IsAdmin(p):
			httpx.WriteError(w, r, a.log, errAdminRequired)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// status answers the report of the installation now.
func (a *API) status(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		httpx.WriteError(w, r, a.log, errNoParameters)
		return
	}
	rep, err := Read(r.Context(), a.st, a.now())
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rep)
}

// notFound answers a GET of no route.
func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	httpx.WriteError(w, r, a.log, httpx.ErrNotFound)
}

// readOnly answers every method but GET (and HEAD, which GET serves).
func (a *API) readOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	httpx.WriteError(w, r, a.log, httpx.ErrMethodNotAllowed)
}

package assistant

import (
	"net/http"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
)

// Me is the body of GET /api/me: who the API thinks the caller is.
type Me struct {
	ID       string   `json:"id"`
	Issuer   string   `json:"issuer"`
	Tenant   string   `json:"tenant,omitempty"`
	ObjectID string   `json:"objectId"`
	Name     string   `json:"name,omitempty"`
	Email    string   `json:"email,omitempty"`
	Scopes   []string `json:"scopes"`
	// Reviewer: the caller is a security reviewer (review.groups), who
	// may read the audit log, the policy and the tools.
	Reviewer bool `json:"reviewer"`
	// Admin: the caller is an admin (admin.groups), who may read the
	// status of the installation. The UI shows its Review and Operator
	// pages by these two; the APIs behind them decide for themselves.
	Admin bool `json:"admin"`
}

// Role reports whether a principal holds a role (review.Reviewers.IsReviewer,
// status.Admins.IsAdmin); nil holds for no one.
type Role func(identity.Principal) bool

func (r Role) holds(p identity.Principal) bool { return r != nil && r(p) }

// Roles are the roles GET /api/me reports.
type Roles struct {
	Reviewer Role
	Admin    Role
}

// MeHandler answers GET /api/me with the caller's principal, and which of
// roles they hold. It must sit behind the identity middleware, which puts
// the principal in the request's context; a request without one is
// answered 401.
func MeHandler(roles Roles) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.FromContext(r.Context())
		if !ok {
			httpx.WriteError(w, r, nil, errUnauthenticated)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, Me{ID: p.ID(), Issuer: p.Issuer, Tenant: p.Tenant, ObjectID: p.ObjectID, Name: p.Name, Email: p.Email, Scopes: p.Scopes,
			Reviewer: roles.Reviewer.holds(p), Admin: roles.Admin.holds(p)})
	})
}

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
	// Admin says whether the caller is an admin (admin.groups), who may
	// read the status of the installation; the UI shows its Operator page
	// to admins only. The status API decides for itself.
	Admin bool `json:"admin"`
}

// MeHandler answers GET /api/me with the caller's principal, and whether
// isAdmin takes them for an admin (nil: no one). It must sit behind the
// identity middleware, which puts the principal in the request's context;
// a request without one is answered 401.
func MeHandler(isAdmin func(identity.Principal) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.FromContext(r.Context())
		if !ok {
			httpx.WriteError(w, r, nil, errUnauthenticated)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, Me{ID: p.ID(), Issuer: p.Issuer, Tenant: p.Tenant, ObjectID: p.ObjectID, Name: p.Name, Email: p.Email, Scopes: p.Scopes,
			Admin: isAdmin != nil && isAdmin(p)})
	})
}

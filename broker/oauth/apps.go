package oauth

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// PathApps is where the signed-in person's connected apps are listed, and
// PathApps/{client_id} where one is disconnected (see [Server.AppsHandler]).
const PathApps = "/api/oauth/apps"

// maxAppClientID bounds a client_id in an apps path before the store is
// asked: the longest a metadata document's URL may be, and no registered
// id comes near it.
const maxAppClientID = 2048

var (
	errAppsUnauthenticated = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in to see your connected apps.")
	errAppNotFound         = httpx.Errorf(http.StatusNotFound, "not_found", "You have not connected this app, or it is already disconnected.")
)

// App is one of a person's connected apps, as GET PathApps lists it: a
// client the person consented to, and the consent. It holds nothing
// secret: no client secret (or its hash), nor the client's metadata as
// received, nor the address that registered it.
type App struct {
	ClientID string `json:"client_id"`
	// Name is the client's name, as the client gave it, without control
	// and formatting characters; it may be empty.
	Name string `json:"name"`
	// Kind says where the client came from: ClientKindRegistered,
	// ClientKindMetadataDocument (then ClientID is its document's URL) or
	// ClientKindConfigured.
	Kind string `json:"kind"`
	// RegisteredAt is when Usher first stored the client: its
	// registration, or the first fetch of its metadata document.
	RegisteredAt time.Time `json:"registered_at"`
	// RedirectHosts are where the client's authorization responses go:
	// the host (and port) of each https and http redirect URI, and
	// "scheme:" for a private-use scheme (an app on the device), each
	// once, in the client's order.
	RedirectHosts []string `json:"redirect_hosts"`
	// Scope and Resource are what the person consented to.
	Scope    string `json:"scope"`
	Resource string `json:"resource"`
	// ConsentedAt is when the person last consented; LastUsedAt when the
	// consent last let a token be issued (the consent's time until then).
	ConsentedAt time.Time  `json:"consented_at"`
	LastUsedAt  *time.Time `json:"last_used_at"`
}

// AppsHandler serves the signed-in person's connected apps:
//
//	GET    /api/oauth/apps              {"apps": [App, …]}: the consents not revoked, newest use first
//	DELETE /api/oauth/apps/{client_id}  204: revokes the consent and that person's refresh tokens of the client
//
// The client_id is one path segment, percent-encoded (a metadata
// document's URL has its slashes encoded as %2F). An app the person has
// not consented to, or whose consent is already revoked, is 404; any other
// method 405; errors are in the API's error shape (httpx.WriteError).
// Access tokens already issued to the app stay valid until they expire:
// they are broker tokens, verified by signature alone.
//
// It expects an authenticated request: mount it at PathApps and PathApps+"/"
// behind the API's authentication, which puts the principal in the
// context (identity.NewContext), and behind broker.RefuseTokens,
// so that an app cannot disconnect itself or others with its own token. A
// request without a principal is answered 401.
func (s *Server) AppsHandler() http.Handler {
	mux := http.NewServeMux()
	// Literal patterns: the OpenAPI document's test reads them from here.
	mux.HandleFunc("GET /api/oauth/apps", s.listApps)
	mux.HandleFunc("DELETE /api/oauth/apps/{client_id}", s.revokeApp)
	mux.HandleFunc(PathApps, s.appsMethodNotAllowed("GET, HEAD"))
	mux.HandleFunc(PathApps+"/{client_id}", s.appsMethodNotAllowed("DELETE"))
	mux.HandleFunc(PathApps+"/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, s.log, httpx.ErrNotFound)
	})
	return mux
}

// appsPrincipal returns the caller, or answers 401.
func (s *Server) appsPrincipal(w http.ResponseWriter, r *http.Request) (identity.Principal, bool) {
	p, ok := identity.FromContext(r.Context())
	if !ok || p.Issuer == "" || (p.ObjectID == "" && p.Subject == "") {
		httpx.WriteError(w, r, s.log, errAppsUnauthenticated)
		return identity.Principal{}, false
	}
	return p, true
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	p, ok := s.appsPrincipal(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	consents, err := s.st.ListConsents(ctx, p.ID())
	if err != nil {
		httpx.WriteError(w, r, s.log, err)
		return
	}
	apps := make([]App, 0, len(consents))
	for _, c := range consents {
		cl, err := s.st.GetOAuthClient(ctx, c.ClientID)
		if errors.Is(err, store.ErrNotFound) {
			// A consent outlives no client (the store refuses it), but if
			// one did, there would be nothing to show or use.
			continue
		}
		if err != nil {
			httpx.WriteError(w, r, s.log, err)
			return
		}
		apps = append(apps, appOf(cl, c))
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Apps []App `json:"apps"`
	}{apps})
}

// appOf is what the person sees of client cl and their consent c.
func appOf(cl store.OAuthClient, c store.Consent) App {
	a := App{
		ClientID:      cl.ID,
		Name:          displayText(cl.Name),
		Kind:          string(cl.Kind),
		RegisteredAt:  cl.CreatedAt.UTC(),
		RedirectHosts: appRedirectHosts(cl.RedirectURIs),
		Scope:         c.Scope,
		Resource:      c.Resource,
		ConsentedAt:   c.UpdatedAt.UTC(),
	}
	if !c.LastUsedAt.IsZero() {
		t := c.LastUsedAt.UTC()
		a.LastUsedAt = &t
	}
	return a
}

// appRedirectHosts names where a client's redirect URIs go: the host and
// port of an http(s) one, "scheme:" for a private-use scheme (RFC 8252
// §7.1), each once.
func appRedirectHosts(uris []string) []string {
	hosts := []string{}
	seen := map[string]bool{}
	for _, raw := range uris {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" {
			continue
		}
		h := strings.ToLower(u.Scheme) + ":"
		if s := strings.ToLower(u.Scheme); (s == "https" || s == "http") && u.Host != "" {
			h = u.Host
		}
		if h = displayText(h); h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func (s *Server) revokeApp(w http.ResponseWriter, r *http.Request) {
	p, ok := s.appsPrincipal(w, r)
	if !ok {
		return
	}
	id := r.PathValue("client_id")
	// An id no client can have is not looked up: it would only be refused
	// by the store, or hold it up.
	if id == "" || len(id) > maxAppClientID || !utf8.ValidString(id) || strings.ContainsFunc(id, unsafeRune) {
		httpx.WriteError(w, r, s.log, errAppNotFound)
		return
	}
	ctx := r.Context()
	c, err := s.st.GetConsent(ctx, p.ID(), id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		httpx.WriteError(w, r, s.log, errAppNotFound)
		return
	case err != nil:
		httpx.WriteError(w, r, s.log, err)
		return
	case !c.RevokedAt.IsZero():
		httpx.WriteError(w, r, s.log, errAppNotFound)
		return
	}
	now := s.clock()
	// The store revokes a standing consent once: a request that lost the
	// race to another (a double click, two tabs, two replicas) gets
	// ErrConflict, answers 404 like an app already disconnected, and
	// writes no second audit record.
	if err := s.st.RevokeConsent(ctx, p.ID(), id, now); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			err = errAppNotFound
		}
		httpx.WriteError(w, r, s.log, err)
		return
	}
	if err := s.record(ctx, audit.Entry{Kind: audit.KindOAuthConsentRevoked, Principal: p.ID(), ClientID: id},
		map[string]any{"by": "user", "scope": c.Scope, "resource": c.Resource}); err != nil {
		// The consent is revoked; only its record is missing. Say so
		// rather than pretend nothing happened.
		s.log.ErrorContext(ctx, "oauth: the consent is revoked, but its audit record was not written",
			"client_id", id, "err", err)
		httpx.WriteError(w, r, s.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// appsMethodNotAllowed answers 405 with the methods allow.
func (s *Server) appsMethodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httpx.WriteError(w, r, s.log, httpx.ErrMethodNotAllowed)
	}
}

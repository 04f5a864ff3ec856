package oauth

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// serveRegister is the Dynamic Client Registration endpoint (RFC 7591
// §3): a JSON POST, rate-limited per client address (ServerOptions.
// ClientAddr) across replicas. With
// registration off it is a 404 in OAuth error JSON.
func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !s.registration {
		WriteError(w, http.StatusNotFound, CodeInvalidRequest, "Dynamic Client Registration is off on this server.")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST, OPTIONS")
		WriteError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "Use POST.")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		WriteError(w, http.StatusBadRequest, CodeInvalidClientMetadata, "The registration request must be application/json.")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRegistrationBytes))
	if err != nil {
		WriteError(w, http.StatusBadRequest, CodeInvalidClientMetadata, "The registration request could not be read, or is larger than "+strconv.Itoa(MaxRegistrationBytes)+" bytes.")
		return
	}
	reg, err := ParseRegistration(body)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Write(w)
		} else {
			WriteError(w, http.StatusBadRequest, CodeInvalidClientMetadata, "The registration request is not valid.")
		}
		return
	}
	now := s.clock()
	addr := s.clientAddr(r)
	n, err := s.st.CountOAuthRegistrations(ctx, addr, now.Add(-time.Hour))
	if err != nil {
		s.serverError(w, r, "count the registrations", err)
		return
	}
	if n >= s.perHour {
		w.Header().Set("Retry-After", "3600")
		WriteError(w, http.StatusTooManyRequests, CodeTemporarilyUnavailable, "Too many registrations from this address; try again later.")
		return
	}
	cl := store.OAuthClient{
		ID: NewClientID(), Kind: store.OAuthClientRegistered, Name: reg.ClientName,
		RedirectURIs: reg.RedirectURIs, GrantTypes: reg.GrantTypes, AuthMethod: reg.AuthMethod,
		Metadata: reg.Raw, RegisteredBy: addr, CreatedAt: now,
	}
	var secret string
	if reg.AuthMethod == AuthClientSecretBasic {
		secret = NewSecret()
		cl.SecretHash = HashSecret(secret)
	}
	resp, err := reg.Response(cl.ID, secret, now)
	if err != nil {
		s.serverError(w, r, "answer the registration", err)
		return
	}
	if _, err := s.st.CreateOAuthClient(ctx, cl); err != nil {
		s.serverError(w, r, "store the client", err)
		return
	}
	err = s.record(ctx, audit.Entry{Kind: audit.KindOAuthClientRegistered, ClientID: cl.ID},
		map[string]any{"registered_by": addr, "client_name": cl.Name, "redirect_uris": cl.RedirectURIs, "auth_method": cl.AuthMethod})
	if err != nil {
		s.serverError(w, r, "audit the registration", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	noStore(w)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(resp, '\n'))
}

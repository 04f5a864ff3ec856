package oauth

import (
	"errors"
	"net/http"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// serveRevoke is the revocation endpoint (RFC 7009): the client, which
// authenticates as at the token endpoint, revokes one of its refresh
// tokens, and with it the token's whole family. token_type_hint is
// accepted and ignored.
//
// The family's grant is revoked with it, and so are the access tokens
// issued under it (RFC 7009 §2.1): they name the grant (grant_id), and
// Usher's MCP endpoint refuses a revoked grant's tokens
// (broker.VerifierOptions.GrantRevoked). An access token presented here
// is not looked up — it is a broker token, a short-lived JWT no store
// row stands for —: it, an unknown token, or another client's refresh
// token all get 200 and nothing is revoked (RFC 7009 §2.2: an invalid
// token is no error; another client's is not revealed).
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	form, ferr := readForm(w, r)
	if ferr != nil {
		ferr.Write(w)
		return
	}
	cl, cerr := s.authenticateClient(ctx, r, form)
	if cerr != nil {
		cerr.Write(w)
		return
	}
	token := form.Get("token")
	if token == "" {
		WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "token is required.")
		return
	}
	now := s.clock()
	// Only the client's own refresh tokens are revoked; anything else (an
	// access token, another client's token, nothing) is answered the same.
	hash := HashSecret(token)
	rt, err := s.st.GetRefreshToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		s.serverError(w, r, "read the refresh token", err)
		return
	case rt.ClientID == cl.ID:
		err := s.st.RevokeRefreshFamily(ctx, hash, now)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			s.serverError(w, r, "revoke the refresh token", err)
			return
		default:
			if err := s.record(ctx, audit.Entry{Kind: audit.KindOAuthTokenRevoked, Principal: rt.Principal, ClientID: cl.ID},
				map[string]any{"family": rt.FamilyID}); err != nil {
				s.serverError(w, r, "audit the revocation", err)
				return
			}
		}
	}
	noStore(w)
	w.WriteHeader(http.StatusOK)
}

package oauth

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
)

// Error codes of RFC 6749 §4.1.2.1 and §5.2, RFC 7591 §3.2.2, RFC 7009 §2.2.1
// and RFC 8707 §2.
const (
	CodeInvalidRequest          = "invalid_request"
	CodeInvalidClient           = "invalid_client"
	CodeInvalidGrant            = "invalid_grant"
	CodeUnauthorizedClient      = "unauthorized_client"
	CodeUnsupportedGrantType    = "unsupported_grant_type"
	CodeInvalidScope            = "invalid_scope"
	CodeAccessDenied            = "access_denied"
	CodeUnsupportedResponseType = "unsupported_response_type"
	CodeServerError             = "server_error"
	CodeTemporarilyUnavailable  = "temporarily_unavailable"
	CodeInvalidRedirectURI      = "invalid_redirect_uri"
	CodeInvalidClientMetadata   = "invalid_client_metadata"
	CodeUnsupportedTokenType    = "unsupported_token_type"
	CodeInvalidTarget           = "invalid_target"
)

// Error is an OAuth error as a client receives it: Code is the "error"
// member, Description its "error_description", URI its "error_uri", Status
// the HTTP status of a direct answer. Redirectable reports whether the
// authorization endpoint may send it to the client's redirect URI (RFC 6749
// §4.1.2.1) rather than show it to the user: false whenever the client or the
// redirect URI itself is in question.
//
// The functions of this package return a *Error; find it in a wrapped error
// with errors.As(err, &e) where e is a *Error.
type Error struct {
	Status       int    `json:"-"`
	Code         string `json:"error"`
	Description  string `json:"error_description,omitempty"`
	URI          string `json:"error_uri,omitempty"`
	Redirectable bool   `json:"-"`
}

// Error returns the code and the description.
func (e *Error) Error() string {
	if e.Description == "" {
		return e.Code
	}
	return e.Code + ": " + e.Description
}

// Write answers the request with e as WriteError does, with e.URI.
func (e *Error) Write(w http.ResponseWriter) {
	writeError(w, e.Status, e.Code, e.Description, e.URI)
}

// newError is a 400 error; redirectable says whether the authorization
// endpoint may redirect it.
func newError(code, description string, redirectable bool) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Description: description, Redirectable: redirectable}
}

// WriteError answers with the RFC 6749 §5.2 error body {"error": code,
// "error_description": description}, not to be cached (Cache-Control:
// no-store, Pragma: no-cache). A 401 — which OAuth sends only for a client
// that failed to authenticate at the token or revocation endpoint — carries
// `WWW-Authenticate: Basic realm="oauth"`, the scheme of the only client
// password method Usher accepts (§5.2: the challenge must match it).
//
// The code and description reach the client as they are, so they must be
// fit for it: no internal error text. Characters RFC 6749 does not allow in
// them (anything but printable ASCII without '"' and '\') are replaced by
// '?'; a code left empty becomes server_error; a status outside 400–599
// becomes 400.
func WriteError(w http.ResponseWriter, status int, code, description string) {
	writeError(w, status, code, description, "")
}

func writeError(w http.ResponseWriter, status int, code, description, uri string) {
	if status < 400 || status > 599 {
		status = http.StatusBadRequest
	}
	code = errorText(code)
	if code == "" {
		code = CodeServerError
	}
	body, _ := json.Marshal(Error{Code: code, Description: errorText(description), URI: errorText(uri)}) // strings only: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Basic realm="oauth"`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// errorText keeps s to RFC 6749's NQSCHAR set (%x20-21 / %x23-5B / %x5D-7E),
// replacing every other character with '?'.
func errorText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}

// RefuseBody returns the refusal of request bodies for the router that
// serves the server's endpoints among others ([httpx.ReadBodyFor]): a
// request to one of the endpoints (a path under the issuer's and /oauth/)
// is answered as an OAuth client reads it, any other by fallback (nil:
// [httpx.WriteRefusal]). At the registration endpoint that is
// invalid_client_metadata (RFC 7591 §3.2.2), at the authorization
// endpoint the answer of a refusal that is not redirected, elsewhere
// invalid_request (RFC 6749 §5.2). A body too large is a 400, as each
// endpoint answers one over its own, smaller limit; a body too slow keeps
// its 408.
func (s *Server) RefuseBody(fallback httpx.Refusal) httpx.Refusal {
	if fallback == nil {
		fallback = httpx.WriteRefusal
	}
	base := s.basePath()
	return func(w http.ResponseWriter, r *http.Request, e *httpx.Error) {
		path := r.URL.Path
		if !strings.HasPrefix(path, base+"/oauth/") {
			fallback(w, r, e)
			return
		}
		oe := &Error{Status: e.Status, Code: CodeInvalidRequest, Description: e.Message}
		if e.Status == http.StatusRequestEntityTooLarge {
			oe.Status = http.StatusBadRequest
		}
		switch path {
		case base + PathRegister:
			oe.Code = CodeInvalidClientMetadata
		case base + PathAuthorize, base + PathAuthorizeContinue:
			showError(w, r, oe)
			return
		}
		oe.Write(w)
	}
}

package oauth

import (
	"net/url"
	"strings"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/httpx"
)

// maxStateLen bounds the state parameter: opaque to Usher, echoed to the
// client, so it must not be a way to make Usher send megabytes.
const maxStateLen = 1000

// AuthorizeRequest is a parsed authorization request (RFC 6749 §4.1.1 with
// PKCE and RFC 8707's resource).
type AuthorizeRequest struct {
	ClientID            string
	RedirectURI         string
	State               string // opaque, echoed in the redirect; may be empty
	Scope               string // space-separated; mcp:invoke when the request named none
	CodeChallenge       string
	CodeChallengeMethod string // S256
	Resource            string // the MCP resource the tokens are for
}

// ParseAuthorize validates the query of an authorization request:
// client_id and redirect_uri present, once each, and well-formed (a
// redirect URI as [CheckRedirectURI] accepts); no parameter twice (RFC 6749
// §3.1); response_type code (missing: invalid_request, another:
// unsupported_response_type); response_mode, if any, query; state at most
// 1,000 characters of RFC 6749's VSCHAR set; scope well-formed and only
// mcp:invoke, besides offline_access, which is accepted and ignored
// (invalid_scope otherwise); PKCE as [CheckChallenge]; resource as
// [CheckResource] (exactly one, so several are its invalid_target rather
// than a repeated parameter). Whether the client exists, the redirect URI is
// one of its own and the resource one of Usher's, the caller checks.
//
// An error is a *Error whose Redirectable says whether RFC 6749 §4.1.2.1
// lets it go to the redirect URI: never for a bad client_id or redirect_uri
// (show it to the user instead), and even then only after the caller has
// matched the client and its redirect URI. The returned request holds what
// was parsed before the error — always the client id and redirect URI of a
// redirectable one, and the state when it was valid — so that
// [AuthorizeRequest.ErrorRedirect] can be built from it.
func ParseAuthorize(q url.Values) (AuthorizeRequest, error) {
	var a AuthorizeRequest
	var ok bool
	if a.ClientID, ok = single(q, "client_id"); !ok || a.ClientID == "" {
		return a, newError(CodeInvalidRequest, "client_id is required, once.", false)
	}
	if len(a.ClientID) > maxURILen || !httpx.URIChars(a.ClientID) {
		return a, newError(CodeInvalidRequest, "client_id is malformed.", false)
	}
	if a.RedirectURI, ok = single(q, "redirect_uri"); !ok || a.RedirectURI == "" {
		return a, newError(CodeInvalidRequest, "redirect_uri is required, once.", false)
	}
	if clientmeta.RedirectURIProblem(a.RedirectURI) != "" {
		return a, newError(CodeInvalidRequest, "redirect_uri is not a valid redirect URI.", false)
	}
	// From here on the error can reach the client.
	state, ok := single(q, "state")
	if ok && !validState(state) {
		return a, newError(CodeInvalidRequest, "state is too long or has characters it may not have.", true)
	}
	a.State = state
	for name, values := range q {
		// RFC 8707 allows several resources; CheckResource refuses them
		// with its own, more telling error.
		if len(values) > 1 && name != "resource" {
			return a, newError(CodeInvalidRequest, "A parameter appears more than once.", true)
		}
	}
	switch rt := q.Get("response_type"); rt {
	case ResponseTypeCode:
	case "":
		return a, newError(CodeInvalidRequest, "response_type is required: code.", true)
	default:
		return a, newError(CodeUnsupportedResponseType, "Only response_type code is supported.", true)
	}
	if mode := q.Get("response_mode"); mode != "" && mode != "query" {
		return a, newError(CodeInvalidRequest, "Only response_mode query is supported.", true)
	}
	scope, err := parseScope(q.Get("scope"))
	if err != nil {
		return a, err
	}
	a.Scope = scope
	a.CodeChallenge, a.CodeChallengeMethod = q.Get("code_challenge"), q.Get("code_challenge_method")
	if err := CheckChallenge(a.CodeChallengeMethod, a.CodeChallenge); err != nil {
		return a, err
	}
	if a.Resource, err = CheckResource(q["resource"]); err != nil {
		return a, err
	}
	return a, nil
}

// single returns the one value of name in q; ok is false when it appears
// more than once. An absent parameter is "", true.
func single(q url.Values, name string) (string, bool) {
	v := q[name]
	switch len(v) {
	case 0:
		return "", true
	case 1:
		return v[0], true
	}
	return "", false
}

// validState checks RFC 6749 Appendix A.5 (VSCHAR: %x20-7E) and the length
// bound.
func validState(s string) bool {
	if len(s) > maxStateLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ScopeOfflineAccess is OpenID Connect's request for a refresh token
// (OIDC Core §11), which some MCP clients add to every authorization
// request. Usher accepts it and grants nothing for it: whether a client
// gets refresh tokens is its registered grant types' question, so the
// granted scope stays mcp:invoke. It is not in scopes_supported, so that
// the clients that add it only when the server lists it do not.
const ScopeOfflineAccess = "offline_access"

// parseScope checks a requested scope: well-formed, and only scopes Usher
// has, and offline_access, which is ignored; it returns the scope granted,
// mcp:invoke — also when none was requested. Repeated tokens collapse.
func parseScope(s string) (string, error) {
	if s == "" {
		return broker.ScopeInvoke, nil
	}
	if !validScope(s) {
		return "", newError(CodeInvalidScope, "scope is malformed.", true)
	}
	for _, tok := range strings.Split(s, " ") {
		if tok != broker.ScopeInvoke && tok != ScopeOfflineAccess {
			return "", newError(CodeInvalidScope, "The only scope is mcp:invoke.", true)
		}
	}
	return broker.ScopeInvoke, nil
}

// CheckResource accepts the values of the resource parameter of an
// authorization or token request (RFC 8707 §2): exactly one, an absolute
// URI of at most 2,000 characters without fragment, and returns it. Usher
// issues tokens for one resource at a time, so two values are refused.
// Whether it names one of Usher's MCP resources the caller checks. Errors
// are invalid_target *Error values (redirectable at the authorization
// endpoint).
func CheckResource(values []string) (string, error) {
	switch {
	case len(values) == 0 || len(values) == 1 && values[0] == "":
		return "", newError(CodeInvalidTarget, "resource is required: the URL of the MCP server (RFC 8707).", true)
	case len(values) > 1:
		return "", newError(CodeInvalidTarget, "Exactly one resource, please.", true)
	}
	r := values[0]
	if len(r) > maxURILen || !httpx.URIChars(r) || strings.Contains(r, "#") {
		return "", newError(CodeInvalidTarget, "resource must be an absolute URI without fragment.", true)
	}
	u, err := url.Parse(r)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil {
		return "", newError(CodeInvalidTarget, "resource must be an absolute URI without fragment.", true)
	}
	return r, nil
}

// Redirect is the success redirect of the request (RFC 6749 §4.1.2): the
// redirect URI, its own query kept byte for byte, with code, state (when
// the request had one) and iss (RFC 9207: the issuer, so that a client
// talking to several authorization servers can tell which answered) added.
func (a AuthorizeRequest) Redirect(code, iss string) string {
	v := url.Values{"code": {code}, "iss": {iss}}
	if a.State != "" {
		v.Set("state", a.State)
	}
	return appendQuery(a.RedirectURI, v)
}

// ErrorRedirect is the error redirect of the request (RFC 6749 §4.1.2.1):
// the redirect URI with error, error_description, error_uri (when e has
// them; a nil e is server_error), state and iss added. Use it only for a redirectable e, after the
// client and its redirect URI have been matched.
func (a AuthorizeRequest) ErrorRedirect(e *Error, iss string) string {
	if e == nil {
		e = &Error{Code: CodeServerError}
	}
	v := url.Values{"error": {errorText(e.Code)}, "iss": {iss}}
	if e.Description != "" {
		v.Set("error_description", errorText(e.Description))
	}
	if e.URI != "" {
		v.Set("error_uri", errorText(e.URI))
	}
	if a.State != "" {
		v.Set("state", a.State)
	}
	return appendQuery(a.RedirectURI, v)
}

// appendQuery adds v to uri's query, leaving what uri already has as it is
// (RFC 6749 §3.1.2: the redirect URI's query must be retained).
func appendQuery(uri string, v url.Values) string {
	switch {
	case !strings.Contains(uri, "?"):
		return uri + "?" + v.Encode()
	case strings.HasSuffix(uri, "?") || strings.HasSuffix(uri, "&"):
		return uri + v.Encode()
	default:
		return uri + "&" + v.Encode()
	}
}

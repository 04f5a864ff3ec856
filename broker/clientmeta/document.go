package clientmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Limits of a document's members: generous for real clients, small enough
// that a document cannot fill the consent page or the store.
const (
	maxNameRunes    = 200
	maxURILen       = 2048
	maxRedirectURIs = 32
	maxScopeLen     = 1024
	// MaxDepth bounds how deeply a document's objects and arrays nest,
	// its own object counting as the first level: client metadata is
	// flat (a jwks member is 3 deep), and the stored document must be
	// JSON every engine's checks accept (SQLite's json_valid stops at
	// 1,000).
	MaxDepth = 32
)

// Document is a validated Client ID Metadata Document. A Document returned
// by Fetch is the caller's own copy.
type Document struct {
	ClientID     string   `json:"client_id"`
	ClientName   string   `json:"client_name"`
	ClientURI    string   `json:"client_uri,omitempty"`
	LogoURI      string   `json:"logo_uri,omitempty"`
	RedirectURIs []string `json:"redirect_uris"`
	// GrantTypes defaults to ["authorization_code"] (RFC 7591 §2).
	GrantTypes []string `json:"grant_types"`
	// ResponseTypes defaults to ["code"] (RFC 7591 §2).
	ResponseTypes []string `json:"response_types"`
	// TokenEndpointAuthMethod is "none" (also when absent) or
	// "private_key_jwt".
	TokenEndpointAuthMethod string          `json:"token_endpoint_auth_method"`
	JWKSURI                 string          `json:"jwks_uri,omitempty"`
	JWKS                    json.RawMessage `json:"jwks,omitempty"`
	Scope                   string          `json:"scope,omitempty"`
	// Raw is the document as received, byte for byte (for the store's
	// OAuthClient.Metadata).
	Raw json.RawMessage `json:"-"`
}

// RedirectURIAllowed reports whether uri is one of the document's
// redirect_uris, by exact string comparison: no case, trailing-slash, port
// or query leniency.
func (d *Document) RedirectURIAllowed(uri string) bool {
	return slices.Contains(d.RedirectURIs, uri)
}

// clone returns a deep copy of d, so that callers cannot change the cache.
func (d *Document) clone() *Document {
	c := *d
	c.RedirectURIs = slices.Clone(d.RedirectURIs)
	c.GrantTypes = slices.Clone(d.GrantTypes)
	c.ResponseTypes = slices.Clone(d.ResponseTypes)
	c.JWKS = bytes.Clone(d.JWKS)
	c.Raw = bytes.Clone(d.Raw)
	return &c
}

// wireDocument is the document as decoded, with the members that must not
// be there.
type wireDocument struct {
	Document              `json:",inline"`
	ClientSecret          json.RawMessage `json:"client_secret"`
	ClientSecretExpiresAt json.RawMessage `json:"client_secret_expires_at"`
}

// grantTypes are the grant types a metadata-document client may name.
var grantTypes = []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:token-exchange"}

// parseDocument decodes and validates body as the document of clientID.
func parseDocument(clientID string, body []byte) (*Document, *Error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, refuse("the client metadata document is not a JSON object")
	}
	if !utf8.Valid(body) {
		return nil, refuse("the client metadata document is not UTF-8")
	}
	// encoding/json/v2 semantics: member names match exactly, and a name
	// twice is an error, so that no two readers of Raw can disagree on
	// which redirect_uris the document names.
	var w wireDocument
	if err := jsonv2.Unmarshal(body, &w); err != nil {
		return nil, fail("the client metadata document is not valid JSON of client metadata", err)
	}
	if tooDeep(body) {
		return nil, refuse("the client metadata document nests objects and arrays too deep")
	}
	d := &w.Document
	d.Raw = bytes.Clone(body)
	if d.ClientID != clientID {
		return nil, refuse("the client metadata document's client_id is not its URL")
	}
	if w.ClientSecret != nil || w.ClientSecretExpiresAt != nil {
		return nil, refuse("a client metadata document cannot hold a client secret")
	}
	if err := validate(d); err != nil {
		return nil, err
	}
	return d, nil
}

// tooDeep reports whether the JSON body nests objects and arrays deeper
// than MaxDepth anywhere.
func tooDeep(body []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		if _, err := dec.ReadToken(); err != nil {
			return false // the end, or JSON that Unmarshal has refused
		}
		if dec.StackDepth() > MaxDepth {
			return true
		}
	}
}

// validate checks the members of d and fills in the defaults.
func validate(d *Document) *Error {
	if err := checkName(d.ClientName); err != nil {
		return err
	}
	if err := checkRedirectURIs(d.RedirectURIs); err != nil {
		return err
	}
	for _, m := range []struct{ name, uri string }{{"client_uri", d.ClientURI}, {"logo_uri", d.LogoURI}} {
		if m.uri != "" && !isWebURL(m.uri, false) {
			return refuse("the client metadata document's " + m.name + " is not an http(s) URL")
		}
	}
	if len(d.GrantTypes) == 0 {
		d.GrantTypes = []string{"authorization_code"}
	}
	for _, g := range d.GrantTypes {
		if !slices.Contains(grantTypes, g) {
			return refuse("the client metadata document names an unsupported grant type")
		}
	}
	if len(d.ResponseTypes) == 0 {
		d.ResponseTypes = []string{"code"}
	}
	for _, r := range d.ResponseTypes {
		if r != "code" {
			return refuse("the client metadata document names an unsupported response type")
		}
	}
	if err := checkAuth(d); err != nil {
		return err
	}
	return checkScope(d.Scope)
}

// checkName requires a client_name of printable text: it is shown on the
// consent page, where control and bidirectional-override characters could
// make it read as another client's.
func checkName(name string) *Error {
	if strings.TrimSpace(name) == "" {
		return refuse("the client metadata document has no client_name")
	}
	if utf8.RuneCountInString(name) > maxNameRunes {
		return refuse("the client metadata document's client_name is too long")
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == utf8.RuneError {
			return refuse("the client metadata document's client_name has control characters")
		}
	}
	return nil
}

// checkRedirectURIs requires at least one redirect URI and accepts only
// those RedirectURIProblem accepts, the rule of every client of Usher's
// authorization server. Why one was refused goes to the error's Cause, for
// the logs.
func checkRedirectURIs(uris []string) *Error {
	if len(uris) == 0 {
		return refuse("the client metadata document has no redirect_uris")
	}
	if len(uris) > maxRedirectURIs {
		return refuse("the client metadata document has too many redirect_uris")
	}
	for _, raw := range uris {
		if problem := RedirectURIProblem(raw); problem != "" {
			return fail("the client metadata document has a redirect_uri that is not acceptable", errors.New(problem))
		}
	}
	return nil
}

// isWebURL reports whether raw is an absolute http(s) URL with a host
// (https only when httpsOnly), without user info or fragment.
func isWebURL(raw string, httpsOnly bool) bool {
	if len(raw) > maxURILen || strings.Contains(raw, "#") {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	return u.Scheme == "https" || (!httpsOnly && u.Scheme == "http")
}

// checkAuth accepts the authentication methods a document can use: none,
// or private_key_jwt with its keys (jwks_uri or jwks, not both: RFC 7591 §2).
func checkAuth(d *Document) *Error {
	switch d.TokenEndpointAuthMethod {
	case "":
		d.TokenEndpointAuthMethod = "none"
	case "none", "private_key_jwt":
	case "client_secret_basic", "client_secret_post", "client_secret_jwt":
		return refuse("a client metadata document cannot use a client secret")
	default:
		return refuse("the client metadata document names an unsupported token_endpoint_auth_method")
	}
	hasJWKS := len(d.JWKS) > 0 && string(d.JWKS) != "null"
	if !hasJWKS {
		d.JWKS = nil
	}
	if d.JWKSURI != "" && hasJWKS {
		return refuse("the client metadata document has both jwks_uri and jwks")
	}
	if d.JWKSURI != "" && !isWebURL(d.JWKSURI, true) {
		return refuse("the client metadata document's jwks_uri is not an https URL")
	}
	if hasJWKS {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := jsonv2.Unmarshal(d.JWKS, &set); err != nil || len(set.Keys) == 0 {
			return refuse("the client metadata document's jwks is not a key set")
		}
	}
	if d.TokenEndpointAuthMethod == "private_key_jwt" && d.JWKSURI == "" && !hasJWKS {
		return refuse("private_key_jwt needs jwks_uri or jwks in the client metadata document")
	}
	return nil
}

// checkScope accepts a space-separated list of RFC 6749 §3.3 scope tokens.
func checkScope(scope string) *Error {
	if len(scope) > maxScopeLen {
		return refuse("the client metadata document's scope is too long")
	}
	if scope == "" {
		return nil
	}
	for tok := range strings.SplitSeq(scope, " ") {
		if tok == "" {
			return refuse("the client metadata document's scope is not a list of scope tokens")
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c < 0x21 || c == '"' || c == '\\' || c > 0x7e {
				return refuse("the client metadata document's scope is not a list of scope tokens")
			}
		}
	}
	return nil
}

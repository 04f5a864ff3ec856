package oauth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/httpx"
)

// Limits of a registration request.
const (
	// MaxRegistrationBytes bounds a registration request's body; the
	// endpoint reads at most this much (http.MaxBytesReader), and
	// ParseRegistration refuses more.
	MaxRegistrationBytes = 16 << 10
	// MaxClientNameLen bounds client_name, in characters.
	MaxClientNameLen = 100
	// maxRedirectURIs bounds redirect_uris: a client needs a few.
	maxRedirectURIs = 10
	// MaxMetadataDepth bounds how deeply a registration request's objects
	// and arrays nest, the request's own object counting as the first
	// level: client metadata is flat, and the stored request must be JSON
	// every engine's checks accept (SQLite's json_valid stops at 1,000).
	MaxMetadataDepth = 32
)

// Registration is a validated RFC 7591 registration request: the client
// metadata Usher uses, with the defaults of RFC 7591 §2 filled in, and the
// request body as received (Raw), which keeps the members Usher ignores.
type Registration struct {
	RedirectURIs  []string
	GrantTypes    []string // ⊆ authorization_code, refresh_token; default [authorization_code]
	ResponseTypes []string // [code]
	AuthMethod    string   // token_endpoint_auth_method: none or client_secret_basic (the default)
	ClientName    string   // may be empty
	ClientURI     string   // may be empty
	LogoURI       string   // may be empty
	Scope         string   // the scope Usher registers: always mcp:invoke
	Raw           json.RawMessage
}

// registrationRequest is the members of a registration request Usher
// reads. Pointers tell an absent member from an empty one.
type registrationRequest struct {
	RedirectURIs  *[]string `json:"redirect_uris"`
	GrantTypes    *[]string `json:"grant_types"`
	ResponseTypes *[]string `json:"response_types"`
	AuthMethod    *string   `json:"token_endpoint_auth_method"`
	ClientName    *string   `json:"client_name"`
	ClientURI     *string   `json:"client_uri"`
	LogoURI       *string   `json:"logo_uri"`
	Scope         *string   `json:"scope"`
}

// registrationMembers are the JSON names of registrationRequest's fields.
var registrationMembers = []string{
	"redirect_uris", "grant_types", "response_types", "token_endpoint_auth_method",
	"client_name", "client_uri", "logo_uri", "scope",
}

// ParseRegistration validates the body of a Dynamic Client Registration
// request (RFC 7591 §3.1): one JSON object of at most MaxRegistrationBytes,
// valid UTF-8, no member twice (nor in another case), objects and arrays
// nested at most MaxMetadataDepth deep, anywhere in it; redirect_uris required, 1 to 10 URIs each
// passing [CheckRedirectURI] (else invalid_redirect_uri); grant_types ⊆
// {authorization_code, refresh_token} and containing authorization_code;
// response_types ⊆ {code}; token_endpoint_auth_method none or
// client_secret_basic (RFC 7591's default; a document-borne client uses
// private_key_jwt through a metadata document instead); client_name at most
// MaxClientNameLen characters with no control or bidirectional-formatting
// characters; client_uri and logo_uri https; scope well-formed (Usher grants
// mcp:invoke whatever is asked). Other members are kept in Raw and ignored.
// Its errors are *Error values of RFC 7591 §3.2.2.
func ParseRegistration(body []byte) (Registration, error) {
	var reg Registration
	if len(body) > MaxRegistrationBytes {
		return reg, metadataError("The registration request is larger than %d bytes.", MaxRegistrationBytes)
	}
	if !utf8.Valid(body) {
		return reg, metadataError("The registration request is not valid UTF-8.")
	}
	if err := checkObject(body); err != nil {
		return reg, err
	}
	var req registrationRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return reg, metadataError("A client metadata member has the wrong type.")
	}
	reg.Raw = json.RawMessage(bytes.Clone(body))
	var err error
	if reg.RedirectURIs, err = redirectURIs(req.RedirectURIs); err != nil {
		return reg, err
	}
	if reg.GrantTypes, err = subset("grant_types", req.GrantTypes, []string{GrantAuthorizationCode}, GrantAuthorizationCode, GrantRefreshToken); err != nil {
		return reg, err
	}
	if !slices.Contains(reg.GrantTypes, GrantAuthorizationCode) {
		return reg, metadataError("grant_types must include authorization_code.")
	}
	if reg.ResponseTypes, err = subset("response_types", req.ResponseTypes, []string{ResponseTypeCode}, ResponseTypeCode); err != nil {
		return reg, err
	}
	if reg.AuthMethod, err = authMethod(req.AuthMethod); err != nil {
		return reg, err
	}
	if reg.ClientName, err = clientName(req.ClientName); err != nil {
		return reg, err
	}
	if reg.ClientURI, err = httpsURI("client_uri", req.ClientURI); err != nil {
		return reg, err
	}
	if reg.LogoURI, err = httpsURI("logo_uri", req.LogoURI); err != nil {
		return reg, err
	}
	if req.Scope != nil && !validScope(*req.Scope) {
		return reg, metadataError("scope is not a space-separated list of scope tokens.")
	}
	reg.Scope = broker.ScopeInvoke
	return reg, nil
}

// metadataError is an invalid_client_metadata *Error.
func metadataError(format string, args ...any) *Error {
	return newError(CodeInvalidClientMetadata, fmt.Sprintf(format, args...), false)
}

// checkObject accepts body when it is exactly one JSON object none of whose
// members appears twice — encoding/json would keep the last of two, and the
// stored request (Raw) must not read differently from what was checked —
// and whose values nest at most MaxMetadataDepth deep.
func checkObject(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return metadataError("The registration request must be a JSON object.")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return metadataError("The registration request is not valid JSON.")
		}
		name, _ := tok.(string) // inside an object, a token here is a member name
		// encoding/json matches member names regardless of case, so
		// "Redirect_URIs" would be read as redirect_uris: refuse what it
		// would read twice, and the case variants of the members it reads.
		folded := strings.ToLower(name)
		if seen[folded] {
			return metadataError("The member '%s' appears twice.", truncate(name, 40))
		}
		seen[folded] = true
		if slices.Contains(registrationMembers, folded) && folded != name {
			return metadataError("Member names are case-sensitive: '%s'.", truncate(name, 40))
		}
		if err := skipValue(dec, 1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return metadataError("The registration request is not valid JSON.")
	}
	if _, err := dec.Token(); err != io.EOF {
		return metadataError("The registration request must be one JSON object.")
	}
	return nil
}

// skipValue reads the next value of dec, found inside depth levels of
// objects and arrays, refusing one that opens more than MaxMetadataDepth
// in all. The recursion is as deep as the levels, so bounded too.
func skipValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return metadataError("The registration request is not valid JSON.")
	}
	open, ok := tok.(json.Delim)
	if !ok {
		return nil // a string, number, boolean or null
	}
	if depth++; depth > MaxMetadataDepth {
		return metadataError("The registration request nests objects and arrays more than %d deep.", MaxMetadataDepth)
	}
	for dec.More() {
		if open == '{' {
			if _, err := dec.Token(); err != nil { // the member name
				return metadataError("The registration request is not valid JSON.")
			}
		}
		if err := skipValue(dec, depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return metadataError("The registration request is not valid JSON.")
	}
	return nil
}

// redirectURIs checks the redirect_uris member.
func redirectURIs(v *[]string) ([]string, error) {
	if v == nil || len(*v) == 0 {
		return nil, newError(CodeInvalidRedirectURI, "redirect_uris is required.", false)
	}
	if len(*v) > maxRedirectURIs {
		return nil, newError(CodeInvalidRedirectURI, fmt.Sprintf("At most %d redirect_uris.", maxRedirectURIs), false)
	}
	for _, u := range *v {
		if err := CheckRedirectURI(u); err != nil {
			return nil, err
		}
	}
	return slices.Clone(*v), nil
}

// subset checks that a list member holds only allowed values, once each; an
// absent member is def.
func subset(member string, v *[]string, def []string, allowed ...string) ([]string, error) {
	if v == nil {
		return def, nil
	}
	if len(*v) == 0 {
		return nil, metadataError("%s must not be empty.", member)
	}
	for i, s := range *v {
		if !slices.Contains(allowed, s) {
			return nil, metadataError("%s may hold only %s.", member, strings.Join(allowed, ", "))
		}
		if slices.Contains((*v)[:i], s) {
			return nil, metadataError("%s holds a value twice.", member)
		}
	}
	return slices.Clone(*v), nil
}

// authMethod checks token_endpoint_auth_method; absent means
// client_secret_basic (RFC 7591 §2).
func authMethod(v *string) (string, error) {
	if v == nil {
		return AuthClientSecretBasic, nil
	}
	switch *v {
	case AuthNone, AuthClientSecretBasic:
		return *v, nil
	}
	return "", metadataError("token_endpoint_auth_method must be none or client_secret_basic.")
}

// clientName checks client_name.
func clientName(v *string) (string, error) {
	if v == nil {
		return "", nil
	}
	name := *v
	if utf8.RuneCountInString(name) > MaxClientNameLen {
		return "", metadataError("client_name is longer than %d characters.", MaxClientNameLen)
	}
	for _, r := range name {
		if unsafeRune(r) {
			return "", metadataError("client_name has control or formatting characters.")
		}
	}
	if strings.TrimSpace(name) != name {
		return "", metadataError("client_name must not begin or end with white space.")
	}
	return name, nil
}

// unsafeRune reports whether r is a character a displayed name must not
// have: controls (C0, C1), format characters (bidirectional overrides and
// isolates, zero-width joiners), line and paragraph separators, and the
// replacement character invalid UTF-8 decodes to.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) ||
		unicode.Is(unicode.Zp, r) || r == utf8.RuneError
}

// httpsURI checks an optional URI member a consent page may link to.
func httpsURI(member string, v *string) (string, error) {
	if v == nil || *v == "" {
		return "", nil
	}
	u := *v
	if len(u) > maxURILen || !httpx.URIChars(u) || !strings.HasPrefix(u, "https://") || strings.ContainsAny(u, "#@") {
		return "", metadataError("%s must be an https URL.", member)
	}
	if p, err := url.Parse(u); err != nil || p.Hostname() == "" {
		return "", metadataError("%s must be an https URL.", member)
	}
	return u, nil
}

// validScope checks RFC 6749 §3.3: scope tokens of %x21 / %x23-5B / %x5D-7E
// separated by single spaces.
func validScope(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxScopeLen {
		return false
	}
	for _, tok := range strings.Split(s, " ") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
				return false
			}
		}
	}
	return true
}

// maxScopeLen bounds a scope parameter or member.
const maxScopeLen = 1000

// registrationResponse is the body of RFC 7591 §3.2.1.
type registrationResponse struct {
	ClientID              string   `json:"client_id"`
	ClientSecret          string   `json:"client_secret,omitempty"`
	ClientIDIssuedAt      int64    `json:"client_id_issued_at"`
	ClientSecretExpiresAt *int64   `json:"client_secret_expires_at,omitempty"`
	RedirectURIs          []string `json:"redirect_uris"`
	GrantTypes            []string `json:"grant_types"`
	ResponseTypes         []string `json:"response_types"`
	AuthMethod            string   `json:"token_endpoint_auth_method"`
	ClientName            string   `json:"client_name,omitempty"`
	ClientURI             string   `json:"client_uri,omitempty"`
	LogoURI               string   `json:"logo_uri,omitempty"`
	Scope                 string   `json:"scope"`
}

// Response is the body of the registration's success answer (RFC 7591
// §3.2.1, sent with 201 Created): the client id, the secret for a
// client_secret_basic client (which never expires:
// client_secret_expires_at 0) — none for a public one —, the issue time,
// and the metadata as registered. A secret for a public client, or none for
// a confidential one, is an error.
func (r Registration) Response(clientID, secret string, issuedAt time.Time) ([]byte, error) {
	switch {
	case clientID == "":
		return nil, fmt.Errorf("oauth: registration response without a client id")
	case r.AuthMethod == AuthNone && secret != "":
		return nil, fmt.Errorf("oauth: registration response: a public client gets no secret")
	case r.AuthMethod != AuthNone && secret == "":
		return nil, fmt.Errorf("oauth: registration response: a %s client needs a secret", r.AuthMethod)
	}
	resp := registrationResponse{
		ClientID:         clientID,
		ClientSecret:     secret,
		ClientIDIssuedAt: issuedAt.Unix(),
		RedirectURIs:     r.RedirectURIs,
		GrantTypes:       r.GrantTypes,
		ResponseTypes:    r.ResponseTypes,
		AuthMethod:       r.AuthMethod,
		ClientName:       r.ClientName,
		ClientURI:        r.ClientURI,
		LogoURI:          r.LogoURI,
		Scope:            r.Scope,
	}
	if secret != "" {
		never := int64(0)
		resp.ClientSecretExpiresAt = &never
	}
	return json.Marshal(resp)
}

// clientIDPrefix marks the ids Usher issues by registration, so that they
// cannot be mistaken for a metadata document's URL.
const clientIDPrefix = "usher-dcr-"

// NewClientID returns a new client id for a registered client: a fixed
// prefix and 128 random bits, base64url.
func NewClientID() string {
	return clientIDPrefix + randomText(16)
}

// NewSecret returns 256 random bits, base64url (43 characters): a client
// secret, an authorization code or a refresh token. Store only its
// [HashSecret].
func NewSecret() string {
	return randomText(32)
}

// randomText returns n bytes from crypto/rand, base64url without padding.
// crypto/rand.Read does not fail (it crashes the program if the system's
// generator does).
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// HashSecret returns the SHA-256 of secret, lowercase hex: what the store
// keeps of a client secret, code or refresh token. A plain hash is enough:
// the secret has 256 random bits, so there is nothing to guess.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CheckSecret reports whether secret hashes to hash, comparing in constant
// time. An empty secret or hash matches nothing.
func CheckSecret(secret, hash string) bool {
	if secret == "" || hash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(HashSecret(secret)), []byte(hash)) == 1
}

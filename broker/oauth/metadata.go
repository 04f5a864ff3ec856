package oauth

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/httpx"
)

// The authorization server's paths, relative to the issuer URL: the
// endpoints, and the well-known documents (RFC 8414 §3; for an issuer with
// a path, the metadata is at the path-inserted form, see
// [Metadata.WellKnownPaths]).
const (
	PathAuthorize           = "/oauth/authorize"
	PathToken               = "/oauth/token"
	PathRegister            = "/oauth/register"
	PathRevoke              = "/oauth/revoke"
	PathMetadata            = "/.well-known/oauth-authorization-server"
	PathOpenIDConfiguration = "/.well-known/openid-configuration"
)

// Values the metadata announces, and that the endpoints accept.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantRefreshToken      = "refresh_token"
	GrantTokenExchange     = "urn:ietf:params:oauth:grant-type:token-exchange"

	ResponseTypeCode = "code"
	MethodS256       = "S256"

	AuthNone              = "none"
	AuthClientSecretBasic = "client_secret_basic"
	AuthPrivateKeyJWT     = "private_key_jwt"
)

// metadataMaxAge is how long a client or a proxy may cache the metadata:
// short, so that a changed configuration is seen within minutes.
const metadataMaxAge = 300

// Metadata is the RFC 8414 authorization server metadata. [NewMetadata]
// fills it; a caller may clear RegistrationEndpoint when Dynamic Client
// Registration is off, or set ServiceDocumentation, before serving it.
type Metadata struct {
	Issuer                                 string   `json:"issuer"`
	AuthorizationEndpoint                  string   `json:"authorization_endpoint"`
	TokenEndpoint                          string   `json:"token_endpoint"`
	RegistrationEndpoint                   string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint                     string   `json:"revocation_endpoint"`
	ResponseTypesSupported                 []string `json:"response_types_supported"`
	ResponseModesSupported                 []string `json:"response_modes_supported"`
	GrantTypesSupported                    []string `json:"grant_types_supported"`
	CodeChallengeMethodsSupported          []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported      []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointAuthSigningAlgs           []string `json:"token_endpoint_auth_signing_alg_values_supported,omitempty"`
	RevocationEndpointAuthMethodsSupported []string `json:"revocation_endpoint_auth_methods_supported"`
	RevocationEndpointAuthSigningAlgs      []string `json:"revocation_endpoint_auth_signing_alg_values_supported,omitempty"`
	ScopesSupported                        []string `json:"scopes_supported"`
	ClientIDMetadataDocumentSupported      bool     `json:"client_id_metadata_document_supported"`
	AuthorizationResponseISSSupported      bool     `json:"authorization_response_iss_parameter_supported"`
	ServiceDocumentation                   string   `json:"service_documentation,omitempty"`
}

// NewMetadata builds the metadata of the authorization server whose issuer
// identifier is issuer (Usher's public URL): https, or http on a loopback
// host, without user info, query or fragment (RFC 8414 §2), and without a
// trailing slash, since the issuer is compared as a string (RFC 8414 §3.3,
// RFC 9207 §2.4) and the endpoints are the issuer followed by their path.
//
// The signing algorithms listed for private_key_jwt are required by RFC
// 8414 §2 whenever that method is: RS256 and ES256.
func NewMetadata(issuer string) (*Metadata, error) {
	if err := httpx.CheckEndpoint(issuer); err != nil {
		return nil, errors.New("oauth: issuer " + err.Error())
	}
	if strings.HasSuffix(issuer, "/") {
		return nil, errors.New("oauth: issuer must not end with a slash")
	}
	if u, _ := url.Parse(issuer); !plainPath(u.Path) || u.RawPath != "" {
		return nil, errors.New("oauth: issuer path must be plain: letters, digits, '-', '.', '_', '~' and '/'")
	}
	authMethods := []string{AuthNone, AuthClientSecretBasic, AuthPrivateKeyJWT}
	algs := []string{"RS256", "ES256"}
	return &Metadata{
		Issuer:                                 issuer,
		AuthorizationEndpoint:                  issuer + PathAuthorize,
		TokenEndpoint:                          issuer + PathToken,
		RegistrationEndpoint:                   issuer + PathRegister,
		RevocationEndpoint:                     issuer + PathRevoke,
		ResponseTypesSupported:                 []string{ResponseTypeCode},
		ResponseModesSupported:                 []string{"query"},
		GrantTypesSupported:                    []string{GrantAuthorizationCode, GrantRefreshToken, GrantTokenExchange},
		CodeChallengeMethodsSupported:          []string{MethodS256},
		TokenEndpointAuthMethodsSupported:      authMethods,
		TokenEndpointAuthSigningAlgs:           algs,
		RevocationEndpointAuthMethodsSupported: authMethods,
		RevocationEndpointAuthSigningAlgs:      algs,
		ScopesSupported:                        []string{broker.ScopeInvoke},
		ClientIDMetadataDocumentSupported:      true,
		AuthorizationResponseISSSupported:      true,
	}, nil
}

// plainPath reports whether p has only unreserved characters between
// single slashes, and no dot segments, so that it reads the same escaped
// and unescaped, to a router and to a client.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if !unreserved(p[i]) && p[i] != '/' {
			return false
		}
	}
	if p == "" {
		return true
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// issuerPath is the path of the issuer URL, "" for an issuer at a host's
// root.
func (m *Metadata) issuerPath() string {
	u, err := url.Parse(m.Issuer)
	if err != nil {
		return ""
	}
	return u.Path
}

// WellKnownPaths are the request paths, from the host's root, the router
// sends to [MetadataHandler]: the metadata at its RFC 8414 §3.1 place
// (PathMetadata, with the issuer's path inserted after it when the issuer
// has one), and the OpenID Connect discovery paths MCP clients also try
// (path-inserted and path-appended), which the handler answers with 404.
func (m *Metadata) WellKnownPaths() []string {
	p := m.issuerPath()
	if p == "" {
		return []string{PathMetadata, PathOpenIDConfiguration}
	}
	return []string{PathMetadata + p, PathOpenIDConfiguration + p, p + PathOpenIDConfiguration}
}

// MetadataHandler serves m at m's RFC 8414 well-known path (see
// [Metadata.WellKnownPaths]): GET and HEAD, as JSON, cacheable for five
// minutes, readable cross-origin (Access-Control-Allow-Origin: *), since
// browser-based MCP clients such as the Inspector fetch it from another
// origin. OPTIONS answers a CORS preflight (such clients send an
// MCP-Protocol-Version header, which makes the browser ask first); any other
// method is 405 with Allow.
//
// Usher is not an OpenID provider for these clients, so the OpenID
// configuration paths — and any other path the handler is given — answer
// 404 in OAuth error JSON, which clients parse, rather than the API's error
// shape, which they cannot.
func MetadataHandler(m *Metadata) http.Handler {
	body, _ := json.MarshalIndent(m, "", "  ") // strings, slices and bools only: cannot fail
	body = append(body, '\n')
	metadataPath := PathMetadata + m.issuerPath()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		if r.URL.Path != metadataPath {
			WriteError(w, http.StatusNotFound, CodeInvalidRequest, "No such document: this authorization server publishes its metadata at "+metadataPath+" only.")
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Accept, Mcp-Protocol-Version")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			h.Set("Allow", "GET, HEAD, OPTIONS")
			WriteError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "The metadata is read with GET.")
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "public, max-age="+strconv.Itoa(metadataMaxAge))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

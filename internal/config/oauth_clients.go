package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
)

// The client authentication methods of oauth.clients[].auth.
const (
	ClientAuthNone        = "none"
	ClientAuthSecretBasic = "client_secret_basic"
	ClientAuthPrivateJWT  = "private_key_jwt"
)

// minClientSecretLen is the shortest secret a secret_file may hold: a
// secret an operator generates (openssl rand -base64 32), not a password.
const minClientSecretLen = 32

// OAuthClient is a client of the authorization server pre-registered in
// the configuration file (oauth.clients): a confidential service, or a
// desktop client an organisation rolls out, that should not register
// itself. The authorization server checks the rest of it (the redirect
// URIs' form, the keys) when it starts.
type OAuthClient struct {
	// ID is the client_id, of the operator's choosing: letters, digits and
	// "-._~:" only, at most 100 characters — so never an https URL (a
	// metadata document's client_id) — and not beginning with
	// "usher-dcr-" (a registered client's).
	ID string `yaml:"id"`
	// Name is shown on the consent page.
	Name string `yaml:"name"`
	// RedirectURIs are matched exactly, as a registered client's are.
	// Required with the authorization_code grant.
	RedirectURIs []string `yaml:"redirect_uris"`
	// GrantTypes are among authorization_code and refresh_token. Default
	// both.
	GrantTypes []string `yaml:"grant_types"`
	// Auth is how the client authenticates at the token and revocation
	// endpoints: none (a public client, PKCE only), client_secret_basic
	// or private_key_jwt. Required.
	Auth string `yaml:"auth"`
	// SecretHash (client_secret_basic) is the SHA-256 of the secret, 64
	// lowercase hex digits (printf %s "$secret" | sha256sum); or
	// SecretFile names a file holding the secret itself (a mounted
	// secret; one trailing newline is ignored), hashed when Usher starts.
	// Exactly one. The secret itself never goes in this file.
	SecretHash string `yaml:"secret_hash"`
	SecretFile string `yaml:"secret_file"`
	// JWKSURI (private_key_jwt) is the https URL of the client's JSON Web
	// Key Set, fetched with the client metadata documents' SSRF rules and
	// cached; or JWKS is the key set itself, public keys only. Exactly
	// one.
	JWKSURI string         `yaml:"jwks_uri"`
	JWKS    map[string]any `yaml:"jwks"`
}

// Secret returns the SHA-256 (lowercase hex) of a client_secret_basic
// client's secret: SecretHash, or the hash of SecretFile's content.
func (c OAuthClient) Secret() (string, error) {
	if c.SecretFile == "" {
		return c.SecretHash, nil
	}
	b, err := readSecretFile(c.SecretFile)
	if err != nil {
		return "", fmt.Errorf("secret_file: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// KeySet returns JWKS as JSON, or nil when there is none.
func (c OAuthClient) KeySet() (json.RawMessage, error) {
	if c.JWKS == nil {
		return nil, nil
	}
	return json.Marshal(c.JWKS)
}

// validateClients checks oauth.clients, reporting by key.
func (o OAuth) validateClients(bad reporter) {
	seen := map[string]bool{}
	for i, c := range o.Clients {
		key := fmt.Sprintf("oauth.clients[%d]", i)
		switch {
		case c.ID == "":
			bad(key+".id", "must not be empty")
		case len(c.ID) > 100 || strings.Trim(c.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~:") != "":
			bad(key+".id", "may hold only letters, digits and -._~: (at most 100): an https URL is a metadata document's client_id, got %q", c.ID)
		case strings.HasPrefix(c.ID, "usher-dcr-"):
			bad(key+".id", "must not begin with usher-dcr-, the prefix of registered clients")
		case seen[c.ID]:
			bad(key+".id", "%q is given twice", c.ID)
		}
		seen[c.ID] = true
		grants := c.GrantTypes
		if len(grants) == 0 {
			grants = []string{"authorization_code", "refresh_token"}
		}
		for _, g := range grants {
			if g != "authorization_code" && g != "refresh_token" {
				bad(key+".grant_types", "may hold authorization_code and refresh_token, got %q", g)
			}
		}
		if slices.Contains(grants, "authorization_code") && len(c.RedirectURIs) == 0 {
			bad(key+".redirect_uris", "at least one is required with the authorization_code grant")
		}
		secrets := 0
		if c.SecretHash != "" {
			secrets++
		}
		if c.SecretFile != "" {
			secrets++
		}
		keys := 0
		if c.JWKSURI != "" {
			keys++
		}
		if c.JWKS != nil {
			keys++
		}
		switch c.Auth {
		case ClientAuthNone:
		case ClientAuthSecretBasic:
			if secrets != 1 {
				bad(key, "client_secret_basic needs exactly one of secret_hash and secret_file (never the secret itself)")
			} else if b, err := hex.DecodeString(c.SecretHash); c.SecretHash != "" && (err != nil || len(b) != sha256.Size || strings.ToLower(c.SecretHash) != c.SecretHash) {
				bad(key+".secret_hash", "must be the secret's SHA-256, 64 lowercase hex digits")
			} else if _, err := c.Secret(); err != nil {
				bad(key+"."+"secret_file", "%v", err)
			}
		case ClientAuthPrivateJWT:
			if keys != 1 {
				bad(key, "private_key_jwt needs exactly one of jwks_uri and jwks")
			} else if c.JWKSURI != "" {
				if err := checkKeySetURL(c.JWKSURI); err != nil {
					bad(key+".jwks_uri", "%v", err)
				}
			} else if _, err := c.KeySet(); err != nil {
				bad(key+".jwks", "is not a JSON Web Key Set: %v", err)
			}
		case "":
			bad(key+".auth", "is required: none, client_secret_basic or private_key_jwt")
		default:
			bad(key+".auth", "want none, client_secret_basic or private_key_jwt, got %q", c.Auth)
		}
		if c.Auth != ClientAuthSecretBasic && secrets > 0 {
			bad(key, "secret_hash and secret_file are only for auth client_secret_basic")
		}
		if c.Auth != ClientAuthPrivateJWT && keys > 0 {
			bad(key, "jwks_uri and jwks are only for auth private_key_jwt")
		}
	}
}

// checkKeySetURL accepts an https URL, or http on a loopback host (for
// development: Usher fetches loopback addresses only when its own public
// URL is on loopback).
func checkKeySetURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("want an absolute https URL without user info or fragment, got %q", s)
	}
	if u.Scheme == "https" || (u.Scheme == "http" && httpx.IsLoopbackHost(u.Hostname())) {
		return nil
	}
	return fmt.Errorf("must be https (http only on loopback), got %q", s)
}

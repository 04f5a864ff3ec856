package oauth

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// MaxConfiguredClientIDLen bounds a configured client's id.
const MaxConfiguredClientIDLen = 100

// ConfiguredClientGrants are the grant types a configured client may be
// given.
var ConfiguredClientGrants = []string{GrantAuthorizationCode, GrantRefreshToken}

// ConfiguredClient is a client of Usher's configuration: its operator
// chose its id and gave its redirect URIs and how it authenticates, and
// [Server.PutConfiguredClients] writes it to the store.
type ConfiguredClient struct {
	// ID is the client_id, chosen by the operator: see
	// CheckConfiguredClientID.
	ID string
	// Name is shown on the consent page.
	Name string
	// RedirectURIs are matched as a registered client's are; each passes
	// CheckRedirectURI. Required with the authorization_code grant.
	RedirectURIs []string
	// GrantTypes ⊆ ConfiguredClientGrants; refresh_token needs
	// authorization_code. Default [authorization_code, refresh_token].
	GrantTypes []string
	// AuthMethod is none, client_secret_basic or private_key_jwt.
	AuthMethod string
	// SecretHash is, for client_secret_basic, the SHA-256 (lowercase hex)
	// of the secret, as [HashSecret] computes it; empty otherwise.
	SecretHash string
	// JWKSURI (https) or JWKS (a JSON Web Key Set of public keys), exactly
	// one, for private_key_jwt; neither otherwise.
	JWKSURI string
	JWKS    json.RawMessage
}

// CheckConfiguredClientID accepts an operator's client id: 1 to
// MaxConfiguredClientIDLen characters of letters, digits and "-._~:", which
// neither a metadata document's URL (no "/") nor a registered client's id
// (which begins "usher-dcr-") can be, so that no client can take a
// configured client's id or the reverse.
func CheckConfiguredClientID(id string) error {
	switch {
	case id == "":
		return errors.New("the id is empty")
	case len(id) > MaxConfiguredClientIDLen:
		return fmt.Errorf("the id is longer than %d characters", MaxConfiguredClientIDLen)
	case strings.HasPrefix(id, clientIDPrefix):
		return fmt.Errorf("the id must not begin with %q, the prefix of registered clients", clientIDPrefix)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~:", r)) {
			return fmt.Errorf("the id %q may hold only letters, digits and -._~: (not an https URL: that is a metadata document's)", id)
		}
	}
	return nil
}

// check validates c and returns it as the store keeps it.
func (c ConfiguredClient) check() (store.OAuthClient, error) {
	var errs []error
	if err := CheckConfiguredClientID(c.ID); err != nil {
		errs = append(errs, err)
	}
	if _, err := clientName(&c.Name); err != nil {
		errs = append(errs, errors.New("the name is longer than 100 characters or has control characters"))
	}
	grants := c.GrantTypes
	if len(grants) == 0 {
		grants = ConfiguredClientGrants
	}
	for i, g := range grants {
		if !slices.Contains(ConfiguredClientGrants, g) || slices.Contains(grants[:i], g) {
			errs = append(errs, fmt.Errorf("grant_types may hold only %s, once each", strings.Join(ConfiguredClientGrants, ", ")))
			break
		}
	}
	code := slices.Contains(grants, GrantAuthorizationCode)
	if slices.Contains(grants, GrantRefreshToken) && !code {
		errs = append(errs, errors.New("the refresh_token grant needs authorization_code"))
	}
	if code && len(c.RedirectURIs) == 0 {
		errs = append(errs, errors.New("redirect_uris is required with the authorization_code grant"))
	}
	for _, u := range c.RedirectURIs {
		var e *Error
		if err := CheckRedirectURI(u); errors.As(err, &e) {
			errs = append(errs, fmt.Errorf("redirect URI %q: %s", u, e.Description))
		}
	}
	var metadata json.RawMessage
	keys := c.JWKSURI != "" || len(c.JWKS) > 0
	switch c.AuthMethod {
	case AuthNone:
	case AuthClientSecretBasic:
		if b, err := hex.DecodeString(c.SecretHash); err != nil || len(b) != 32 || strings.ToLower(c.SecretHash) != c.SecretHash {
			errs = append(errs, errors.New("client_secret_basic needs the secret's SHA-256, 64 lowercase hex digits"))
		}
	case AuthPrivateKeyJWT:
		switch {
		case c.JWKSURI != "" && len(c.JWKS) > 0:
			errs = append(errs, errors.New("give jwks_uri or jwks, not both"))
		case c.JWKSURI != "":
			if u, err := url.Parse(c.JWKSURI); err != nil || u.Host == "" || u.User != nil || u.Fragment != "" ||
				(u.Scheme != "https" && (u.Scheme != "http" || !isLoopbackName(u.Hostname()))) {
				errs = append(errs, errors.New("jwks_uri must be an https URL (http only on loopback, for development)"))
			}
			metadata, _ = json.Marshal(map[string]string{"jwks_uri": c.JWKSURI}) // a string: cannot fail
		case len(c.JWKS) > 0:
			if _, err := parseClientKeys(c.JWKS); err != nil {
				errs = append(errs, fmt.Errorf("jwks: %w", err))
			} else if metadata, err = json.Marshal(map[string]json.RawMessage{"jwks": c.JWKS}); err != nil {
				errs = append(errs, errors.New("jwks is not valid JSON"))
			}
		default:
			errs = append(errs, errors.New("private_key_jwt needs jwks_uri or jwks"))
		}
	default:
		errs = append(errs, fmt.Errorf("auth must be none, client_secret_basic or private_key_jwt, not %q", c.AuthMethod))
	}
	if c.AuthMethod != AuthClientSecretBasic && c.SecretHash != "" {
		errs = append(errs, errors.New("a secret is only for client_secret_basic"))
	}
	if c.AuthMethod != AuthPrivateKeyJWT && keys {
		errs = append(errs, errors.New("keys (jwks_uri, jwks) are only for private_key_jwt"))
	}
	if err := errors.Join(errs...); err != nil {
		return store.OAuthClient{}, fmt.Errorf("configured client %q: %w", c.ID, err)
	}
	return store.OAuthClient{
		ID: c.ID, Kind: store.OAuthClientConfigured, Name: c.Name, RedirectURIs: slices.Clone(c.RedirectURIs),
		GrantTypes: slices.Clone(grants), AuthMethod: c.AuthMethod, SecretHash: c.SecretHash, Metadata: metadata,
	}, nil
}

// checkConfiguredClients validates the configured clients, each id once,
// and returns them as the store keeps them.
func checkConfiguredClients(clients []ConfiguredClient) ([]store.OAuthClient, error) {
	var errs []error
	out := make([]store.OAuthClient, 0, len(clients))
	for i, c := range clients {
		if slices.ContainsFunc(clients[:i], func(o ConfiguredClient) bool { return o.ID == c.ID }) {
			errs = append(errs, fmt.Errorf("configured client %q is given twice", c.ID))
			continue
		}
		cl, err := c.check()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, cl)
	}
	return out, errors.Join(errs...)
}

// PutConfiguredClients writes the configured clients
// (ServerOptions.ConfiguredClients) to the store, creating or updating
// each: call it once at start, before serving. Replicas starting together
// may all call it. A client created, or whose registration changed, is
// audited (oauth_client_configured) in the same transaction, once across
// replicas; a start that changes nothing records nothing. A configured
// client revoked (usher clients revoke) stays revoked. A configured client
// the configuration no longer has is left in the store, and this server
// refuses it as unknown; it is not revoked, so that during a rolling
// change of the configuration a replica still running the old one revokes
// nothing the new one has. An id taken by a client of another kind is an
// error.
func (s *Server) PutConfiguredClients(ctx context.Context) error {
	for _, cl := range s.configuredClients {
		cl.CreatedAt, cl.UpdatedAt = s.clock(), s.clock() // an update keeps the CreatedAt stored
		_, _, err := s.st.PutConfiguredClient(ctx, cl, func(prev *store.OAuthClient) func(store.AuditHead) (store.AuditRecord, error) {
			return func(head store.AuditHead) (store.AuditRecord, error) {
				build, err := s.builder(audit.Entry{Kind: audit.KindOAuthClientConfigured, ClientID: cl.ID}, configuredDetails(prev, cl))
				if err != nil {
					return store.AuditRecord{}, err
				}
				return build(head)
			}
		})
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("oauth: configured client %q: the id is taken by a client that is not configured", cl.ID)
		}
		if err != nil {
			return fmt.Errorf("oauth: store configured client %q: %w", cl.ID, err)
		}
	}
	return nil
}

// configuredDetails are the details of the oauth_client_configured record
// of cl, created (prev nil) or updated from prev: its registration as it
// is now, and for an update what changed. The secret's hash is never
// recorded, only that it changed.
func configuredDetails(prev *store.OAuthClient, cl store.OAuthClient) map[string]any {
	d := map[string]any{
		"change": string(store.ClientCreated), "name": cl.Name, "redirect_uris": cl.RedirectURIs,
		"grant_types": cl.GrantTypes, "auth_method": cl.AuthMethod, "by": "the configuration (oauth.clients)",
	}
	if src, err := keySource(cl.Metadata); err == nil {
		if src.JWKSURI != "" {
			d["jwks_uri"] = src.JWKSURI
		} else {
			d["jwks"] = "in the configuration"
		}
	}
	if prev == nil {
		return d
	}
	d["change"] = string(store.ClientUpdated)
	changed := []string{}
	for field, differs := range map[string]bool{
		"name": prev.Name != cl.Name, "redirect_uris": !slices.Equal(prev.RedirectURIs, cl.RedirectURIs),
		"grant_types": !slices.Equal(prev.GrantTypes, cl.GrantTypes), "auth_method": prev.AuthMethod != cl.AuthMethod,
		"secret": prev.SecretHash != cl.SecretHash, "keys": !sameJSON(prev.Metadata, cl.Metadata),
	} {
		if differs {
			changed = append(changed, field)
		}
	}
	slices.Sort(changed)
	d["changed"] = changed
	return d
}

// sameJSON reports whether a and b (either may be empty, for none) are the
// same JSON value, however they are spaced: the store may give back a
// client's metadata compacted.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}

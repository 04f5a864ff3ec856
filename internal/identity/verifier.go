package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// MaxTokenBytes is the longest access token accepted. Entra tokens with the
// maximum of 200 group ids stay well below it.
const MaxTokenBytes = 32 << 10

// Errors returned by [Verifier.Verify]. They wrap a detail meant for logs
// only; callers branch with errors.Is and answer clients generically.
var (
	// ErrUnauthenticated means the token is missing, malformed, not signed
	// by a key of the issuer, from another issuer, expired, or not meant
	// for this API. HTTP: 401 with error="invalid_token".
	ErrUnauthenticated = errors.New("identity: unauthenticated")

	// ErrForbidden means the token is authentic and meant for this API but
	// its holder is not allowed: the tenant is not on the allow-list.
	// HTTP: 403.
	ErrForbidden = errors.New("identity: forbidden")

	// ErrInsufficientScope means a required scope is missing. It also
	// matches [ErrForbidden]. HTTP: 403 with error="insufficient_scope".
	ErrInsufficientScope = fmt.Errorf("%w: insufficient scope", ErrForbidden)

	// ErrAppToken means the token is authentic and meant for this API but
	// speaks for an application, not for a signed-in person: an app-only
	// (client credentials) token, which Entra marks "idtyp": "app" and
	// issues with application roles and no delegated scope. It also
	// matches [ErrForbidden]. HTTP: 403.
	ErrAppToken = fmt.Errorf("%w: app-only token", ErrForbidden)

	// ErrTooManyGroups means the token is authentic and meant for this
	// API but does not list its holder's groups: the person is in more
	// groups than the issuer puts in a token (Entra: over 200), and the
	// token says so ("_claim_names" naming "groups", or "hasgroups")
	// instead of carrying "groups". Such a person is refused rather than
	// let in without groups, which would drop every group-based rule
	// (a forbid, an approver group, a role) without a word. The remedy is
	// the issuer's: see [GroupOverageRemedy]. It also matches
	// [ErrForbidden]. HTTP: 403.
	ErrTooManyGroups = fmt.Errorf("%w: groups overage", ErrForbidden)
)

// GroupOverageRemedy tells an operator how to stop [ErrTooManyGroups].
const GroupOverageRemedy = "the token does not list the person's groups because there are too many; " +
	`in Entra ID, set the API app registration's groupMembershipClaims to "ApplicationGroup" and assign ` +
	"the groups the policy names to the application (Enterprise applications → Users and groups), so that " +
	"tokens carry only those, or name app roles instead of groups"

// Verifier verifies access tokens of one issuer. It is safe for concurrent
// use.
type Verifier struct {
	oidc           *oidc.IDTokenVerifier
	issuer         string
	multiTenant    bool
	audiences      []string
	requiredScopes []string
	tenants        []string
	logger         *slog.Logger
	keys           *remoteKeys
	now            func() time.Time
	verified       verifiedTokens
}

// New returns a Verifier for opts. Unless opts.JWKSURL is set, it fetches
// the issuer's discovery document — trying again for up to
// opts.DiscoveryRetry while the issuer is unavailable —, so ctx bounds
// that. Keys are fetched on first use.
func New(ctx context.Context, opts *Options) (*Verifier, error) {
	if opts == nil {
		opts = &Options{}
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := *opts
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	multiTenant := strings.Contains(o.Issuer, TenantPlaceholder)
	jwksURL := o.JWKSURL
	if jwksURL == "" {
		d, err := Discover(ctx, o.Issuer, o.HTTPClient, o.DiscoveryRetry, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("identity: discovery for %s: %w", o.Issuer, err)
		}
		jwksURL = d.JWKSURI
	}
	keys, err := newRemoteKeys(jwksURL, o.HTTPClient, o.Now, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return &Verifier{
		oidc: oidc.NewVerifier(o.Issuer, keys, &oidc.Config{
			// Access tokens are addressed to the API, not to a client:
			// Verify checks the audience against Options.Audiences.
			SkipClientIDCheck:    true,
			SupportedSigningAlgs: []string{oidc.RS256},
			// A multi-tenant issuer is a template; Verify compares "iss"
			// with the template filled with the token's own tenant.
			SkipIssuerCheck: multiTenant,
			Now:             o.Now,
		}),
		issuer:         o.Issuer,
		multiTenant:    multiTenant,
		audiences:      slices.Clone(o.Audiences),
		requiredScopes: slices.Clone(o.RequiredScopes),
		tenants:        slices.Clone(o.Tenants),
		logger:         o.Logger,
		keys:           keys,
		now:            o.Now,
	}, nil
}

// Verify checks raw and returns its principal. Errors match
// [ErrUnauthenticated], [ErrForbidden] or [ErrInsufficientScope].
//
// A token that passed is remembered (by its SHA-256) until the earlier of
// its expiry and a minute later, and answered from memory while the key
// that verified it is still in the issuer's key set; see verifiedTokens.
func (v *Verifier) Verify(ctx context.Context, raw string) (Principal, error) {
	if raw == "" || len(raw) > MaxTokenBytes {
		return Principal{}, fmt.Errorf("%w: token empty or longer than %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	sum := sha256.Sum256([]byte(raw))
	now := v.now()
	if p, ok := v.verified.get(ctx, sum, now, v.keys); ok {
		return p, nil
	}
	p, expiry, used, err := v.verify(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	v.verified.put(sum, p, used, now, expiry)
	return p, nil
}

// verify checks raw in full and returns its principal, its expiry and the
// key that verified its signature.
func (v *Verifier) verify(ctx context.Context, raw string) (Principal, time.Time, usedKey, error) {
	var used usedKey
	// RS256 only, signature by a key of the issuer's key set (by kid),
	// expiry ("exp" required) and not-before, with go-oidc's rules.
	tok, err := v.oidc.Verify(withUsedKey(ctx, &used), raw)
	if err != nil {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: %w", ErrUnauthenticated, v.issuerError(raw, err))
	}
	var c claims
	if err := tok.Claims(&c); err != nil {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: claims: %w", ErrUnauthenticated, err)
	}
	if !v.issuerAccepted(c.Issuer, c.Tenant) {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: issuer %q not accepted%s", ErrUnauthenticated, c.Issuer, issuerHint(c.Issuer))
	}
	if tok.IssuedAt.IsZero() {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: no iat", ErrUnauthenticated)
	}
	if c.ObjectID == "" && c.Subject == "" {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: neither oid nor sub", ErrUnauthenticated)
	}
	if !slices.ContainsFunc(tok.Audience, v.audienceAccepted) {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: audience %q not accepted", ErrUnauthenticated, tok.Audience)
	}
	if err := v.AdmitsTenant(c.Tenant); err != nil {
		return Principal{}, time.Time{}, usedKey{}, err
	}
	// Only a person's (delegated) token may call the API: an app-only
	// token never carries a delegated scope, and Entra names it besides.
	scopes := c.scopes()
	if c.TokenType != "" && c.TokenType != "user" {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: idtyp %q", ErrAppToken, c.TokenType)
	}
	if len(scopes) == 0 {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: no delegated scope (roles %q)", ErrAppToken, c.Roles)
	}
	for _, s := range v.requiredScopes {
		if !slices.Contains(scopes, s) {
			return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: scope %q missing", ErrInsufficientScope, s)
		}
	}
	// Last: a token of a person whose groups the issuer left out would
	// otherwise pass as a person in no group.
	if c.groupsLeftOut() {
		return Principal{}, time.Time{}, usedKey{}, fmt.Errorf("%w: %s", ErrTooManyGroups, GroupOverageRemedy)
	}
	return c.principal(scopes), tok.Expiry, used, nil
}

// Admits reports whether this verifier still lets in the person whose
// principal id (see [Principal.ID]) is id: its issuer is the configured
// one (of a multi-tenant issuer, the tenant's own) and its tenant is on
// the allow-list. It serves what carries on a person's access after a
// token of theirs was verified — an MCP client's refresh token, say — so
// that a tenant taken off [Options.Tenants] (or an issuer replaced) is
// refused there as the API refuses its tokens. Errors match
// [ErrForbidden]; their text names the issuer or tenant, for logs.
func (v *Verifier) Admits(id string) error {
	parts := strings.Split(id, "|")
	if len(parts) != 3 || parts[2] == "" {
		return fmt.Errorf("%w: %q is not a principal id", ErrForbidden, id)
	}
	iss, tenant := parts[0], parts[1]
	if !v.issuerAccepted(iss, tenant) {
		return fmt.Errorf("%w: issuer %q not accepted", ErrForbidden, iss)
	}
	return v.AdmitsTenant(tenant)
}

// AdmitsTenant reports whether tenant is on the allow-list (any tenant
// is, without one): [Verifier.Admits] for a token Usher minted itself,
// which names its person's tenant ("tid") but whose subject an operator
// may have made up ("usher token mcp"), so only the tenant is compared.
// Errors match [ErrForbidden].
func (v *Verifier) AdmitsTenant(tenant string) error {
	if len(v.tenants) > 0 && !slices.Contains(v.tenants, tenant) {
		return fmt.Errorf("%w: tenant %q not allowed", ErrForbidden, tenant)
	}
	return nil
}

// issuerAccepted compares iss exactly with the configured issuer, or with
// the multi-tenant template filled with the token's tenant.
func (v *Verifier) issuerAccepted(iss, tenant string) bool {
	if !v.multiTenant {
		return iss == v.issuer
	}
	return tenant != "" && iss == strings.Replace(v.issuer, TenantPlaceholder, tenant, 1)
}

func (v *Verifier) audienceAccepted(aud string) bool {
	return slices.Contains(v.audiences, aud)
}

// claims are the access token claims Usher reads beyond go-oidc's.
type claims struct {
	Issuer            string    `json:"iss"`
	Subject           string    `json:"sub"`
	Tenant            string    `json:"tid"`
	ObjectID          string    `json:"oid"`
	Name              string    `json:"name"`
	PreferredUsername string    `json:"preferred_username"`
	Email             string    `json:"email"`
	TokenType         string    `json:"idtyp"`
	Scp               *scopeSet `json:"scp"`
	Scope             *scopeSet `json:"scope"`
	Groups            []string  `json:"groups"`
	Roles             []string  `json:"roles"`
	// ClaimNames and HasGroups are how Entra says that it left "groups"
	// out, the person being in too many: "_claim_names": {"groups":
	// "src1"} (with "_claim_sources" naming where to read them), or
	// "hasgroups": true.
	ClaimNames map[string]json.RawMessage `json:"_claim_names"`
	HasGroups  bool                       `json:"hasgroups"`
}

// groupsLeftOut reports whether the token says the person's groups are
// elsewhere: whatever "groups" it may carry besides is not all of them.
func (c *claims) groupsLeftOut() bool {
	_, named := c.ClaimNames["groups"]
	return named || c.HasGroups
}

// scopes returns "scp" (Entra) when present, else "scope" (RFC 9068): a
// token's scopes are never the union of both.
func (c *claims) scopes() []string {
	if c.Scp != nil {
		return *c.Scp
	}
	if c.Scope != nil {
		return *c.Scope
	}
	return nil
}

func (c *claims) principal(scopes []string) Principal {
	name := c.Name
	if name == "" {
		name = c.PreferredUsername
	}
	return Principal{
		Issuer:   c.Issuer,
		Tenant:   c.Tenant,
		ObjectID: c.ObjectID,
		Subject:  c.Subject,
		Name:     name,
		Email:    c.Email,
		Scopes:   scopes,
		Groups:   c.Groups,
		Roles:    c.Roles,
	}
}

// scopeSet reads a space-separated scope string or, as some issuers emit
// it, an array of scopes.
type scopeSet []string

func (s *scopeSet) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = strings.Fields(str)
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("scope claim is neither a string nor an array of strings")
	}
	*s = list
	return nil
}

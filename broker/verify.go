package broker

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/golang-jwt/jwt/v5"
)

// Verification errors. Callers branch on them with errors.Is: an
// ErrInvalidToken answers 401 (invalid_token), an ErrInsufficientScope 403
// (insufficient_scope), and any other error means the token could not be
// checked (the key set was unavailable) and answers 503. The wrapped details
// are for logs only: never send them to a client.
var (
	// ErrInvalidToken reports a token that is malformed, badly signed,
	// expired, or not for this issuer and audience.
	ErrInvalidToken = errors.New("broker: invalid token")
	// ErrInsufficientScope reports an otherwise valid token without the
	// required scope.
	ErrInsufficientScope = errors.New("broker: insufficient scope")
)

// KeySource finds a verification key by kid. It returns an error wrapping
// ErrUnknownKey for a kid it does not know. Keyring (in process) and
// jwks.Remote (over HTTP) implement it.
type KeySource interface {
	Key(ctx context.Context, kid string) (*rsa.PublicKey, error)
}

// DefaultVerifiedCacheSize is the number of verified tokens a Verifier
// remembers unless configured otherwise.
const DefaultVerifiedCacheSize = 10_000

// VerifierOptions configures a Verifier. The zero value of every field but
// Issuer and Audience selects its default.
type VerifierOptions struct {
	// Issuer is the exact "iss" required. Required.
	Issuer string
	// Audience is the exact "aud" required: this MCP server's URL.
	// Required.
	Audience string
	// MaxLifetime is the longest exp − iat accepted. Default and maximum
	// 15 min.
	MaxLifetime time.Duration
	// Leeway is the clock skew tolerated on exp, nbf and iat. Default and
	// maximum 30 s; a negative value means none.
	Leeway time.Duration
	// RequiredScope is the scope a token must carry. Default "mcp:invoke".
	RequiredScope string
	// CacheSize is how many verified tokens are remembered, so that a token
	// presented again (every call of a turn presents the same one) costs a
	// lookup instead of an RSA verification. Default 10 000; negative
	// disables the cache.
	CacheSize int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// GrantRevoked reports whether the OAuth grant a token names
	// ("grant_id") is revoked: such a token is invalid, whatever else it
	// is; an error fails the verification as a key source's does (the
	// token cannot be checked). It is asked at every verification of a
	// token with a grant_id, so it must be cheap (the store's
	// GrantRevoked: one read of a primary key). Nil checks none.
	GrantRevoked func(ctx context.Context, grantID string) (bool, error)
	// TenantAdmitted reports whether the tenant a token names ("tid") is
	// still let in by the API's identity configuration — its tenant
	// allow-list (identity.Verifier.AdmitsTenant) —: an error makes the
	// token invalid, whatever else it is, so that a tenant taken off the
	// allow-list is refused at once, not when its tokens expire. It is
	// asked at every verification of a token with a tid, a cached one's
	// too, so it must be cheap. Nil checks none.
	TenantAdmitted func(tenant string) error
}

// Verifier checks broker tokens for one issuer and one audience.
type Verifier struct {
	keys        KeySource
	issuer      string
	audience    string
	maxLifetime time.Duration
	scope       string
	now         func() time.Time
	parser      *jwt.Parser
	verified    *verifiedCache // nil when disabled
	// grantRevoked is VerifierOptions.GrantRevoked, tenantAdmitted
	// VerifierOptions.TenantAdmitted.
	grantRevoked   func(ctx context.Context, grantID string) (bool, error)
	tenantAdmitted func(tenant string) error
}

// NewVerifier returns a verifier that finds keys in keys. Nil opts is an
// error, since Issuer and Audience are required.
func NewVerifier(keys KeySource, opts *VerifierOptions) (*Verifier, error) {
	var o VerifierOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxLifetime == 0 {
		o.MaxLifetime = MaxTokenLifetime
	}
	switch {
	case o.Leeway == 0:
		o.Leeway = MaxLeeway
	case o.Leeway < 0:
		o.Leeway = 0
	}
	if o.RequiredScope == "" {
		o.RequiredScope = ScopeInvoke
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultVerifiedCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}

	var errs []error
	if keys == nil {
		errs = append(errs, errors.New("a key source is required"))
	}
	if o.Issuer == "" {
		errs = append(errs, errors.New("an Issuer is required"))
	}
	if o.Audience == "" {
		errs = append(errs, errors.New("an Audience is required"))
	}
	if o.MaxLifetime < 0 || o.MaxLifetime > MaxTokenLifetime {
		errs = append(errs, fmt.Errorf("MaxLifetime must be at most %s, got %s", MaxTokenLifetime, o.MaxLifetime))
	}
	if o.Leeway > MaxLeeway {
		errs = append(errs, fmt.Errorf("the Leeway must be at most %s, got %s", MaxLeeway, o.Leeway))
	}
	if strings.Contains(o.RequiredScope, " ") {
		errs = append(errs, fmt.Errorf("RequiredScope %q must be one scope", o.RequiredScope))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("broker: verifier options: %w", err)
	}
	v := &Verifier{
		keys: keys, issuer: o.Issuer, audience: o.Audience, maxLifetime: o.MaxLifetime,
		scope: o.RequiredScope, now: o.Now, grantRevoked: o.GrantRevoked, tenantAdmitted: o.TenantAdmitted,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{Algorithm}),
			jwt.WithStrictDecoding(),
			jwt.WithIssuer(o.Issuer),
			jwt.WithExpirationRequired(),
			jwt.WithNotBeforeRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(o.Leeway),
			jwt.WithTimeFunc(o.Now),
		),
	}
	if o.CacheSize > 0 {
		v.verified = newVerifiedCache(o.CacheSize, o.Leeway)
	}
	return v, nil
}

// Claims are the verified claims of a broker token.
type Claims struct {
	Issuer    string    // "iss"
	Subject   string    // "sub": the principal the token speaks for
	Audience  string    // "aud": the one audience
	ID        string    // "jti": safe to log and audit
	Scopes    []string  // "scope", split on spaces
	ClientID  string    // "client_id"
	Actor     string    // "act"."sub": who acts for the subject
	RunID     string    // "run_id", empty when unset
	Tenant    string    // "tid", empty when unset
	Groups    []string  // "groups", nil when unset
	GrantID   string    // "grant_id": the OAuth grant it was issued under, empty when unset
	IssuedAt  time.Time // "iat"
	ExpiresAt time.Time // "exp"
}

// clone returns a copy of c that shares no slice with it.
func (c *Claims) clone() *Claims {
	out := *c
	out.Scopes, out.Groups = slices.Clone(c.Scopes), slices.Clone(c.Groups)
	return &out
}

// Verify checks raw and returns its claims. A token verified before and
// still cached is only checked for expiry, for its key still being the
// one it was verified with, and for its grant (below). Otherwise, in order: the size and the form
// (golang-jwt, strict base64url, no CR or LF); alg exactly RS256; in the
// key function, before any key lookup, the header (typ at+jwt, a kid, no
// crit; every other header, including jku, x5u, jwk and x5c, is ignored,
// never followed) and the claims that golang-jwt does not check (exactly
// one aud, ours, as a string or a one-element array; exp, nbf and iat
// present and plausible; exp − iat at most MaxLifetime; sub, jti,
// client_id and act present; tid, groups and grant_id, if any, within
// MaxGroups and MaxClaimLength); the key, by kid, of at least 2048 bits; the signature;
// golang-jwt's checks of iss, exp, nbf and iat within the leeway; and last
// the scope, so that ErrInsufficientScope is only ever said of an authentic
// token. Then, cached or not, a token with a tid is refused when
// VerifierOptions.TenantAdmitted refuses its tenant, and one with a
// grant_id when VerifierOptions.GrantRevoked says its grant is revoked. Only a token that names our audience can make the key source
// reload, and then at its bounded rate.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	if len(raw) > MaxTokenSize {
		return nil, invalid("token is over %d bytes", MaxTokenSize)
	}
	// The base64url decoder skips CR and LF even when strict, which would
	// give one token many spellings (and many cache entries).
	if strings.IndexByte(raw, '\n') >= 0 || strings.IndexByte(raw, '\r') >= 0 {
		return nil, invalid("not a compact JWS")
	}
	var sum tokenHash
	if v.verified != nil {
		sum = hashToken(raw)
		if c, ok := v.verified.get(ctx, sum, v.now(), v.keys); ok {
			if err := v.checkStanding(ctx, c); err != nil {
				return nil, err
			}
			return c, nil
		}
	}
	var c tokenClaims
	var key *rsa.PublicKey
	_, err := v.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		if err := v.checkUnverified(t, &c); err != nil {
			return nil, err
		}
		k, err := v.keys.Key(ctx, t.Header["kid"].(string))
		switch {
		case errors.Is(err, ErrUnknownKey):
			return nil, invalid("unknown kid %.64q", t.Header["kid"])
		case err != nil:
			return nil, &keySourceError{err}
		case k.N.BitLen() < minKeyBits:
			return nil, invalid("key under %d bits", minKeyBits)
		}
		key = k
		return k, nil
	})
	if err != nil {
		if ks, ok := errors.AsType[*keySourceError](err); ok {
			return nil, fmt.Errorf("broker: find verification key: %w", ks.err)
		}
		switch {
		case errors.Is(err, ErrInvalidToken):
			return nil, err
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, invalid("expired at %s: %v", time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339), err)
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return nil, invalid("bad signature or alg: %v", err)
		}
		return nil, invalid("%v", err)
	}
	scopes := splitScope(c.Scope)
	if !slices.Contains(scopes, v.scope) {
		return nil, fmt.Errorf("%w: %q is not among the token's scopes", ErrInsufficientScope, v.scope)
	}
	claims := &Claims{
		Issuer: c.Issuer, Subject: c.Subject, Audience: v.audience, ID: c.ID, Scopes: scopes,
		ClientID: c.ClientID, Actor: c.Act.Subject, RunID: c.RunID, Tenant: c.Tenant, Groups: c.Groups,
		GrantID: c.GrantID, IssuedAt: time.Unix(c.IssuedAt, 0), ExpiresAt: time.Unix(c.Expiry, 0),
	}
	if err := v.checkStanding(ctx, claims); err != nil {
		return nil, err
	}
	if v.verified != nil {
		v.verified.put(sum, c.kid, key, claims, v.now())
		return claims.clone(), nil
	}
	return claims, nil
}

// checkStanding refuses a token whose tenant is no longer admitted or
// whose grant is revoked. It runs at every verification, a cached token's
// too: a revocation may come at any time, from any replica.
func (v *Verifier) checkStanding(ctx context.Context, c *Claims) error {
	if c.Tenant != "" && v.tenantAdmitted != nil {
		if err := v.tenantAdmitted(c.Tenant); err != nil {
			return invalid("its tenant is not admitted: %v", err)
		}
	}
	if c.GrantID == "" || v.grantRevoked == nil {
		return nil
	}
	revoked, err := v.grantRevoked(ctx, c.GrantID)
	switch {
	case err != nil:
		return fmt.Errorf("broker: check the token's grant: %w", err)
	case revoked:
		return invalid("its grant %.64q is revoked", c.GrantID)
	}
	return nil
}

// checkUnverified checks the header and the claims golang-jwt leaves to
// its caller, before the key is looked up and the signature checked.
func (v *Verifier) checkUnverified(t *jwt.Token, c *tokenClaims) error {
	typ, _ := t.Header["typ"].(string)
	if !strings.EqualFold(typ, TokenType) && !strings.EqualFold(typ, "application/"+TokenType) {
		return invalid("typ %.32q is not %s", typ, TokenType)
	}
	kid, _ := t.Header["kid"].(string)
	if _, crit := t.Header["crit"]; kid == "" || crit {
		return invalid("header needs a kid and no crit")
	}
	c.kid = kid
	if string(c.Audience) != v.audience {
		return invalid("audience is not exactly %q", v.audience)
	}
	if !plausibleDate(c.Expiry) || !plausibleDate(c.NotBefore) || !plausibleDate(c.IssuedAt) {
		return invalid("exp, nbf and iat are required")
	}
	if lifetime := time.Duration(c.Expiry-c.IssuedAt) * time.Second; lifetime <= 0 || lifetime > v.maxLifetime {
		return invalid("lifetime %s is not within (0, %s]", lifetime, v.maxLifetime)
	}
	if c.Subject == "" || c.ID == "" || c.ClientID == "" {
		return invalid("sub, jti and client_id are required")
	}
	if c.Act == nil || c.Act.Subject == "" {
		return invalid("act with a sub is required")
	}
	if err := checkClaimText(c.Act.Subject); err != nil {
		return invalid("act: %v", err)
	}
	if err := checkGrantClaims(Grant{Tenant: c.Tenant, Groups: c.Groups, GrantID: c.GrantID}); err != nil {
		return invalid("tid, groups or grant_id: %v", err)
	}
	return nil
}

// keySourceError is a key source's failure: neither a valid nor an invalid
// token, but one that could not be checked.
type keySourceError struct{ err error }

func (e *keySourceError) Error() string { return e.err.Error() }
func (e *keySourceError) Unwrap() error { return e.err }

// invalid returns ErrInvalidToken with a detail for logs.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// tokenClaims are the claims of a broker token, as Mint writes them and
// Verify reads them. Times are integers (a fractional, exponent or quoted
// time fails to decode); zero stands for absent.
type tokenClaims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  audience `json:"aud"`
	IssuedAt  int64    `json:"iat"`
	NotBefore int64    `json:"nbf"`
	Expiry    int64    `json:"exp"`
	ID        string   `json:"jti"`
	Scope     string   `json:"scope"`
	ClientID  string   `json:"client_id"`
	Act       *actor   `json:"act"`
	RunID     string   `json:"run_id,omitempty"`
	Tenant    string   `json:"tid,omitempty"`
	Groups    []string `json:"groups,omitempty"`
	GrantID   string   `json:"grant_id,omitempty"`

	kid string // from the header, once checked
}

// actor is the RFC 8693 "act" claim.
type actor struct {
	Subject string `json:"sub"`
}

// tokenClaims implements jwt.Claims, so that golang-jwt checks the
// registered claims it knows.
var _ jwt.Claims = (*tokenClaims)(nil)

// UnmarshalJSON decodes the claims strictly, with encoding/json/v2
// semantics: a member name matches only exactly (not case-folded), and a
// repeated member, a string that is not UTF-8 or a value of the wrong type
// is an error. So no two readers of one token see different claims.
func (c *tokenClaims) UnmarshalJSON(b []byte) error {
	type plain tokenClaims
	return jsonv2.Unmarshal(b, (*plain)(c))
}

func (c *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return date(c.Expiry), nil }
func (c *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return date(c.IssuedAt), nil }
func (c *tokenClaims) GetNotBefore() (*jwt.NumericDate, error)      { return date(c.NotBefore), nil }
func (c *tokenClaims) GetIssuer() (string, error)                   { return c.Issuer, nil }
func (c *tokenClaims) GetSubject() (string, error)                  { return c.Subject, nil }
func (c *tokenClaims) GetAudience() (jwt.ClaimStrings, error) {
	return jwt.ClaimStrings{string(c.Audience)}, nil
}

// date is a NumericDate, or nil for an absent (zero) one.
func date(v int64) *jwt.NumericDate {
	if v == 0 {
		return nil
	}
	return jwt.NewNumericDate(time.Unix(v, 0))
}

// maxNumericDate is the last second of the year 9999.
const maxNumericDate = 253402300799

// plausibleDate reports whether v is a present NumericDate from 1970 to
// 9999, so that no arithmetic on it can overflow.
func plausibleDate(v int64) bool { return v > 0 && v <= maxNumericDate }

// audience is the single audience of an "aud" claim: a JSON string, or an
// array of exactly one string (RFC 7519 allows both). A null, empty or
// multi-valued audience decodes to "", which never matches.
type audience string

func (a *audience) UnmarshalJSON(b []byte) error {
	var s string
	if jsonv2.Unmarshal(b, &s) == nil {
		*a = audience(s)
		return nil
	}
	var list []string
	if err := jsonv2.Unmarshal(b, &list); err != nil {
		return errors.New("aud is neither a string nor an array of strings")
	}
	*a = ""
	if len(list) == 1 {
		*a = audience(list[0])
	}
	return nil
}

// splitScope splits a space-delimited scope (RFC 6749 §3.3). Only the space
// separates: a tab or newline is part of a scope token.
func splitScope(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, " ") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

package broker

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
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
// RemoteKeySet (over HTTP) implement it.
type KeySource interface {
	Key(ctx context.Context, kid string) (*rsa.PublicKey, error)
}

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
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Verifier checks broker tokens for one issuer and one audience.
type Verifier struct {
	keys        KeySource
	issuer      string
	audience    string
	maxLifetime time.Duration
	leeway      time.Duration
	scope       string
	now         func() time.Time

	// lastHeader is the most recently decoded header segment. Every token
	// of a signing key has the same header, so this saves decoding it
	// again; its checks still run on every token.
	lastHeader atomic.Pointer[decodedHeader]
}

// decodedHeader is a header segment and what it decodes to.
type decodedHeader struct {
	seg string
	h   tokenHeader
}

// decodeHeader decodes a header segment, or returns the last one's result
// when seg is the same bytes.
func (v *Verifier) decodeHeader(seg string) (tokenHeader, error) {
	if d := v.lastHeader.Load(); d != nil && d.seg == seg {
		return d.h, nil
	}
	var h tokenHeader
	if err := decodeSegment(seg, &h); err != nil {
		return tokenHeader{}, err
	}
	v.lastHeader.Store(&decodedHeader{seg: strings.Clone(seg), h: h})
	return h, nil
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
	return &Verifier{
		keys: keys, issuer: o.Issuer, audience: o.Audience, maxLifetime: o.MaxLifetime,
		leeway: o.Leeway, scope: o.RequiredScope, now: o.Now,
	}, nil
}

// Claims are the verified claims of a broker token.
type Claims struct {
	Issuer    string    // "iss"
	Subject   string    // "sub": the principal the token speaks for
	Audience  string    // "aud": the one audience
	ID        string    // "jti": safe to log and audit
	Scopes    []string  // "scope", split on spaces
	ClientID  string    // "client_id"
	Actor     string    // "act"."sub", empty when there is no "act"
	RunID     string    // "run_id", empty when unset
	Tenant    string    // "tid", empty when unset
	Groups    []string  // "groups", nil when unset
	IssuedAt  time.Time // "iat"
	ExpiresAt time.Time // "exp"
}

// Verify checks raw and returns its claims. In order: the size; the compact
// form; the header (alg exactly RS256, typ at+jwt, a kid, no crit; every
// other header, including jku, x5u, jwk and x5c, is ignored, never
// followed); the claims (exact iss; exactly one aud, ours, as a string or a
// one-element array; exp, nbf and iat present and current within the
// leeway; exp − iat at most MaxLifetime; sub, jti and client_id present;
// tid and groups, if any, within MaxGroups and MaxClaimLength);
// the key, by kid; the signature; and last the scope, so that
// ErrInsufficientScope is only ever said of an authentic token. Cheap
// checks come before the key lookup, so only a token otherwise fit for this
// audience can make the key source reload.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	if len(raw) > MaxTokenSize {
		return nil, invalid("token is over %d bytes", MaxTokenSize)
	}
	h64, p64, s64, ok := splitCompact(raw)
	if !ok {
		return nil, invalid("not a compact JWS")
	}
	h, err := v.decodeHeader(h64)
	if err != nil {
		return nil, invalid("header: %v", err)
	}
	if h.Alg != Algorithm {
		return nil, invalid("alg %.32q is not %s", h.Alg, Algorithm)
	}
	if !strings.EqualFold(h.Typ, TokenType) && !strings.EqualFold(h.Typ, "application/"+TokenType) {
		return nil, invalid("typ %.32q is not %s", h.Typ, TokenType)
	}
	if h.Kid == "" || h.Crit != nil {
		return nil, invalid("header needs a kid and no crit")
	}
	var c tokenClaims
	if err := decodeSegment(p64, &c); err != nil {
		return nil, invalid("claims: %v", err)
	}
	if c.Issuer != v.issuer {
		return nil, invalid("issuer %.64q is not %q", c.Issuer, v.issuer)
	}
	if oneAudience(c.Audience) != v.audience {
		return nil, invalid("audience %.64q is not exactly %q", c.Audience, v.audience)
	}
	exp, okE := numericDate(c.Expiry)
	nbf, okN := numericDate(c.NotBefore)
	iat, okI := numericDate(c.IssuedAt)
	if !okE || !okN || !okI {
		return nil, invalid("exp, nbf and iat are required")
	}
	now := v.now()
	if !now.Before(exp.Add(v.leeway)) {
		return nil, invalid("expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if now.Add(v.leeway).Before(nbf) {
		return nil, invalid("not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	if now.Add(v.leeway).Before(iat) {
		return nil, invalid("issued in the future, at %s", iat.UTC().Format(time.RFC3339))
	}
	if !exp.After(iat) || exp.Sub(iat) > v.maxLifetime {
		return nil, invalid("lifetime %s is not within (0, %s]", exp.Sub(iat), v.maxLifetime)
	}
	if c.Subject == "" || c.ID == "" || c.ClientID == "" {
		return nil, invalid("sub, jti and client_id are required")
	}
	if err := checkGrantClaims(Grant{Tenant: c.Tenant, Groups: c.Groups}); err != nil {
		return nil, invalid("tid or groups: %v", err)
	}
	sig, err := b64.DecodeString(s64)
	if err != nil {
		return nil, invalid("signature encoding")
	}
	key, err := v.keys.Key(ctx, h.Kid)
	if errors.Is(err, ErrUnknownKey) {
		return nil, invalid("unknown kid %.64q", h.Kid)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: find verification key: %w", err)
	}
	digest := sha256.Sum256([]byte(raw[:len(h64)+1+len(p64)]))
	if key.N.BitLen() < minKeyBits || rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) != nil {
		return nil, invalid("bad signature")
	}
	scopes := splitScope(c.Scope)
	if !slices.Contains(scopes, v.scope) {
		return nil, fmt.Errorf("%w: %q is not among the token's scopes", ErrInsufficientScope, v.scope)
	}
	return &Claims{
		Issuer: c.Issuer, Subject: c.Subject, Audience: v.audience, ID: c.ID, Scopes: scopes,
		ClientID: c.ClientID, Actor: c.Act.Subject, RunID: c.RunID, Tenant: c.Tenant, Groups: c.Groups,
		IssuedAt: iat, ExpiresAt: exp,
	}, nil
}

// invalid returns ErrInvalidToken with a detail for logs.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// b64 decodes JWS segments: base64url without padding, rejecting
// non-canonical encodings.
var b64 = base64.RawURLEncoding.Strict()

// tokenHeader is the part of a JWS header that Verify reads. Nothing else in
// the header is ever looked at.
type tokenHeader struct {
	Alg  string          `json:"alg"`
	Typ  string          `json:"typ"`
	Kid  string          `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

// tokenClaims are the claims as received. Times are integers (a fractional,
// exponent or quoted time fails to decode); zero stands for absent.
type tokenClaims struct {
	Issuer    string          `json:"iss"`
	Subject   string          `json:"sub"`
	Audience  json.RawMessage `json:"aud"`
	IssuedAt  int64           `json:"iat"`
	NotBefore int64           `json:"nbf"`
	Expiry    int64           `json:"exp"`
	ID        string          `json:"jti"`
	Scope     string          `json:"scope"`
	ClientID  string          `json:"client_id"`
	Act       actor           `json:"act"`
	RunID     string          `json:"run_id"`
	Tenant    string          `json:"tid"`
	Groups    []string        `json:"groups"`
}

// splitCompact splits a compact JWS into its three non-empty segments. It
// refuses CR and LF, the only bytes outside the alphabet that the base64url
// decoder would skip (letting one token have many spellings); the decoder
// refuses every other one.
func splitCompact(raw string) (header, payload, sig string, ok bool) {
	if strings.Count(raw, ".") != 2 || strings.IndexByte(raw, '\n') >= 0 || strings.IndexByte(raw, '\r') >= 0 {
		return "", "", "", false
	}
	header, rest, _ := strings.Cut(raw, ".")
	payload, sig, _ = strings.Cut(rest, ".")
	return header, payload, sig, header != "" && payload != "" && sig != ""
}

// decodeSegment decodes one base64url JSON segment into v.
func decodeSegment(seg string, v any) error {
	b, err := b64.DecodeString(seg)
	if err != nil {
		return errors.New("bad base64url")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errors.New("bad JSON")
	}
	return nil
}

// oneAudience returns the single audience of an "aud" claim: a JSON string,
// or an array of exactly one string (RFC 7519 allows both). A missing, null
// or multi-valued audience yields "", which never matches.
func oneAudience(raw json.RawMessage) string {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// A string without escapes (valid: the claims decoded) is its
		// bytes between the quotes.
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && len(list) == 1 {
		return list[0]
	}
	return ""
}

// maxNumericDate is the last second of the year 9999.
const maxNumericDate = 253402300799

// numericDate converts a present (non-zero), plausible NumericDate.
func numericDate(v int64) (time.Time, bool) {
	if v <= 0 || v > maxNumericDate {
		return time.Time{}, false
	}
	return time.Unix(v, 0), true
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

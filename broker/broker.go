package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
)

// Broker tokens.
const (
	// TokenType is the JWT "typ" header of a broker token: an RFC 9068
	// access token.
	TokenType = "at+jwt"
	// ScopeInvoke is the scope every broker token carries and an MCP server
	// requires.
	ScopeInvoke = "mcp:invoke"
	// DefaultClientID names the assistant in the tokens minted for it.
	DefaultClientID = "usher-assistant"
	// DefaultTokenLifetime is the lifetime of a broker token unless
	// configured otherwise.
	DefaultTokenLifetime = 5 * time.Minute
	// MaxTokenLifetime is the longest lifetime the broker mints, and the
	// longest a Verifier accepts.
	MaxTokenLifetime = 15 * time.Minute
	// MaxLeeway is the most clock skew a Verifier may tolerate.
	MaxLeeway = 30 * time.Second
	// MaxTokenSize is the largest token, in bytes, that Mint produces and
	// Verify reads.
	MaxTokenSize = 8 << 10
	// MaxGroups is the most groups a token carries ("groups"); Mint
	// refuses more, and Verify refuses a token with more.
	MaxGroups = 64
	// MaxClaimLength is the longest tenant ("tid") and group, in bytes.
	// Entra's are 36-character ids; names of other issuers are short too.
	MaxClaimLength = 128
)

// Options configures a Broker. The zero value of every field but Issuer
// selects its default.
type Options struct {
	// Issuer is the "iss" of every token: Usher's public URL, e.g.
	// "https://usher.example.com". Required: an absolute http or https URL
	// without query, fragment or user information. Verifiers compare it
	// exactly.
	Issuer string
	// TokenLifetime is how long a minted token is valid. Default 5 min; at
	// least 1 s, at most 15 min and at most the keyring's
	// MaxTokenLifetime.
	TokenLifetime time.Duration
	// ClientID is the "client_id" of a grant that names none. Default
	// "usher-assistant".
	ClientID string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Broker mints broker tokens: short-lived RS256 access tokens that carry a
// user's identity to one MCP server.
type Broker struct {
	keys     *Keyring
	issuer   string
	lifetime time.Duration
	clientID string
	now      func() time.Time
}

// New returns a broker that signs with keys. The keyring should be started
// (see Keyring.Start) so that it rotates; Mint creates a first key if there
// is none.
func New(keys *Keyring, opts *Options) (*Broker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = DefaultTokenLifetime
	}
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.Now == nil {
		o.Now = time.Now
	}

	var errs []error
	if keys == nil {
		errs = append(errs, errors.New("a keyring is required"))
	}
	if err := checkIssuer(o.Issuer); err != nil {
		errs = append(errs, err)
	}
	if o.TokenLifetime < time.Second || o.TokenLifetime > MaxTokenLifetime {
		errs = append(errs, fmt.Errorf("TokenLifetime must be between 1s and %s, got %s", MaxTokenLifetime, o.TokenLifetime))
	}
	if keys != nil && o.TokenLifetime > keys.opts.MaxTokenLifetime {
		errs = append(errs, fmt.Errorf("TokenLifetime (%s) exceeds the keyring's MaxTokenLifetime (%s)", o.TokenLifetime, keys.opts.MaxTokenLifetime))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("broker: options: %w", err)
	}
	return &Broker{keys: keys, issuer: o.Issuer, lifetime: o.TokenLifetime.Truncate(time.Second), clientID: o.ClientID, now: o.Now}, nil
}

// checkIssuer requires an absolute http(s) URL with nothing a verifier could
// normalise differently.
func checkIssuer(iss string) error {
	if iss == "" {
		return errors.New("an Issuer is required")
	}
	u, err := url.Parse(iss)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("the Issuer %q must be an absolute http or https URL without query, fragment or user information", iss)
	}
	return nil
}

// ErrBadGrant reports a grant Mint refuses: one without a subject or an
// audience, or whose tenant or groups a token cannot carry (see Grant). It
// is the grant's fault, not the broker's: a caller that took the grant
// from a request may say so.
var ErrBadGrant = errors.New("broker: grant refused")

// Grant says whom a token is for and whom it speaks for.
type Grant struct {
	// Subject is the principal the token speaks for ("sub"). Required.
	Subject string
	// Audience is the exact URL of the MCP server the token is for
	// ("aud"). Required.
	Audience string
	// RunID binds the token to a run ("run_id"); empty for none.
	RunID string
	// ClientID is the client the token is issued to ("client_id"). Default
	// Options.ClientID.
	ClientID string
	// Actor is who acts for the subject ("act": {"sub": Actor}, RFC 8693).
	// Default ClientID.
	Actor string
	// Tenant is the subject's tenant ("tid") from its verified identity;
	// empty for none. At most MaxClaimLength bytes of printable text.
	Tenant string
	// Groups are the subject's groups ("groups") from its verified
	// identity, for policies to check; none for none. At most MaxGroups,
	// each 1 to MaxClaimLength bytes of printable text; Mint refuses
	// more rather than drop some, which could change a decision.
	Groups []string
	// GrantID names the OAuth grant the token is issued under
	// ("grant_id"): the refresh-token family of the authorization code it
	// came from, so that a verifier can refuse the tokens of a grant
	// revoked since (VerifierOptions.GrantRevoked); empty for none. At
	// most MaxClaimLength bytes of printable text.
	GrantID string
}

// CheckSubject reports whether a token can carry tenant and groups as
// Mint requires of a Grant's: nil, or an error wrapping ErrBadGrant that
// says why (for logs). A caller that will have tokens minted for a person
// checks them up front, so that the person is told at once rather than
// at the first Mint.
func CheckSubject(tenant string, groups []string) error {
	if err := checkGrantClaims(Grant{Tenant: tenant, Groups: groups}); err != nil {
		return fmt.Errorf("%w: %w", ErrBadGrant, err)
	}
	return nil
}

// checkGrantClaims checks the tenant and groups of a grant.
func checkGrantClaims(g Grant) error {
	var errs []error
	if err := checkClaimText(g.Tenant); err != nil {
		errs = append(errs, fmt.Errorf("tenant: %w", err))
	}
	if err := checkClaimText(g.GrantID); err != nil {
		errs = append(errs, fmt.Errorf("grant_id: %w", err))
	}
	if len(g.Groups) > MaxGroups {
		errs = append(errs, fmt.Errorf("%d groups, more than the %d a token carries", len(g.Groups), MaxGroups))
	}
	for i, grp := range g.Groups {
		if grp == "" {
			errs = append(errs, fmt.Errorf("group %d is empty", i))
		} else if err := checkClaimText(grp); err != nil {
			errs = append(errs, fmt.Errorf("group %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// checkClaimText refuses a tenant or group that is too long or holds a
// control character or invalid UTF-8.
func checkClaimText(s string) error {
	if len(s) > MaxClaimLength {
		return fmt.Errorf("%d bytes, more than %d", len(s), MaxClaimLength)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return errors.New("not printable text")
	}
	return nil
}

// Token is a minted broker token. Its String, GoString, Format, LogValue
// and MarshalJSON never show Raw, so printing or logging a Token does not
// leak it; only an explicit use of Raw does.
type Token struct {
	// Raw is the compact JWT to send as a bearer token. It is a credential:
	// never log or store it.
	Raw string
	// ID is the token's "jti", safe to log and audit.
	ID string
	// Expiry is the token's "exp".
	Expiry time.Time
}

// String describes the token without its credential.
func (t Token) String() string {
	return fmt.Sprintf("broker.Token{ID: %q, Expiry: %s, Raw: REDACTED}", t.ID, t.Expiry.UTC().Format(time.RFC3339))
}

// GoString is String, for %#v.
func (t Token) GoString() string { return t.String() }

// Format writes String for every verb, so no verb prints Raw.
func (t Token) Format(f fmt.State, _ rune) { io.WriteString(f, t.String()) }

// LogValue logs the token's ID and expiry only.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", t.ID), slog.Time("expiry", t.Expiry))
}

// MarshalJSON encodes the token's ID and expiry only.
func (t Token) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID     string    `json:"id"`
		Expiry time.Time `json:"expiry"`
	}{t.ID, t.Expiry})
}

// Mint returns a new token for g, signed with the keyring's current key.
func (b *Broker) Mint(ctx context.Context, g Grant) (Token, error) {
	if g.Subject == "" || g.Audience == "" {
		return Token{}, fmt.Errorf("%w: a grant needs a subject and an audience", ErrBadGrant)
	}
	if err := checkGrantClaims(g); err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrBadGrant, err)
	}
	kid, key, err := b.keys.Signer(ctx)
	if err != nil {
		return Token{}, err
	}
	clientID := cmp.Or(g.ClientID, b.clientID)
	now := b.now().Unix()
	c := &tokenClaims{
		Issuer:    b.issuer,
		Subject:   g.Subject,
		Audience:  audience(g.Audience),
		IssuedAt:  now,
		NotBefore: now,
		Expiry:    now + int64(b.lifetime/time.Second),
		ID:        newTokenID(),
		Scope:     ScopeInvoke,
		ClientID:  clientID,
		Act:       &actor{Subject: cmp.Or(g.Actor, clientID)},
		RunID:     g.RunID,
		Tenant:    g.Tenant,
		Groups:    g.Groups,
		GrantID:   g.GrantID,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["typ"] = TokenType
	tok.Header["kid"] = kid
	raw, err := tok.SignedString(key)
	if err != nil {
		return Token{}, fmt.Errorf("broker: sign: %w", err)
	}
	if len(raw) > MaxTokenSize {
		return Token{}, fmt.Errorf("broker: token would be %d bytes, over the %d a verifier reads", len(raw), MaxTokenSize)
	}
	return Token{Raw: raw, ID: c.ID, Expiry: time.Unix(c.Expiry, 0)}, nil
}

// newTokenID returns 128 random bits, base64url-encoded: a "jti".
func newTokenID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// TokenSource returns a source of tokens for g that reuses its token until
// shortly before expiry (one minute, or half the lifetime if that is
// shorter) and then mints a new one. ctx is used for every Mint. The source
// is safe for concurrent use; use it with oauth2.Transport or
// oauth2.NewClient.
func (b *Broker) TokenSource(ctx context.Context, g Grant) oauth2.TokenSource {
	return &tokenSource{ctx: ctx, b: b, g: g, renewBefore: min(time.Minute, b.lifetime/2)}
}

type tokenSource struct {
	ctx         context.Context
	b           *Broker
	g           Grant
	renewBefore time.Duration

	mu  sync.Mutex
	cur Token
}

// Token returns the current token, minting a new one when it is near expiry.
func (s *tokenSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Raw == "" || !s.b.now().Before(s.cur.Expiry.Add(-s.renewBefore)) {
		t, err := s.b.Mint(s.ctx, s.g)
		if err != nil {
			return nil, err
		}
		s.cur = t
	}
	return &oauth2.Token{AccessToken: s.cur.Raw, TokenType: "Bearer", Expiry: s.cur.Expiry}, nil
}

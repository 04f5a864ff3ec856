package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The tables of Usher's OAuth 2.1 authorization server: its clients, the
// authorization codes and rotating refresh tokens it issues, and the
// users' remembered consents. Codes and tokens are stored by their SHA-256
// only, so a copy of the tables grants nothing.
//
// Revocations must not miss a token issued or rotated at the same moment.
// On PostgreSQL, whose read committed statements do not see rows
// committed after they started, the operations agree on locks:
//
//   - issuing and rotating a refresh token take FOR KEY SHARE locks on its
//     client's row, on the user's consent row to that client (when there
//     is one; a grant that touches the consent locks it by its update)
//     and, on a lone issue, on the authorization code that began the
//     family; revoking a client or a consent takes FOR UPDATE on its row
//     first, and redeeming a code locks the code. So a revocation waits
//     for the issues and rotations under way, and its next statement sees
//     their tokens; an issue or rotation that comes after waits for the
//     revocation, and sees it.
//   - a family is revoked by an update repeated until it changes no row
//     (revokeRefreshFamily): a rotation under way holds the lock of the
//     family's newest token, the update waits for it, and the next pass
//     sees the token the rotation inserted.
//
// Every transaction takes its locks in the order client, consent, code,
// token — a token's predecessor before it (a rotation clears the
// predecessor's repeat, a repeat reads the successor) —, so that none
// waits for another in a cycle. Only two statements
// each updating many tokens (a family's, a consent's) may lock shared
// ones in different orders: PostgreSQL breaks such a deadlock by failing
// one transaction, and inTx runs it again. SQLite's one writer serialises
// them all.

// OAuthClientKind says where a client of the authorization server comes
// from.
type OAuthClientKind string

// The kinds of client.
const (
	// OAuthClientRegistered is a client registered dynamically (RFC 7591).
	OAuthClientRegistered OAuthClientKind = "registered"
	// OAuthClientMetadataDocument is a client whose id is the https URL of
	// its Client ID Metadata Document.
	OAuthClientMetadataDocument OAuthClientKind = "metadata_document"
	// OAuthClientConfigured is a client of Usher's configuration.
	OAuthClientConfigured OAuthClientKind = "configured"
)

// Valid reports whether k is one of the defined kinds.
func (k OAuthClientKind) Valid() bool {
	switch k {
	case OAuthClientRegistered, OAuthClientMetadataDocument, OAuthClientConfigured:
		return true
	}
	return false
}

// The token endpoint authentication methods (token_endpoint_auth_method)
// a client may have.
const (
	authMethodNone        = "none"
	authMethodSecretBasic = "client_secret_basic"
	authMethodPrivateJWT  = "private_key_jwt"
)

// OAuthClient is a client of Usher's authorization server.
type OAuthClient struct {
	// ID is the client_id: a registered id, or the https URL of a
	// metadata document.
	ID   string
	Kind OAuthClientKind
	Name string
	// RedirectURIs and GrantTypes are the client's, as registered or
	// documented; stored as lists, in order.
	RedirectURIs []string
	GrantTypes   []string
	// AuthMethod is the token_endpoint_auth_method: "none",
	// "client_secret_basic" or "private_key_jwt".
	AuthMethod string
	// SecretHash is the SHA-256 (hex) of the client secret: set for
	// client_secret_basic, empty otherwise.
	SecretHash string
	// Metadata is the registration request or the document as received,
	// byte for byte; nil for none.
	Metadata json.RawMessage
	// RegisteredBy is the address that registered the client (dynamic
	// registration), for rate limiting and audit; empty otherwise.
	RegisteredBy string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// LastUsedAt is zero until a token is issued to the client (see
	// TouchConsent).
	LastUsedAt time.Time
	// RevokedAt is zero unless the client is revoked.
	RevokedAt time.Time
}

// AuthorizationCode is an issued authorization code, stored by its hash
// only.
type AuthorizationCode struct {
	// CodeHash is the SHA-256 (hex) of the code: the key.
	CodeHash  string
	ClientID  string
	Principal string // the user's principal id
	// Subject is what the tokens will carry of the user (tenant, groups,
	// name): opaque to the store, stored byte for byte; nil for none.
	Subject       json.RawMessage
	RedirectURI   string
	CodeChallenge string // the PKCE S256 challenge
	Resource      string // RFC 8707
	Scope         string
	CreatedAt     time.Time
	ExpiresAt     time.Time
	// UsedAt is zero until the code is redeemed.
	UsedAt time.Time
	// FamilyID is the refresh-token family issued for the code, set when
	// it is redeemed.
	FamilyID string
	// ReplayedAt is when the code was first presented again after its
	// redemption; zero unless it was. A replayed code's family can be
	// issued no refresh token.
	ReplayedAt time.Time
	// IssuedAt is when its redemption issued tokens: zero until then,
	// and for a code whose redemption was refused (RedeemAuthorizationCode
	// with no grant, or a grant held back), which issued nothing.
	IssuedAt time.Time
}

// RefreshToken is one token of a rotating family, stored by its hash only.
type RefreshToken struct {
	// TokenHash is the SHA-256 (hex) of the token: the key.
	TokenHash string
	// FamilyID names the family: the tokens rotated one from the other,
	// starting with the one issued for an authorization code.
	FamilyID  string
	ClientID  string
	Principal string // the user's principal id
	// Subject is what the tokens carry of the user: opaque to the store,
	// stored byte for byte; nil for none.
	Subject  json.RawMessage
	Resource string
	Scope    string
	// CreatedAt is when the token was issued; zero means now on issue, and
	// the time of the rotation on rotation.
	CreatedAt time.Time
	// ExpiresAt is the idle lifetime: this token's own end, stored as
	// FamilyExpiresAt when that comes first.
	ExpiresAt time.Time
	// FamilyExpiresAt is the absolute lifetime of the family.
	FamilyExpiresAt time.Time
	// UsedAt is zero until the token is rotated.
	UsedAt time.Time
	// RevokedAt is zero unless the token is revoked.
	RevokedAt time.Time
	// SuccessorHash is the hash of the token this one was rotated to;
	// empty until it is rotated.
	SuccessorHash string
	// SuccessorSalt is what the caller derived the successor from, with
	// this token (TokenGrant.RepeatSalt), kept until RepeatUntil while
	// the successor is neither used nor revoked; empty otherwise. Until
	// RepeatUntil this token, presented again, is a repeat rather than a
	// reuse (see RotateRefreshToken).
	SuccessorSalt string
	RepeatUntil   time.Time
}

// TokenGrant is what a grant at the token endpoint writes along with the
// code it redeems or the refresh token it rotates, in the same
// transaction (RedeemAuthorizationCode, RotateRefreshToken): all of it
// commits, or none. The caller mints the access token before, from the
// code or token it read: their grant never changes.
type TokenGrant struct {
	// Refresh is the refresh token issued with the access token: the
	// caller sets TokenHash and ExpiresAt (and FamilyExpiresAt, for a
	// code), the store the rest from the code or the old token. Nil
	// issues none; a rotation requires one.
	Refresh *RefreshToken
	// Consent requires the principal's consent to the client to stand,
	// and moves its LastUsedAt and the client's forward to the grant's
	// time (never back), as TouchConsent does. Without it, a consent that
	// exists must not be revoked, and none is no refusal.
	Consent bool
	// Audit builds the record of the issued token, appended last; nil
	// appends none.
	Audit func(AuditHead) (AuditRecord, error)
	// RepeatSalt and RepeatUntil, in a rotation, are kept on the rotated
	// token (RefreshToken.SuccessorSalt and RepeatUntil): what the caller
	// derived Refresh from, with the rotated token, and until when that
	// token presented again is answered with the same successor, a
	// repeat (see RotateRefreshToken). A zero RepeatUntil allows none,
	// and then RepeatSalt is empty.
	RepeatSalt  string
	RepeatUntil time.Time
	// RepeatAudit builds the record of a repeat, appended instead of
	// Audit; nil appends none.
	RepeatAudit func(AuditHead) (AuditRecord, error)
}

// Consent is a user's remembered consent to a client.
type Consent struct {
	Principal string // the user's principal id
	ClientID  string
	Scope     string
	Resource  string
	// CreatedAt is the first consent's time; UpdatedAt the last change's;
	// LastUsedAt when the consent last let a token be issued.
	CreatedAt  time.Time
	UpdatedAt  time.Time
	LastUsedAt time.Time
	// RevokedAt is zero unless the consent is revoked.
	RevokedAt time.Time
}

// ConsentAnswer is the answer given to one consent form, which a form
// gets once (AnswerConsentForm).
type ConsentAnswer struct {
	// RequestHash is the SHA-256 (hex) of the form's pending request id:
	// the key.
	RequestHash string
	// Decision is ConsentApprove or ConsentDeny.
	Decision   string
	AnsweredAt time.Time
	// ExpiresAt is when the form could no longer be posted anyway: the
	// answer is kept until then, and swept after (DeleteExpiredOAuth).
	ExpiresAt time.Time
}

// The decisions of a consent form.
const (
	ConsentApprove = "approve"
	ConsentDeny    = "deny"
)

const (
	// oauthClientColumns is the column list of an OAuthClient, in field
	// order.
	oauthClientColumns = `id, kind, name, redirect_uris, grant_types, auth_method, secret_hash, metadata,
	registered_by, created_at, updated_at, last_used_at, revoked_at`

	// oauthCodeColumns is the column list of an AuthorizationCode, in
	// field order.
	oauthCodeColumns = `code_hash, client_id, principal, subject, redirect_uri, code_challenge, resource, scope,
	created_at, expires_at, used_at, coalesce(family_id, ''), replayed_at, issued_at`

	// refreshTokenColumns is the column list of a RefreshToken, in field
	// order.
	refreshTokenColumns = `token_hash, family_id, client_id, principal, subject, resource, scope,
	created_at, expires_at, family_expires_at, used_at, revoked_at,
	coalesce(successor_hash, ''), coalesce(successor_salt, ''), repeat_until`

	// consentColumns is the column list of a Consent, in field order.
	consentColumns = `principal, client_id, scope, resource, created_at, updated_at, last_used_at, revoked_at`
)

// keyShared is q, a SELECT of rows an issue or a rotation relies on,
// locked FOR KEY SHARE on PostgreSQL: the lock waits for a revocation's
// FOR UPDATE and makes it wait, and lets issues and rotations, and updates
// of other columns (TouchConsent), run side by side. SQLite's writer locks
// the database, and sqliteDialect drops only FOR UPDATE.
func keyShared(q string) stmt { return perEngine(q+` FOR KEY SHARE`, q) }

// keySharedOf is keyShared of a join that locks only the rows of table.
func keySharedOf(q, table string) stmt { return perEngine(q+` FOR KEY SHARE OF `+table, q) }

// touchClientSet moves a client's last_used_at forward to $2 only,
// whatever order concurrent touches commit in; touchConsentSet a
// consent's to at. SQLite compares its fixed-width time text as the
// times.
const touchClientSet = `SET last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < $2::timestamptz
	THEN $2::timestamptz ELSE last_used_at END`

func touchConsentSet(at string) string {
	return `SET last_used_at = CASE WHEN last_used_at < ` + at + `::timestamptz THEN ` + at + `::timestamptz ELSE last_used_at END`
}

var (
	insertOAuthClient = sql1(`
INSERT INTO oauth_clients (id, kind, name, redirect_uris, grant_types, auth_method, secret_hash, metadata,
	registered_by, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
RETURNING ` + oauthClientColumns)

	// putMetadataClient updates only a metadata document's client: a
	// client of another kind under the same id makes it return no row.
	putMetadataClient = sql1(`
INSERT INTO oauth_clients (id, kind, name, redirect_uris, grant_types, auth_method, secret_hash, metadata,
	registered_by, created_at, updated_at)
VALUES ($1, 'metadata_document', $2, $3, $4, $5, '', $6, '', $7, $8)
ON CONFLICT (id) DO UPDATE SET name = excluded.name, redirect_uris = excluded.redirect_uris,
	grant_types = excluded.grant_types, auth_method = excluded.auth_method, metadata = excluded.metadata,
	updated_at = excluded.updated_at
	WHERE oauth_clients.kind = 'metadata_document'
RETURNING ` + oauthClientColumns)

	getOAuthClient = sql1(`SELECT ` + oauthClientColumns + ` FROM oauth_clients WHERE id = $1`)

	listOAuthClients = sql1(`SELECT ` + oauthClientColumns + ` FROM oauth_clients ORDER BY created_at, id`)

	countOAuthRegistrations = sql1(`
SELECT count(*) FROM oauth_clients WHERE registered_by = $1 AND created_at >= $2`)

	// lockOAuthClient starts a revocation of the client (see the top of
	// this file).
	lockOAuthClient = sql1(`SELECT revoked_at FROM oauth_clients WHERE id = $1 FOR UPDATE`)

	shareOAuthClient = keyShared(`SELECT revoked_at FROM oauth_clients WHERE id = $1`)

	// revokeOAuthClientRow keeps the first revocation's time.
	revokeOAuthClientRow = sql1(`
UPDATE oauth_clients SET revoked_at = $2, updated_at = $2 WHERE id = $1 AND revoked_at IS NULL`)

	revokeClientRefreshTokens = sql1(`
UPDATE oauth_refresh_tokens SET revoked_at = $2, successor_salt = NULL WHERE client_id = $1 AND revoked_at IS NULL`)

	revokeClientConsents = sql1(`
UPDATE oauth_consents SET revoked_at = $2, updated_at = $2 WHERE client_id = $1 AND revoked_at IS NULL`)

	touchOAuthClient = sql1(`UPDATE oauth_clients ` + touchClientSet + ` WHERE id = $1`)

	insertOAuthCode = sql1(`
INSERT INTO oauth_codes (code_hash, client_id, principal, subject, redirect_uri, code_challenge, resource, scope,
	created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`)

	getOAuthCode  = sql1(`SELECT ` + oauthCodeColumns + ` FROM oauth_codes WHERE code_hash = $1`)
	lockOAuthCode = sql1(`SELECT ` + oauthCodeColumns + ` FROM oauth_codes WHERE code_hash = $1 FOR UPDATE`)

	// redeemOAuthCode redeems the code if it is unused and live at $2.
	redeemOAuthCode = sql1(`
UPDATE oauth_codes SET used_at = $2, family_id = $3
WHERE code_hash = $1 AND used_at IS NULL AND expires_at > $2
RETURNING ` + oauthCodeColumns)

	// replayOAuthCode keeps the first replay's time.
	replayOAuthCode = sql1(`
UPDATE oauth_codes SET replayed_at = coalesce(replayed_at, $2) WHERE code_hash = $1
RETURNING ` + oauthCodeColumns)

	// redeemIssuedOAuthCode is redeemOAuthCode in a transaction that goes
	// on to issue the grant's tokens, or rolls back (PostgreSQL's grant in
	// one round trip): it records their issue with the redemption.
	redeemIssuedOAuthCode = sql1(`
UPDATE oauth_codes SET used_at = $2, family_id = $3, issued_at = $2
WHERE code_hash = $1 AND used_at IS NULL AND expires_at > $2
RETURNING ` + oauthCodeColumns)

	// issuedOAuthCode records that the code's redemption at $2 issued
	// tokens.
	issuedOAuthCode = sql1(`UPDATE oauth_codes SET issued_at = $2 WHERE code_hash = $1`)

	shareFamilyCodes = keyShared(`SELECT replayed_at FROM oauth_codes WHERE family_id = $1`)

	deleteExpiredOAuthCodes = sql1(`DELETE FROM oauth_codes WHERE expires_at <= $1`)

	insertRefreshToken = sql1(`
INSERT INTO oauth_refresh_tokens (token_hash, family_id, client_id, principal, subject, resource, scope,
	created_at, expires_at, family_expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`)

	// shareCodeClient and shareTokenClient read who a code or a refresh
	// token was issued to, locking the client as shareOAuthClient does.
	shareCodeClient = keySharedOf(`
SELECT o.client_id, o.principal, c.revoked_at FROM oauth_codes o JOIN oauth_clients c ON c.id = o.client_id
WHERE o.code_hash = $1`, "c")
	shareTokenClient = keySharedOf(`
SELECT t.client_id, t.principal, c.revoked_at FROM oauth_refresh_tokens t JOIN oauth_clients c ON c.id = t.client_id
WHERE t.token_hash = $1`, "c")

	getRefreshToken  = sql1(`SELECT ` + refreshTokenColumns + ` FROM oauth_refresh_tokens WHERE token_hash = $1`)
	lockRefreshToken = sql1(`SELECT ` + refreshTokenColumns + ` FROM oauth_refresh_tokens WHERE token_hash = $1 FOR UPDATE`)

	// useRefreshToken uses the token if it is unused, not revoked and
	// live at $2, naming its successor $3 and keeping the successor's
	// salt $4 until $5 (NULL, NULL for no repeat).
	useRefreshToken = sql1(`
UPDATE oauth_refresh_tokens SET used_at = $2, successor_hash = $3, successor_salt = $4, repeat_until = $5
WHERE token_hash = $1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $2 AND family_expires_at > $2
RETURNING ` + refreshTokenColumns)

	// endRepeatsOf clears the salt of the token $1 was rotated from: a
	// used token's predecessor can no longer be repeated.
	endRepeatsOf = sql1(`
UPDATE oauth_refresh_tokens SET successor_salt = NULL WHERE successor_hash = $1 AND successor_salt IS NOT NULL`)

	// endRepeats clears the salts whose repeats ended at or before $1.
	endRepeats = sql1(`
UPDATE oauth_refresh_tokens SET successor_salt = NULL WHERE repeat_until <= $1 AND successor_salt IS NOT NULL`)

	refreshTokenFamily = sql1(`SELECT family_id FROM oauth_refresh_tokens WHERE token_hash = $1`)

	revokeRefreshTokens = sql1(`
UPDATE oauth_refresh_tokens SET revoked_at = $2, successor_salt = NULL WHERE family_id = $1 AND revoked_at IS NULL`)

	// revokeGrant records the family's revocation, keeping the first's
	// time.
	revokeGrant = sql1(`
INSERT INTO oauth_revoked_grants (family_id, revoked_at) VALUES ($1, $2) ON CONFLICT (family_id) DO NOTHING`)

	// revokeClientGrants records the revocation of every grant of the
	// client $1 whose access tokens could still be unexpired: each family
	// a code of it began or a refresh token of it still names (the sweep
	// keeps both while an access token of theirs could live), keeping an
	// earlier revocation's time.
	revokeClientGrants = sql1(`
INSERT INTO oauth_revoked_grants (family_id, revoked_at)
SELECT family_id, $2::timestamptz FROM oauth_codes WHERE client_id = $1 AND family_id IS NOT NULL
UNION SELECT family_id, $2::timestamptz FROM oauth_refresh_tokens WHERE client_id = $1
ON CONFLICT (family_id) DO NOTHING`)

	// revokeConsentGrants is revokeClientGrants for the grants of one
	// person ($1) to one client ($2), at $3.
	revokeConsentGrants = sql1(`
INSERT INTO oauth_revoked_grants (family_id, revoked_at)
SELECT family_id, $3::timestamptz FROM oauth_codes WHERE principal = $1 AND client_id = $2 AND family_id IS NOT NULL
UNION SELECT family_id, $3::timestamptz FROM oauth_refresh_tokens WHERE principal = $1 AND client_id = $2
ON CONFLICT (family_id) DO NOTHING`)

	grantRevoked = sql1(`SELECT EXISTS (SELECT 1 FROM oauth_revoked_grants WHERE family_id = $1)`)

	deleteOldRevokedGrants = sql1(`DELETE FROM oauth_revoked_grants WHERE revoked_at <= $1`)

	// deleteEndedRefreshTokens deletes the tokens that can no longer be
	// rotated: expired (a token ends with its family at the latest:
	// insertRefresh), revoked or used; each condition has its index.
	deleteEndedRefreshTokens = sql1(`
DELETE FROM oauth_refresh_tokens WHERE expires_at <= $1 OR revoked_at <= $1 OR used_at <= $1`)

	// putConsent creates the consent or replaces it, revoked or not;
	// created_at stays the first's.
	putConsent = sql1(`
INSERT INTO oauth_consents (principal, client_id, scope, resource, created_at, updated_at, last_used_at)
VALUES ($1, $2, $3, $4, $5, $5, $5)
ON CONFLICT (principal, client_id) DO UPDATE SET scope = excluded.scope, resource = excluded.resource,
	updated_at = excluded.updated_at, last_used_at = excluded.last_used_at, revoked_at = NULL
RETURNING ` + consentColumns)

	getConsent = sql1(`SELECT ` + consentColumns + ` FROM oauth_consents WHERE principal = $1 AND client_id = $2`)

	consentExists = sql1(`SELECT EXISTS (SELECT 1 FROM oauth_consents WHERE principal = $1 AND client_id = $2)`)

	listConsents = sql1(`
SELECT ` + consentColumns + ` FROM oauth_consents WHERE principal = $1 AND revoked_at IS NULL
ORDER BY last_used_at DESC, client_id`)

	// lockConsent starts a revocation of the consent (see the top of this
	// file).
	lockConsent = sql1(`SELECT revoked_at FROM oauth_consents WHERE principal = $1 AND client_id = $2 FOR UPDATE`)

	shareConsent = keyShared(`SELECT revoked_at FROM oauth_consents WHERE principal = $1 AND client_id = $2`)

	touchConsent = sql1(`UPDATE oauth_consents ` + touchConsentSet("$3") + `
WHERE principal = $1 AND client_id = $2 AND revoked_at IS NULL`)

	// revokeConsentRow keeps the first revocation's time.
	revokeConsentRow = sql1(`
UPDATE oauth_consents SET revoked_at = $3, updated_at = $3
WHERE principal = $1 AND client_id = $2 AND revoked_at IS NULL`)

	insertConsentAnswer = sql1(`
INSERT INTO oauth_consent_answers (request_hash, decision, answered_at, expires_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (request_hash) DO NOTHING`)

	getConsentAnswer = sql1(`
SELECT request_hash, decision, answered_at, expires_at FROM oauth_consent_answers WHERE request_hash = $1`)

	deleteExpiredConsentAnswers = sql1(`DELETE FROM oauth_consent_answers WHERE expires_at <= $1`)

	revokeConsentRefreshTokens = sql1(`
UPDATE oauth_refresh_tokens SET revoked_at = $3, successor_salt = NULL
WHERE principal = $1 AND client_id = $2 AND revoked_at IS NULL`)
)

// checkOAuthClient validates a client CreateOAuthClient or
// PutMetadataClient writes; c has its times set.
func checkOAuthClient(c OAuthClient) error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("OAuth client ID is empty"))
	}
	if !c.Kind.Valid() {
		errs = append(errs, fmt.Errorf("OAuth client kind %q is unknown", c.Kind))
	}
	switch c.AuthMethod {
	case authMethodSecretBasic:
		if c.SecretHash == "" {
			errs = append(errs, errors.New("an OAuth client authenticating with client_secret_basic has no secret hash"))
		}
		if c.Kind == OAuthClientMetadataDocument {
			errs = append(errs, errors.New("a metadata document's client cannot hold a secret"))
		}
	case authMethodNone, authMethodPrivateJWT:
		if c.SecretHash != "" {
			errs = append(errs, fmt.Errorf("an OAuth client authenticating with %s has a secret hash", c.AuthMethod))
		}
	default:
		errs = append(errs, fmt.Errorf("OAuth client auth method %q is unknown", c.AuthMethod))
	}
	if !c.LastUsedAt.IsZero() {
		errs = append(errs, errors.New("the store sets an OAuth client's LastUsedAt"))
	}
	if !c.RevokedAt.IsZero() {
		errs = append(errs, errors.New("a new OAuth client cannot be revoked"))
	}
	if c.UpdatedAt.Before(c.CreatedAt) {
		errs = append(errs, errors.New("OAuth client UpdatedAt is before CreatedAt"))
	}
	errs = append(errs,
		checkText("OAuth client ID", c.ID),
		checkText("OAuth client name", c.Name),
		checkNames("OAuth client redirect URI", c.RedirectURIs),
		checkNames("OAuth client grant type", c.GrantTypes),
		checkText("OAuth client secret hash", c.SecretHash),
		checkJSON("OAuth client metadata", c.Metadata),
		checkText("OAuth client registered by", c.RegisteredBy),
		checkTime("OAuth client CreatedAt", c.CreatedAt),
		checkTime("OAuth client UpdatedAt", c.UpdatedAt))
	return invalid(errs...)
}

// checkNewAuthorizationCode validates a code CreateAuthorizationCode
// writes; a has its CreatedAt set.
func checkNewAuthorizationCode(a AuthorizationCode) error {
	errs := requiredTexts("authorization code", []namedText{
		{"hash", a.CodeHash, true},
		{"client ID", a.ClientID, true},
		{"principal", a.Principal, true},
		{"redirect URI", a.RedirectURI, true},
		{"code challenge", a.CodeChallenge, true},
		{"resource", a.Resource, true},
		{"scope", a.Scope, false},
	})
	errs = append(errs, checkLifetime("authorization code", a.CreatedAt, a.ExpiresAt),
		checkJSON("authorization code subject", a.Subject))
	if !a.UsedAt.IsZero() || a.FamilyID != "" || !a.ReplayedAt.IsZero() {
		errs = append(errs, errors.New("a new authorization code is not redeemed"))
	}
	return invalid(errs...)
}

// checkRefreshToken validates a token IssueRefreshToken writes, or the
// next token of RotateRefreshToken (rotated: FamilyID, ClientID and
// Principal may be empty, FamilyExpiresAt zero); t has its CreatedAt set.
func checkRefreshToken(t RefreshToken, rotated bool) error {
	errs := requiredTexts("refresh token", []namedText{
		{"hash", t.TokenHash, true},
		{"family ID", t.FamilyID, !rotated},
		{"client ID", t.ClientID, !rotated},
		{"principal", t.Principal, !rotated},
		{"resource", t.Resource, !rotated},
		{"scope", t.Scope, false},
	})
	errs = append(errs, checkLifetime("refresh token", t.CreatedAt, t.ExpiresAt),
		checkJSON("refresh token subject", t.Subject))
	if !rotated || !t.FamilyExpiresAt.IsZero() {
		errs = append(errs, checkLifetime("refresh token family", t.CreatedAt, t.FamilyExpiresAt))
	}
	if !t.UsedAt.IsZero() || !t.RevokedAt.IsZero() || t.SuccessorHash != "" || t.SuccessorSalt != "" || !t.RepeatUntil.IsZero() {
		errs = append(errs, errors.New("a new refresh token is neither used nor revoked, and has no successor"))
	}
	return invalid(errs...)
}

// maxRepeatSalt bounds TokenGrant.RepeatSalt.
const maxRepeatSalt = 256

// checkRepeat validates the repeat a rotation at now allows
// (TokenGrant.RepeatSalt and RepeatUntil): none, or a salt until a time
// after now.
func checkRepeat(g TokenGrant, now time.Time) error {
	switch {
	case g.RepeatUntil.IsZero() && g.RepeatSalt == "":
		return nil
	case g.RepeatUntil.IsZero() || g.RepeatSalt == "":
		return invalid(errors.New("a rotation's repeat needs both its salt and its end"))
	case !storedTime(g.RepeatUntil).After(now):
		return invalid(errors.New("a rotation's repeat must end after the rotation"))
	case len(g.RepeatSalt) > maxRepeatSalt:
		return invalid(fmt.Errorf("a rotation's repeat salt has %d bytes, more than %d", len(g.RepeatSalt), maxRepeatSalt))
	}
	return nil
}

// checkConsent validates a consent PutConsent writes.
func checkConsent(c Consent) error {
	errs := requiredTexts("consent", []namedText{
		{"principal", c.Principal, true},
		{"client ID", c.ClientID, true},
		{"scope", c.Scope, false},
		{"resource", c.Resource, false},
	})
	errs = append(errs, checkTime("consent UpdatedAt", c.UpdatedAt))
	return invalid(errs...)
}

// namedText is one text field to validate, and whether it is required.
type namedText struct {
	name, value string
	required    bool
}

// requiredTexts validates the fields of what: each storable as text, the
// required ones set.
func requiredTexts(what string, fields []namedText) []error {
	var errs []error
	for _, f := range fields {
		if f.required && f.value == "" {
			errs = append(errs, fmt.Errorf("%s %s is empty", what, f.name))
		}
		errs = append(errs, checkText(what+" "+f.name, f.value))
	}
	return errs
}

// checkLifetime validates what's end: set, storable, after its start.
func checkLifetime(what string, start, end time.Time) error {
	if end.IsZero() {
		return fmt.Errorf("%s expiry is zero", what)
	}
	if !end.After(start) {
		return fmt.Errorf("%s expires before it is created", what)
	}
	return errors.Join(checkTime(what+" start", start), checkTime(what+" expiry", end))
}

// checkKeys validates the keys an operation addresses rows by, and its
// time.
func checkKeys(now time.Time, keys ...namedText) error {
	return invalid(append(requiredTexts("OAuth", keys), checkNow(now))...)
}

// nullJSON is the argument for a nullable JSON column: NULL for none.
func nullJSON(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	return v
}

func (c *core) CreateOAuthClient(ctx context.Context, cl OAuthClient) (OAuthClient, error) {
	cl = clientTimes(cl, c.now())
	if err := checkOAuthClient(cl); err != nil {
		return OAuthClient{}, err
	}
	var out OAuthClient
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanOAuthClient(x.row(ctx, insertOAuthClient, cl.ID, string(cl.Kind), cl.Name,
			string(encodeNames(cl.RedirectURIs)), string(encodeNames(cl.GrantTypes)), cl.AuthMethod, cl.SecretHash,
			nullJSON(cl.Metadata), cl.RegisteredBy, storedTime(cl.CreatedAt), storedTime(cl.UpdatedAt)))
		return err
	})
	if err != nil {
		return OAuthClient{}, c.fail(err)
	}
	return out, nil
}

func (c *core) PutMetadataClient(ctx context.Context, cl OAuthClient) (OAuthClient, error) {
	if cl.Kind == "" {
		cl.Kind = OAuthClientMetadataDocument
	}
	cl = clientTimes(cl, c.now())
	err := checkOAuthClient(cl)
	if err == nil && (cl.Kind != OAuthClientMetadataDocument || cl.RegisteredBy != "") {
		err = invalid(fmt.Errorf("PutMetadataClient writes a metadata document's client, not a %s one registered by %q", cl.Kind, cl.RegisteredBy))
	}
	if err != nil {
		return OAuthClient{}, err
	}
	var out OAuthClient
	err = c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanOAuthClient(x.row(ctx, putMetadataClient, cl.ID, cl.Name,
			string(encodeNames(cl.RedirectURIs)), string(encodeNames(cl.GrantTypes)), cl.AuthMethod,
			nullJSON(cl.Metadata), storedTime(cl.CreatedAt), storedTime(cl.UpdatedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			// The id is a client of another kind.
			return ErrConflict
		}
		return err
	})
	if err != nil {
		return OAuthClient{}, c.fail(err)
	}
	return out, nil
}

// clientTimes sets a client's zero CreatedAt to now, and its zero
// UpdatedAt to its CreatedAt.
func clientTimes(cl OAuthClient, now time.Time) OAuthClient {
	if cl.CreatedAt.IsZero() {
		cl.CreatedAt = now
	}
	if cl.UpdatedAt.IsZero() {
		cl.UpdatedAt = cl.CreatedAt
	}
	return cl
}

func (c *core) GetOAuthClient(ctx context.Context, id string) (OAuthClient, error) {
	out, err := scanOAuthClient(c.reader().row(ctx, getOAuthClient, id))
	if err != nil {
		return OAuthClient{}, c.fail(err)
	}
	return out, nil
}

func (c *core) ListOAuthClients(ctx context.Context) ([]OAuthClient, error) {
	out, err := queryAll(ctx, c.reader(), listOAuthClients, scanOAuthClient)
	return out, c.fail(err)
}

func (c *core) CountOAuthRegistrations(ctx context.Context, registeredBy string, since time.Time) (int, error) {
	if err := checkKeys(since, namedText{"registering address", registeredBy, true}); err != nil {
		return 0, err
	}
	var n int
	err := c.reader().row(ctx, countOAuthRegistrations, registeredBy, storedTime(since)).Scan(&n)
	return n, c.fail(err)
}

func (c *core) RevokeOAuthClient(ctx context.Context, id string, now time.Time) error {
	if err := checkKeys(now, namedText{"client ID", id, true}); err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		return revokeOAuthClient(ctx, tx, id, storedTime(now))
	}))
}

// revokeOAuthClient revokes the client id, keeping an earlier revocation's
// time, and every consent and refresh token of it still standing: the
// consents before the tokens, in the order of the locks (see the top of
// this file), or a concurrent RevokeConsent, which holds a consent and
// waits for its tokens, would deadlock with it.
func revokeOAuthClient(ctx context.Context, x executor, id string, now time.Time) error {
	var revokedAt time.Time
	if err := x.row(ctx, lockOAuthClient, id).Scan(at(&revokedAt)); err != nil {
		return err
	}
	for _, s := range []stmt{revokeOAuthClientRow, revokeClientConsents, revokeClientRefreshTokens, revokeClientGrants} {
		if _, err := x.exec(ctx, s, id, now); err != nil {
			return err
		}
	}
	return nil
}

func (c *core) CreateAuthorizationCode(ctx context.Context, a AuthorizationCode) error {
	if a.CreatedAt.IsZero() {
		a.CreatedAt = c.now()
	}
	if err := checkNewAuthorizationCode(a); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, insertOAuthCode, a.CodeHash, a.ClientID, a.Principal, nullJSON(a.Subject),
			a.RedirectURI, a.CodeChallenge, a.Resource, a.Scope, storedTime(a.CreatedAt), storedTime(a.ExpiresAt))
		return err
	}))
}

func (c *core) RedeemAuthorizationCode(ctx context.Context, codeHash, family string, now time.Time, g *TokenGrant) (AuthorizationCode, error) {
	if err := checkKeys(now, namedText{"code hash", codeHash, true}, namedText{"family ID", family, true}); err != nil {
		return AuthorizationCode{}, err
	}
	now = storedTime(now)
	var out AuthorizationCode
	var replayed bool
	var refusal error
	err := c.inTx(ctx, func(tx executor) (err error) {
		replayed, refusal = false, nil
		if g != nil {
			// The client and the consent before the code, in the order of
			// the locks (see the top of this file).
			var clientID, principal string
			var revokedAt time.Time
			if err := tx.row(ctx, shareCodeClient, codeHash).Scan(&clientID, &principal, at(&revokedAt)); err != nil {
				return err
			}
			if refusal, err = holdGrant(ctx, tx, *g, clientID, principal, revokedAt, now); err != nil {
				return err
			}
		}
		out, replayed, err = redeemAuthorizationCode(ctx, tx, codeHash, family, now)
		if err != nil || replayed || g == nil || refusal != nil {
			// A revoked client or consent: the code is used up all the same.
			return err
		}
		var next *RefreshToken
		if g.Refresh != nil {
			n := *g.Refresh
			n.FamilyID, n.ClientID, n.Principal, n.Subject = family, out.ClientID, out.Principal, out.Subject
			n.Resource, n.Scope = out.Resource, out.Scope
			if n.CreatedAt.IsZero() {
				n.CreatedAt = now
			}
			if err := checkRefreshToken(n, false); err != nil {
				return err
			}
			next = &n
		}
		if _, err := tx.exec(ctx, issuedOAuthCode, codeHash, now); err != nil {
			return err
		}
		out.IssuedAt = now
		return writeGrant(ctx, tx, *g, next, out.ClientID, now)
	})
	switch {
	case errors.Is(err, ErrConflict):
		// Expired: the transaction wrote nothing.
		return out, ErrConflict
	case err != nil:
		return AuthorizationCode{}, c.fail(err)
	case replayed:
		return out, ErrReused
	case refusal != nil:
		return out, refusal
	}
	return out, nil
}

// holdGrant checks, in the transaction x of a grant g for the principal
// by the client (whose revocation time, read under its FOR KEY SHARE
// lock, is clientRevoked), that the client and, when g asks, the
// principal's consent to it still stand: a refusal ErrConflict when one is
// revoked, ErrNotFound when there is no consent. The consent's check is
// its touch (TokenGrant.Consent), whose row lock holds off its revocation
// until the grant commits; with no consent asked for, a FOR KEY SHARE
// lock on it does.
func holdGrant(ctx context.Context, x executor, g TokenGrant, clientID, principal string, clientRevoked, now time.Time) (refusal, _ error) {
	if !clientRevoked.IsZero() {
		return ErrConflict, nil
	}
	if !g.Consent {
		var revokedAt time.Time
		err := x.row(ctx, shareConsent, principal, clientID).Scan(at(&revokedAt))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil, nil
		case err != nil:
			return nil, err
		case !revokedAt.IsZero():
			return ErrConflict, nil
		}
		return nil, nil
	}
	n, err := x.exec(ctx, touchConsent, principal, clientID, now)
	if err == nil && n == 0 {
		if err = missingOrConflict(ctx, x, consentExists, principal, clientID); errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
			return err, nil
		}
	}
	return nil, err
}

// writeGrant writes what the grant g issues, after holdGrant and after
// its code was redeemed or its refresh token used in the transaction x:
// the client's last use (when g asks for the consent, whose own holdGrant
// moved), the refresh token next (completed by the caller), and g's audit
// record, last, as appendAuditTx requires.
func writeGrant(ctx context.Context, x executor, g TokenGrant, next *RefreshToken, clientID string, now time.Time) error {
	if g.Consent {
		if _, err := x.exec(ctx, touchOAuthClient, clientID, now); err != nil {
			return err
		}
	}
	if next != nil {
		if err := insertRefresh(ctx, x, *next); err != nil {
			return err
		}
	}
	if g.Audit != nil {
		if _, err := appendAuditTx(ctx, x, g.Audit); err != nil {
			return err
		}
	}
	return nil
}

// redeemAuthorizationCode uses the code codeHash once, as
// RedeemAuthorizationCode says: an update of the code if it is unused and
// live, and only when that matches no row, a look at why. A replay
// (replayed true) is written, and so returns no error; an expired code
// returns ErrConflict, to roll back.
func redeemAuthorizationCode(ctx context.Context, x executor, codeHash, family string, now time.Time) (_ AuthorizationCode, replayed bool, _ error) {
	code, err := scanOAuthCode(x.row(ctx, redeemOAuthCode, codeHash, now, family))
	if !errors.Is(err, sql.ErrNoRows) {
		return code, false, err
	}
	if code, err = scanOAuthCode(x.row(ctx, lockOAuthCode, codeHash)); err != nil {
		return AuthorizationCode{}, false, err
	}
	switch {
	case !code.UsedAt.IsZero():
		// The code's holder has it twice, or someone else has a copy:
		// RFC 6749 §4.1.2 says to revoke what it issued. Marking the code
		// replayed stops its family's first token if it is not issued yet
		// (IssueRefreshToken).
		if code, err = scanOAuthCode(x.row(ctx, replayOAuthCode, codeHash, now)); err != nil {
			return AuthorizationCode{}, false, err
		}
		return code, true, revokeRefreshFamily(ctx, x, code.FamilyID, now)
	case !now.Before(code.ExpiresAt):
		return code, false, ErrConflict
	}
	// Unused and live now: it changed between the two statements.
	return code, false, fmt.Errorf("store: the authorization code changed during its redemption")
}

func (c *core) IssueRefreshToken(ctx context.Context, t RefreshToken) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = c.now()
	}
	if err := checkRefreshToken(t, false); err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		if err := shareIssuer(ctx, tx, t.ClientID, t.Principal); err != nil {
			return err
		}
		replays, err := queryAll(ctx, tx, shareFamilyCodes, scanTime, t.FamilyID)
		if err != nil {
			return err
		}
		for _, r := range replays {
			if !r.IsZero() {
				// The code that began the family was replayed, and its
				// family revoked.
				return ErrConflict
			}
		}
		return insertRefresh(ctx, tx, t)
	}))
}

// shareIssuer locks, until the transaction ends, the client's row and the
// principal's consent to it against their revocation (see the top of this
// file): ErrNotFound when the client does not exist, ErrConflict when it
// or the consent is revoked. No consent is no refusal: the caller decides
// whether a client needs one.
func shareIssuer(ctx context.Context, x executor, clientID, principal string) error {
	var revokedAt time.Time
	if err := x.row(ctx, shareOAuthClient, clientID).Scan(at(&revokedAt)); err != nil {
		return err
	}
	if !revokedAt.IsZero() {
		return ErrConflict
	}
	err := x.row(ctx, shareConsent, principal, clientID).Scan(at(&revokedAt))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	case !revokedAt.IsZero():
		return ErrConflict
	}
	return nil
}

// insertRefresh inserts the refresh token t, which ends with its family
// at the latest: a later ExpiresAt is cut to FamilyExpiresAt.
func insertRefresh(ctx context.Context, x executor, t RefreshToken) error {
	if t.ExpiresAt.After(t.FamilyExpiresAt) {
		t.ExpiresAt = t.FamilyExpiresAt
	}
	_, err := x.exec(ctx, insertRefreshToken, t.TokenHash, t.FamilyID, t.ClientID, t.Principal,
		nullJSON(t.Subject), t.Resource, t.Scope,
		storedTime(t.CreatedAt), storedTime(t.ExpiresAt), storedTime(t.FamilyExpiresAt))
	return err
}

func (c *core) RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, g TokenGrant) (RefreshToken, error) {
	err := checkKeys(now, namedText{"old token hash", oldHash, true})
	if err == nil && g.Refresh == nil {
		err = invalid(errors.New("a rotation needs the next refresh token"))
	}
	if err != nil {
		return RefreshToken{}, err
	}
	now = storedTime(now)
	next := *g.Refresh
	if next.CreatedAt.IsZero() {
		next.CreatedAt = now
	}
	if err := checkRefreshToken(next, true); err != nil {
		return RefreshToken{}, err
	}
	if err := checkRepeat(g, now); err != nil {
		return RefreshToken{}, err
	}
	var old RefreshToken
	var reused bool
	err = c.inTx(ctx, func(tx executor) (err error) {
		old, reused, err = rotateRefreshToken(ctx, tx, oldHash, now, g, next)
		return err
	})
	switch {
	case reused:
		return old, ErrReused
	case err != nil:
		// Revoked, expired or its consent gone: the transaction wrote
		// nothing.
		return old, c.fail(err)
	}
	return old, nil
}

// rotateRefreshToken rotates oldHash to next with the grant g, as
// RotateRefreshToken says: an update of the old token if it is unused and
// live, and only when that matches no row, a look at why. A reuse (reused
// true) revokes the family, which is written, and so returns no error; a
// revoked or expired token, or a refusal of holdGrant, returns
// ErrConflict or ErrNotFound, to roll back.
func rotateRefreshToken(ctx context.Context, x executor, oldHash string, now time.Time, g TokenGrant, next RefreshToken) (_ RefreshToken, reused bool, _ error) {
	var clientID, principal string
	var clientRevoked time.Time
	if err := x.row(ctx, shareTokenClient, oldHash).Scan(&clientID, &principal, at(&clientRevoked)); err != nil {
		return RefreshToken{}, false, err
	}
	refusal, err := holdGrant(ctx, x, g, clientID, principal, clientRevoked, now)
	if err != nil {
		return RefreshToken{}, false, err
	}
	var old RefreshToken
	if refusal == nil {
		// The token presented, used or not, ends its predecessor's repeat
		// (the predecessor's row first, as a repeat of it locks them).
		if _, err := x.exec(ctx, endRepeatsOf, oldHash); err != nil {
			return RefreshToken{}, false, err
		}
		old, err = scanRefreshToken(x.row(ctx, useRefreshToken, oldHash, now,
			next.TokenHash, nullString(g.RepeatSalt), nullTime(g.RepeatUntil)))
		if err == nil {
			err = checkSuccessor(old, &next)
			if err == nil {
				err = writeGrant(ctx, x, g, &next, clientID, now)
			}
			if err != nil {
				// Rolled back: the token as it stays.
				old.UsedAt, old.SuccessorHash, old.SuccessorSalt, old.RepeatUntil = time.Time{}, "", "", time.Time{}
			}
			return old, false, err
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return RefreshToken{}, false, err
		}
	}
	if old, err = scanRefreshToken(x.row(ctx, lockRefreshToken, oldHash)); err != nil {
		return RefreshToken{}, false, err
	}
	if old.UsedAt.IsZero() {
		if refusal != nil {
			return old, false, refusal
		}
		// Revoked or expired: nothing to write.
		return old, false, ErrConflict
	}
	repeat, err := repeatable(ctx, x, old, now)
	switch {
	case err != nil:
		return old, false, err
	case repeat && refusal != nil:
		// Its client or consent is gone since: refused as the rotation
		// would be, and no one's copy.
		return old, false, refusal
	case repeat:
		// The rotation's own client again, before the successor was used:
		// its answer again (the same successor, a new access token).
		g.Audit = g.RepeatAudit
		return old, false, writeGrant(ctx, x, g, nil, clientID, now)
	}
	// Reuse: the old token's holder and someone else both have it, and
	// the store cannot tell which is the thief (RFC 9700 §4.14.2).
	return old, true, revokeRefreshFamily(ctx, x, old.FamilyID, now)
}

// repeatable reports whether old, a rotated token presented again at
// now, is a repeat: not revoked, its repeat not ended, and its successor
// neither used nor revoked nor expired. The successor is locked, as a
// rotation would lock it, so that its own rotation waits for the repeat
// or the repeat for it.
func repeatable(ctx context.Context, x executor, old RefreshToken, now time.Time) (bool, error) {
	if !old.RevokedAt.IsZero() || old.SuccessorSalt == "" || !old.RepeatUntil.After(now) {
		return false, nil
	}
	next, err := scanRefreshToken(x.row(ctx, lockRefreshToken, old.SuccessorHash))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return next.UsedAt.IsZero() && next.RevokedAt.IsZero() && next.ExpiresAt.After(now) && next.FamilyExpiresAt.After(now), nil
}

// checkSuccessor completes next, the token rotated from old, with old's
// family, client and principal, and its family's end when it has none;
// ErrInvalid when next names others, or would outlive the family.
func checkSuccessor(old RefreshToken, next *RefreshToken) error {
	var errs []error
	inherit := func(name string, field *string, value string) {
		if *field == "" {
			*field = value
		} else if *field != value {
			errs = append(errs, fmt.Errorf("the next refresh token's %s is %q, not the old one's %q", name, *field, value))
		}
	}
	inherit("family ID", &next.FamilyID, old.FamilyID)
	inherit("client ID", &next.ClientID, old.ClientID)
	inherit("principal", &next.Principal, old.Principal)
	inherit("resource", &next.Resource, old.Resource)
	inherit("scope", &next.Scope, old.Scope)
	if len(next.Subject) == 0 {
		next.Subject = old.Subject
	} else if !bytes.Equal(next.Subject, old.Subject) {
		errs = append(errs, errors.New("the next refresh token's subject is not the old one's"))
	}
	if next.FamilyExpiresAt.IsZero() {
		next.FamilyExpiresAt = old.FamilyExpiresAt
	} else if storedTime(next.FamilyExpiresAt).After(old.FamilyExpiresAt) {
		errs = append(errs, errors.New("a rotation cannot extend the refresh token family's lifetime"))
	}
	if !next.FamilyExpiresAt.After(next.CreatedAt) {
		errs = append(errs, errors.New("the next refresh token is created after its family ends"))
	}
	return invalid(errs...)
}

func (c *core) GetAuthorizationCode(ctx context.Context, codeHash string) (AuthorizationCode, error) {
	if err := invalid(requiredTexts("OAuth", []namedText{{"code hash", codeHash, true}})...); err != nil {
		return AuthorizationCode{}, err
	}
	a, err := scanOAuthCode(c.reader().row(ctx, getOAuthCode, codeHash))
	return a, c.fail(err)
}

func (c *core) GetRefreshToken(ctx context.Context, tokenHash string) (RefreshToken, error) {
	if err := invalid(requiredTexts("OAuth", []namedText{{"token hash", tokenHash, true}})...); err != nil {
		return RefreshToken{}, err
	}
	t, err := scanRefreshToken(c.reader().row(ctx, getRefreshToken, tokenHash))
	return t, c.fail(err)
}

func (c *core) RevokeRefreshFamily(ctx context.Context, tokenHash string, now time.Time) error {
	if err := checkKeys(now, namedText{"token hash", tokenHash, true}); err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		var family string
		if err := tx.row(ctx, refreshTokenFamily, tokenHash).Scan(&family); err != nil {
			return err
		}
		return revokeRefreshFamily(ctx, tx, family, storedTime(now))
	}))
}

// revokeRefreshFamily revokes every token of the family still standing,
// and records the family's grant revoked.
// The update is repeated until it changes no row: on PostgreSQL a pass
// that waited for a rotation's lock does not see the token the rotation
// inserted, and the next pass does. Each pass but the last revokes a
// token, and a rotation can add one only by holding the lock of one still
// standing, so the passes end.
func revokeRefreshFamily(ctx context.Context, x executor, family string, now time.Time) error {
	if family == "" {
		return nil
	}
	// The grant too, so that the family's access tokens are refused
	// (GrantRevoked).
	if _, err := x.exec(ctx, revokeGrant, family, now); err != nil {
		return err
	}
	for {
		n, err := x.exec(ctx, revokeRefreshTokens, family, now)
		if err != nil || n == 0 {
			return err
		}
	}
}

func (c *core) PutConsent(ctx context.Context, cs Consent) (Consent, error) {
	if cs.UpdatedAt.IsZero() {
		cs.UpdatedAt = c.now()
	}
	if err := checkConsent(cs); err != nil {
		return Consent{}, err
	}
	var out Consent
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanConsent(x.row(ctx, putConsent, cs.Principal, cs.ClientID, cs.Scope, cs.Resource,
			storedTime(cs.UpdatedAt)))
		return err
	})
	if err != nil {
		return Consent{}, c.fail(err)
	}
	return out, nil
}

func (c *core) GetConsent(ctx context.Context, principal, clientID string) (Consent, error) {
	out, err := scanConsent(c.reader().row(ctx, getConsent, principal, clientID))
	if err != nil {
		return Consent{}, c.fail(err)
	}
	return out, nil
}

func (c *core) ListConsents(ctx context.Context, principal string) ([]Consent, error) {
	out, err := queryAll(ctx, c.reader(), listConsents, scanConsent, principal)
	return out, c.fail(err)
}

func (c *core) TouchConsent(ctx context.Context, principal, clientID string, now time.Time) error {
	if err := checkKeys(now, namedText{"principal", principal, true}, namedText{"client ID", clientID, true}); err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		// The client first: a revocation of the client locks it before
		// its consents (see the top of this file).
		if _, err := tx.exec(ctx, touchOAuthClient, clientID, storedTime(now)); err != nil {
			return err
		}
		n, err := tx.exec(ctx, touchConsent, principal, clientID, storedTime(now))
		if err == nil && n == 0 {
			err = missingOrConflict(ctx, tx, consentExists, principal, clientID)
		}
		return err
	}))
}

func (c *core) RevokeConsent(ctx context.Context, principal, clientID string, now time.Time) error {
	if err := checkKeys(now, namedText{"principal", principal, true}, namedText{"client ID", clientID, true}); err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		var revokedAt time.Time
		if err := tx.row(ctx, lockConsent, principal, clientID).Scan(at(&revokedAt)); err != nil {
			return err
		}
		if !revokedAt.IsZero() {
			return ErrConflict // revoked before: its tokens with it
		}
		for _, s := range []stmt{revokeConsentRow, revokeConsentRefreshTokens, revokeConsentGrants} {
			if _, err := tx.exec(ctx, s, principal, clientID, storedTime(now)); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (c *core) GrantRevoked(ctx context.Context, family string) (bool, error) {
	if err := invalid(requiredTexts("OAuth", []namedText{{"family ID", family, true}})...); err != nil {
		return false, err
	}
	var revoked bool
	err := c.reader().row(ctx, grantRevoked, family).Scan(&revoked)
	return revoked, c.fail(err)
}

func (c *core) AnswerConsentForm(ctx context.Context, a ConsentAnswer) (ConsentAnswer, error) {
	if a.AnsweredAt.IsZero() {
		a.AnsweredAt = c.now()
	}
	errs := requiredTexts("consent answer", []namedText{{"request hash", a.RequestHash, true}})
	if a.Decision != ConsentApprove && a.Decision != ConsentDeny {
		errs = append(errs, fmt.Errorf("consent answer decision %q is neither %s nor %s", a.Decision, ConsentApprove, ConsentDeny))
	}
	errs = append(errs, checkLifetime("consent answer", a.AnsweredAt, a.ExpiresAt))
	if err := invalid(errs...); err != nil {
		return ConsentAnswer{}, err
	}
	a.AnsweredAt, a.ExpiresAt = storedTime(a.AnsweredAt), storedTime(a.ExpiresAt)
	var prev ConsentAnswer
	err := c.inTx(ctx, func(tx executor) error {
		n, err := tx.exec(ctx, insertConsentAnswer, a.RequestHash, a.Decision, a.AnsweredAt, a.ExpiresAt)
		if err != nil || n == 1 {
			return err
		}
		// Answered before (or concurrently, and that answer committed
		// first: the insert waited for it).
		err = tx.row(ctx, getConsentAnswer, a.RequestHash).Scan(&prev.RequestHash, &prev.Decision, at(&prev.AnsweredAt), at(&prev.ExpiresAt))
		if err != nil {
			return err
		}
		return ErrConflict
	})
	switch {
	case errors.Is(err, ErrConflict):
		return prev, ErrConflict
	case err != nil:
		return ConsentAnswer{}, c.fail(err)
	}
	return a, nil
}

func (c *core) EndRefreshRepeats(ctx context.Context, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	var n int64
	err := c.writeOne(ctx, func(x executor) (err error) {
		n, err = x.exec(ctx, endRepeats, storedTime(now))
		return err
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return int(n), nil
}

func (c *core) DeleteExpiredOAuth(ctx context.Context, before time.Time) (int, error) {
	if err := invalid(checkNow(before)); err != nil {
		return 0, err
	}
	var total int64
	err := c.inTx(ctx, func(tx executor) error {
		total = 0
		for _, s := range []stmt{deleteExpiredOAuthCodes, deleteEndedRefreshTokens, deleteExpiredConsentAnswers, deleteOldRevokedGrants} {
			n, err := tx.exec(ctx, s, storedTime(before))
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return int(total), nil
}

// scanOAuthClient reads one row of oauthClientColumns.
func scanOAuthClient(row rowScanner) (OAuthClient, error) {
	var c OAuthClient
	var kind string
	var redirects, grants, metadata []byte
	err := row.Scan(&c.ID, &kind, &c.Name, &redirects, &grants, &c.AuthMethod, &c.SecretHash, &metadata,
		&c.RegisteredBy, at(&c.CreatedAt), at(&c.UpdatedAt), at(&c.LastUsedAt), at(&c.RevokedAt))
	if err != nil {
		return OAuthClient{}, err
	}
	c.Kind = OAuthClientKind(kind)
	c.Metadata = rawJSON(metadata)
	if c.RedirectURIs, err = decodeNames("oauth_clients.redirect_uris", redirects); err != nil {
		return OAuthClient{}, err
	}
	if c.GrantTypes, err = decodeNames("oauth_clients.grant_types", grants); err != nil {
		return OAuthClient{}, err
	}
	return c, nil
}

// scanOAuthCode reads one row of oauthCodeColumns.
func scanOAuthCode(row rowScanner) (AuthorizationCode, error) {
	var a AuthorizationCode
	var subject []byte
	err := row.Scan(&a.CodeHash, &a.ClientID, &a.Principal, &subject, &a.RedirectURI, &a.CodeChallenge,
		&a.Resource, &a.Scope, at(&a.CreatedAt), at(&a.ExpiresAt), at(&a.UsedAt), &a.FamilyID, at(&a.ReplayedAt), at(&a.IssuedAt))
	a.Subject = rawJSON(subject)
	return a, err
}

// scanRefreshToken reads one row of refreshTokenColumns.
func scanRefreshToken(row rowScanner) (RefreshToken, error) {
	var t RefreshToken
	var subject []byte
	err := row.Scan(&t.TokenHash, &t.FamilyID, &t.ClientID, &t.Principal, &subject, &t.Resource, &t.Scope,
		at(&t.CreatedAt), at(&t.ExpiresAt), at(&t.FamilyExpiresAt), at(&t.UsedAt), at(&t.RevokedAt),
		&t.SuccessorHash, &t.SuccessorSalt, at(&t.RepeatUntil))
	t.Subject = rawJSON(subject)
	return t, err
}

// scanConsent reads one row of consentColumns.
func scanConsent(row rowScanner) (Consent, error) {
	var c Consent
	err := row.Scan(&c.Principal, &c.ClientID, &c.Scope, &c.Resource,
		at(&c.CreatedAt), at(&c.UpdatedAt), at(&c.LastUsedAt), at(&c.RevokedAt))
	return c, err
}

// scanTime reads a row of one time column.
func scanTime(row rowScanner) (time.Time, error) {
	var t time.Time
	err := row.Scan(at(&t))
	return t, err
}

// rawJSON is a nullable JSON column's value: nil for NULL.
func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

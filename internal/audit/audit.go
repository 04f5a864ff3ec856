package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/usherhq/usher/store"
)

// Kind names what an entry records.
type Kind string

// The kinds Usher writes.
const (
	// KindAuthFailed: a request was refused authentication.
	KindAuthFailed Kind = "auth_failed"
	// KindDecision: the policy decided a tool call (allow, approve, deny).
	KindDecision Kind = "decision"
	// KindApprovalRequested: a call that needs approval created a request.
	KindApprovalRequested Kind = "approval_requested"
	// KindApprovalDecided: a human approved or denied a request.
	KindApprovalDecided Kind = "approval_decided"
	// KindApprovalsRevoked: a tool's definition changed and its open
	// approvals were revoked.
	KindApprovalsRevoked Kind = "approvals_revoked"
	// KindExecutionStarted: a tool call started running.
	KindExecutionStarted Kind = "execution_started"
	// KindExecuted: a tool call finished.
	KindExecuted Kind = "executed"
	// KindExecutionFailed: a tool call failed.
	KindExecutionFailed Kind = "execution_failed"
	// KindOutcomeUnknown: a tool call started but its end was never
	// recorded; it may or may not have acted.
	KindOutcomeUnknown Kind = "outcome_unknown"
	// KindRunExpired: a conversation without activity for
	// assistant.delete_inactive_after was deleted; Principal is its
	// owner.
	KindRunExpired Kind = "run_expired"
	// KindRunErased: a deleted conversation was erased, its content
	// gone (assistant.purge_deleted_after); Principal is its owner.
	KindRunErased Kind = "run_erased"
	// KindPrincipalErased: everything Usher kept of a person but the
	// audit log was erased (usher erase); Principal is the person, the
	// details count what was erased.
	KindPrincipalErased Kind = "principal_erased"
	// KindPrincipalExported: everything Usher keeps of a person was
	// exported (usher export), recorded before it is read; Principal is
	// the person.
	KindPrincipalExported Kind = "principal_exported"
	// KindLegalHoldPlaced: a legal hold was placed on a person's data, or
	// its reason changed (usher hold place); Principal is the person, the
	// details give the reason and who placed it.
	KindLegalHoldPlaced Kind = "legal_hold_placed"
	// KindLegalHoldLifted: a person's legal hold was lifted (usher hold
	// lift); the details give the hold as it stood and who lifted it.
	KindLegalHoldLifted Kind = "legal_hold_lifted"

	// The authorization server's (broker/oauth). None records a secret,
	// code or token: a token's jti, or nothing.

	// KindOAuthClientRegistered: a client registered itself (RFC 7591).
	KindOAuthClientRegistered Kind = "oauth_client_registered"
	// KindOAuthConsentGiven: a user approved a client on the consent page.
	KindOAuthConsentGiven Kind = "oauth_consent_given"
	// KindOAuthTokenIssued: the token endpoint issued an access token
	// (TokenJTI) to a client for a user.
	KindOAuthTokenIssued Kind = "oauth_token_issued"
	// KindOAuthRefreshReused: a rotated refresh token was presented again;
	// its family is revoked.
	KindOAuthRefreshReused Kind = "oauth_refresh_reused"
	// KindOAuthCodeReplayed: a redeemed authorization code was presented
	// again; the tokens it issued are revoked.
	KindOAuthCodeReplayed Kind = "oauth_code_replayed"
	// KindOAuthClientRevoked: an operator revoked a client (usher clients
	// revoke), with its refresh tokens and consents.
	KindOAuthClientRevoked Kind = "oauth_client_revoked"
	// KindOAuthTokenRevoked: a client revoked a refresh token (RFC 7009),
	// and with it its family.
	KindOAuthTokenRevoked Kind = "oauth_token_revoked"
	// KindOAuthConsentRevoked: a user disconnected a client (Connected
	// apps): their consent and their refresh tokens of it are revoked.
	KindOAuthConsentRevoked Kind = "oauth_consent_revoked"
	// KindOAuthTokenExchanged: the token endpoint exchanged a person's
	// access token for Usher's API for an access token for the MCP
	// endpoint (RFC 8693), issued (TokenJTI) to the exchanging client, who
	// acts for the person (Principal).
	KindOAuthTokenExchanged Kind = "oauth_token_exchanged"
	// KindOAuthClientAssertionReplayed: a client authenticating with
	// private_key_jwt presented an assertion whose jti it had used
	// (RFC 7523 §3): refused. The record names the client and the jti's
	// SHA-256, never the assertion.
	KindOAuthClientAssertionReplayed Kind = "oauth_client_assertion_replayed"
	// KindOAuthClientConfigured: usher serve wrote a client of its
	// configuration (oauth.clients) that was new or whose registration
	// changed; a start that changes nothing records nothing.
	KindOAuthClientConfigured Kind = "oauth_client_configured"
)

// kindPattern is what a Kind must look like.
var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// eventIDPattern is what an EventID must look like: 128 bits in hex.
var eventIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// NewEventID returns a new event identity: 128 random bits as 32
// lowercase hex digits.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ErrInvalidEntry reports an entry Append refuses to write.
var ErrInvalidEntry = errors.New("audit: invalid entry")

// Entry is one thing to record. Only Kind is required.
type Entry struct {
	Kind Kind
	// EventID is the event's identity (NewEventID), shared by every
	// attempt to record it: a caller that retries an Append after an error
	// (which may have committed, its acknowledgement lost) passes the same
	// EventID, and a retry of an event already recorded succeeds without
	// writing it again. Empty means a new one, made by the Log.
	EventID string
	// At is when it happened; zero means now. It is kept in UTC to the
	// microsecond.
	At        time.Time
	Principal string // who: the principal id, never an email
	ClientID  string
	// TokenJTI is the "jti" of the token the caller presented: never the
	// token itself.
	TokenJTI       string
	Tool           string
	DefinitionHash string
	ArgumentsHash  string
	Decision       string // allow, approve, deny; approved, denied
	PolicyIDs      []string
	PolicyHash     string
	ApprovalID     string
	RunID          string
	Outcome        string
	// Latency is how long it took, kept to the microsecond.
	Latency time.Duration
	// Details is any further JSON value; it is stored canonically (keys
	// sorted, no whitespace). Nil is {}.
	Details json.RawMessage
}

// Appender is the store an audit log writes to; store.Store is one.
type Appender interface {
	AppendAudit(ctx context.Context, build func(head store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error)
}

// Options configures New. A nil *Options means every default.
type Options struct {
	// Now is the clock that stamps entries without a time. Default:
	// time.Now.
	Now func() time.Time
}

// Log appends entries to the audit log. It is safe for concurrent use, by
// any number of processes sharing the database.
type Log struct {
	st  Appender
	now func() time.Time
}

// New returns a Log writing to st.
func New(st Appender, opts *Options) (*Log, error) {
	if st == nil {
		return nil, errors.New("audit: New needs a store")
	}
	l := &Log{st: st, now: time.Now}
	if opts != nil && opts.Now != nil {
		l.now = opts.Now
	}
	return l, nil
}

// Append writes e as the next record of the log, chained to the one before.
// It fails with ErrInvalidEntry for an entry it refuses, and otherwise only
// when the store does: an audited action should then not proceed. When
// e.EventID is already in the log, as when an Append that failed had
// committed, it writes nothing and succeeds.
func (l *Log) Append(ctx context.Context, e Entry) error {
	build, err := l.Builder(e)
	if err != nil {
		return err
	}
	_, err = l.st.AppendAudit(ctx, build)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return fmt.Errorf("audit: append %s: %w", e.Kind, err)
}

// Builder checks e and returns the function that makes it the next record
// of the log, for a store method that appends a record along with another
// write in one transaction (such as store.Store.BeginExecutionAudited).
// It fails with ErrInvalidEntry for an entry Append would refuse.
func (l *Log) Builder(e Entry) (func(store.AuditHead) (store.AuditRecord, error), error) {
	if err := checkEntry(e); err != nil {
		return nil, err
	}
	details, err := canonicalDetails(e.Details)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	at := e.At
	if at.IsZero() {
		at = l.now()
	}
	id := e.EventID
	if id == "" {
		id = NewEventID()
	}
	r := store.AuditRecord{
		EventID:        id,
		At:             at.UTC().Truncate(time.Microsecond),
		Kind:           string(e.Kind),
		Principal:      e.Principal,
		ClientID:       e.ClientID,
		TokenJTI:       e.TokenJTI,
		Tool:           e.Tool,
		DefinitionHash: e.DefinitionHash,
		ArgumentsHash:  e.ArgumentsHash,
		Decision:       e.Decision,
		PolicyIDs:      e.PolicyIDs,
		PolicyHash:     e.PolicyHash,
		ApprovalID:     e.ApprovalID,
		RunID:          e.RunID,
		Outcome:        e.Outcome,
		Latency:        storedLatency(e.Latency),
		Details:        details,
	}
	// The body is encoded once, around its Seq, the only part of it that
	// depends on the head: the builder may run more than once, inside the
	// append's transaction, and the store may link the record to the head
	// itself (store.AuditLink).
	link, err := linkOf(canonicalBodyOf(r, details))
	if err != nil {
		return nil, err
	}
	return func(head store.AuditHead) (store.AuditRecord, error) {
		r := r
		r.Seq, r.PrevHash = head.Seq+1, head.Hash
		r.Hash, r.Link = linkedHash(r.PrevHash, link, r.Seq), link
		return r, nil
	}, nil
}

// maxJTI bounds TokenJTI; real ones are a UUID or a few dozen characters.
const maxJTI = 256

// checkEntry refuses what must never be written: an entry of no known
// shape, or one that would put a token in the log.
func checkEntry(e Entry) error {
	var errs []error
	if !kindPattern.MatchString(string(e.Kind)) {
		errs = append(errs, fmt.Errorf("kind %q is not lowercase letters, digits and underscores", e.Kind))
	}
	// A JWT has three dot-separated parts; a jti has none of that shape.
	if len(e.TokenJTI) > maxJTI || strings.Count(e.TokenJTI, ".") >= 2 {
		errs = append(errs, errors.New("TokenJTI looks like a token, not a token id"))
	}
	if e.EventID != "" && !eventIDPattern.MatchString(e.EventID) {
		errs = append(errs, fmt.Errorf("event id %q is not 32 lowercase hex digits", e.EventID))
	}
	if e.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency %v is negative", e.Latency))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return nil
}

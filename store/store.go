package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors. Every engine translates its driver errors into these in
// one place, so callers branch with errors.Is and never see SQL.
var (
	// ErrNotFound reports that the addressed row does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict reports that a write lost a race or broke a uniqueness
	// rule: a compare-and-swap whose expected state no longer holds, a
	// duplicate key, or a serialization failure.
	ErrConflict = errors.New("store: conflict")
	// ErrInvalid reports that the store refused a value before writing it: a
	// missing required field, an unknown status, an event payload that is not
	// JSON. It marks a bug in the caller, not a race.
	ErrInvalid = errors.New("store: invalid argument")
)

// RunStatus is the lifecycle state of a run (a conversation).
type RunStatus string

// The run lifecycle. InProgress and AwaitingApproval are active and count
// against a user's limit; Idle is parked but resumable; Completed, Failed and
// Cancelled are terminal.
const (
	RunInProgress       RunStatus = "InProgress"
	RunAwaitingApproval RunStatus = "AwaitingApproval"
	RunIdle             RunStatus = "Idle"
	RunCompleted        RunStatus = "Completed"
	RunFailed           RunStatus = "Failed"
	RunCancelled        RunStatus = "Cancelled"
)

// Valid reports whether s is one of the defined statuses.
func (s RunStatus) Valid() bool {
	switch s {
	case RunInProgress, RunAwaitingApproval, RunIdle, RunCompleted, RunFailed, RunCancelled:
		return true
	}
	return false
}

// Terminal reports whether no further transition leaves s.
func (s RunStatus) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// Run is one conversation. Its events live in the run event log; the run row
// holds only what the scheduler and listings need.
type Run struct {
	ID     string
	Owner  string // the principal (issuer + tenant + object id), never an email
	Title  string
	Status RunStatus
	// IdempotencyKey, when set, makes creation idempotent per owner: a
	// second CreateRun with the same owner and key fails with ErrConflict.
	IdempotencyKey string

	// LastSeq is the sequence of the newest event (0 for none).
	LastSeq int64
	// MessageCount and Preview summarise the conversation for listings.
	MessageCount int
	Preview      string

	// Scheduling. LeaseOwner, LeaseExpiresAt and FencingToken describe the
	// replica that currently works the run; FencingToken only grows.
	QueuedAt       time.Time // zero when no turn is waiting
	LeaseOwner     string
	LeaseExpiresAt time.Time
	FencingToken   int64

	CreatedAt time.Time
	UpdatedAt time.Time
	// LastActivityAt is when the run last had an event; quiet runs are
	// parked as Idle from it.
	LastActivityAt time.Time
	CompletedAt    time.Time // zero until the run reaches a terminal status
	DeletedAt      time.Time // zero unless the owner deleted the run
}

// Event is one entry of a run's append-only event log. Seq is assigned by
// the store: it starts at 1 and grows by exactly 1 per event of the run.
type Event struct {
	RunID     string
	Seq       int64
	Type      string
	Payload   json.RawMessage
	CreatedAt time.Time
}

// SigningKey is an asymmetric signing key as stored: the private half is
// encrypted by its owner (the broker) before it reaches the store, which
// never sees it in the clear.
type SigningKey struct {
	ID      string // the JWK "kid"
	Purpose string // which issuer uses it, e.g. "broker" or "devoidc"
	// Generation numbers a purpose's keys from 1 upwards; it is unique per
	// purpose, so two replicas racing to rotate insert only one key.
	Generation int64
	Algorithm  string // e.g. "RS256"
	PublicKey  []byte // PKIX DER
	PrivateKey []byte // sealed by the owner
	CreatedAt  time.Time
	// SignsFrom is when the key may start signing; it is published in the
	// key set from CreatedAt, before it signs.
	SignsFrom time.Time
	// PublishedUntil is when the key leaves the published key set: after
	// every token it can have signed has expired.
	PublishedUntil time.Time
}

// Store is Usher's database. It is one interface, rather than several small
// ones, because one conformance suite (package storetest) backs it for every
// engine. Times are returned in UTC, truncated to microseconds.
type Store interface {
	// Migrate applies every pending migration. It is safe to run from
	// several processes at once.
	Migrate(ctx context.Context) error
	// Ready reports nil when the database answers and its schema is at the
	// newest migration this binary knows.
	Ready(ctx context.Context) error
	// Close releases the connections.
	Close() error

	// CreateRun inserts r. ID, Owner and Status are required; Title,
	// IdempotencyKey and QueuedAt are taken from r; the store sets every
	// other field (timestamps to now, counters to zero) and returns the row
	// as stored. A duplicate ID, or a duplicate (Owner, IdempotencyKey),
	// fails with ErrConflict.
	CreateRun(ctx context.Context, r Run) (Run, error)
	// GetRun returns the run or ErrNotFound.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns returns the owner's runs that are not deleted, newest
	// (by CreatedAt) first.
	ListRuns(ctx context.Context, owner string) ([]Run, error)
	// TransitionRun moves the run from one status to another as a
	// compare-and-swap: ErrNotFound when it does not exist, ErrConflict when
	// its status is not from, ErrInvalid when from is terminal. Reaching a
	// terminal status sets CompletedAt.
	TransitionRun(ctx context.Context, id string, from, to RunStatus) (Run, error)

	// AppendEvent appends an event to the run's log and returns it with its
	// sequence. Concurrent appends to one run get distinct, gapless,
	// increasing sequences, and the run's LastSeq, UpdatedAt and
	// LastActivityAt move with them. A nil payload is stored as {}. A
	// payload that is not JSON, or that holds what PostgreSQL's jsonb cannot
	// (the escape \u0000, an unpaired surrogate escape), fails on every
	// engine with ErrInvalid, and nothing is stored. Engines may normalise
	// the payload's whitespace and key order.
	// ErrNotFound when the run does not exist.
	AppendEvent(ctx context.Context, runID, typ string, payload json.RawMessage) (Event, error)
	// ListEvents returns up to limit events of the run with Seq > after, in
	// order. ErrNotFound when the run does not exist; ErrInvalid when limit
	// is not positive.
	ListEvents(ctx context.Context, runID string, after int64, limit int) ([]Event, error)

	// InsertSigningKey stores a new key; a zero CreatedAt means now. A
	// duplicate ID or (Purpose, Generation) fails with ErrConflict.
	InsertSigningKey(ctx context.Context, k SigningKey) error
	// SigningKeys returns the purpose's keys whose PublishedUntil is after
	// now, oldest generation first.
	SigningKeys(ctx context.Context, purpose string, now time.Time) ([]SigningKey, error)
}

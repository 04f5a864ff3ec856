package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// ErrLimit reports that an owner is at a limit, such as the number of
	// active runs.
	ErrLimit = errors.New("store: limit reached")
	// ErrClosed reports a write to a run that has reached a terminal status.
	ErrClosed = errors.New("store: run is closed")
	// ErrReused reports that a refresh token was presented again after it
	// was rotated: its family is revoked (see RotateRefreshToken). It is a
	// conflict too: errors.Is(ErrReused, ErrConflict) holds.
	ErrReused = fmt.Errorf("store: refresh token reused: %w", ErrConflict)
	// ErrUnavailable reports that the database could not be reached or
	// dropped the connection mid-operation (PostgreSQL shutting a backend
	// down, a network failure): the same operation may succeed a moment
	// later. A write that failed so may or may not have committed, so only
	// an idempotent write is tried again. Its Unavailable method tells the
	// HTTP layer to answer 503 rather than a generic 500.
	ErrUnavailable error = unavailableError{}
)

// unavailableError is ErrUnavailable's type.
type unavailableError struct{}

func (unavailableError) Error() string { return "store: database unavailable" }

// Unavailable reports true: see ErrUnavailable.
func (unavailableError) Unavailable() bool { return true }

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

	// TurnSeq is the sequence of the user message whose turn is open, 0
	// when no turn is open; HandledSeq that of the last user message whose
	// turn has ended. The next turn answers the first user message after
	// HandledSeq.
	TurnSeq    int64
	HandledSeq int64
	// Failures counts the run's slices in a row that failed without
	// ending their turn (see Release.Retry); NotBefore is when a run
	// queued for the retry of one may be claimed (zero: at once).
	Failures  int
	NotBefore time.Time

	CreatedAt time.Time
	UpdatedAt time.Time
	// LastActivityAt is when the run last had an event; quiet runs are
	// parked as Idle from it.
	LastActivityAt time.Time
	CompletedAt    time.Time // zero until the run reaches a terminal status
	DeletedAt      time.Time // zero unless the owner deleted the run

	// Context is the size of the model context of the run's latest model
	// step, as its turn recorded it (zero until one did).
	Context RunContext

	// Metadata is the run's settings, the text of a JSON object of at
	// most MaxRunMetadata bytes ("": none); the store keeps it as it is
	// given and does not look inside. (Text, so that a Run compares.)
	Metadata string
	// ParentRunID names the run this one continues (manual compaction),
	// and ParentVersion the version of the parent's context snapshot its
	// history starts from; empty and 0 for a run of its own.
	ParentRunID   string
	ParentVersion int64
	// ActiveBranch is the branch the conversation goes on in: its line
	// is what ListMessages reads, and every event appended carries it
	// (branches.go). 0 is the original line. Branches is how many
	// branches the run has beyond it (0: it never branched).
	ActiveBranch int64
	Branches     int64
	// QueuedTrace is the trace context of the request that last posted a
	// message to the run (NewEvent.Trace): the turns that follow link to
	// it. Zero when that request was not traced.
	QueuedTrace TraceContext
}

// MaxRunMetadata bounds a Run's Metadata, in bytes.
const MaxRunMetadata = 4 << 10

// Event is one entry of a run's append-only event log. Seq is assigned by
// the store: it starts at 1 and grows by exactly 1 per event of the run.
type Event struct {
	RunID     string
	Seq       int64
	Type      string
	Payload   json.RawMessage
	CreatedAt time.Time
	// Branch is the run's active branch when the event was appended; the
	// store sets it.
	Branch int64
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

	// OpenRun creates the run r for an owner who may have at most maxActive
	// active runs (InProgress or AwaitingApproval, not deleted), counted and
	// inserted atomically across processes. ID and Owner are required; the
	// run starts InProgress. With first, the opening message is appended in
	// the same transaction and the run is queued for a turn. When r has an
	// IdempotencyKey and the owner already has a run with that key, that run
	// is returned with created false and nothing is written (the limit is
	// not checked). ErrLimit when the owner is at the limit.
	OpenRun(ctx context.Context, r Run, maxActive int, first *NewEvent) (_ Run, created bool, _ error)
	// ContinueRun continues the run p.From in p.Child, a new run of the
	// same owner whose log opens with the message p.First (the summary
	// its history starts from), and, with p.Summary, whose context
	// snapshot 1 covers it; p.From gets p.Note appended and is completed
	// — all in one transaction (continue.go). p.From must be the owner's
	// and live (ErrNotFound), between turns with nothing waiting
	// (ErrConflict); ErrLimit as OpenRun, with p.MaxActive; an
	// IdempotencyKey returns the run it made.
	ContinueRun(ctx context.Context, p ContinueRunParams) (_ Run, created bool, _ error)
	// StopTurn ends the run's turn now (stop.go): the open turn, or the
	// turn of the first user message waiting for one, which never starts;
	// end(turnSeq, started) gives the events that end it (a turn not
	// started gets its start first). The run's lease is fenced off and the
	// run left InProgress, queued only for messages after the stopped one.
	// The run's open approvals are withdrawn (w), with their audit records.
	// ErrNotFound, ErrClosed, ErrNothingToStop.
	StopTurn(ctx context.Context, runID string, end TurnEndFunc, w Withdrawal) (Run, error)
	// KeepStoppedReply appends e, the partial reply of the turn StopTurn
	// stopped while l held the run, once, provided nothing claimed, closed
	// or deleted the run since (stop.go): ErrConflict otherwise.
	KeepStoppedReply(ctx context.Context, l Lease, e NewEvent) (Event, error)
	// RenameRun sets the title of a live run (closed ones too) and returns
	// it; ErrNotFound for a missing or deleted run.
	RenameRun(ctx context.Context, runID, title string) (Run, error)
	// SetRunMetadata replaces the metadata of a live run (closed ones
	// too; "" is none) and returns it; ErrNotFound for a missing or
	// deleted run, ErrInvalid for metadata that is not a JSON object of
	// at most MaxRunMetadata bytes. It appends no event.
	SetRunMetadata(ctx context.Context, runID, metadata string) (Run, error)
	// SearchMessages returns, for up to limit (1 to MaxSearchResults) of
	// owner's live runs whose user or assistant messages hold every word
	// of query (SearchWords), the latest such message (search.go), in no
	// particular order. ErrInvalid for a query without words.
	SearchMessages(ctx context.Context, owner, query string, limit int) ([]MessageMatch, error)
	// ChildRuns returns the ids of the live runs continuing runID,
	// oldest first.
	ChildRuns(ctx context.Context, runID string) ([]string, error)
	// RunKeyUsed reports whether owner has a run created with the
	// idempotency key key (OpenRun, ContinueRun), deleted or not: a
	// retry of that creation would return it. It writes nothing.
	RunKeyUsed(ctx context.Context, owner, key string) (bool, error)
	// MessageKeyUsed reports whether the run holds a message posted or
	// forked with the idempotency key key (PostMessageOnce, ForkRun): a
	// retry of that write would return it. It writes nothing.
	MessageKeyUsed(ctx context.Context, runID, key string) (bool, error)
	// PostMessage appends the user message e to the run and queues the run
	// for a turn, in one transaction. An Idle run wakes (InProgress, as a
	// compare-and-swap; the active-run limit is not checked again).
	// ErrNotFound when the run does not exist or is deleted; ErrClosed when
	// it is Completed, Failed or Cancelled.
	PostMessage(ctx context.Context, runID string, e NewEvent) (Event, Run, error)
	// PostMessageOnce is PostMessage with an idempotency key: when the
	// run already holds a message posted with key, that message is
	// returned with the run, created is false, and nothing is written
	// (whatever the run's status now). Of concurrent posts with one key,
	// one stores the message and the others return it. An empty key
	// always posts.
	PostMessageOnce(ctx context.Context, runID string, e NewEvent, key string) (_ Event, _ Run, created bool, _ error)
	// ClaimRuns leases up to limit runs that have work for owner (a
	// replica): InProgress runs that are queued and not leased (and whose
	// NotBefore has passed), or whose lease expired. Each claim sets the
	// lease, clears the queue mark and increments the fencing token;
	// concurrent claimers never get the same run. Runs are returned with
	// their new lease.
	ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Run, error)
	// NextClaimAt returns when ClaimRuns may next find a run: the
	// earliest expiry of a lease on an InProgress run, or the earliest
	// time a queued run that is not leased may be claimed (its NotBefore,
	// or its QueuedAt, in the past, when it may be claimed now). Zero when
	// no InProgress run is leased or queued. A scheduler sleeps until then.
	NextClaimAt(ctx context.Context) (time.Time, error)
	// WakeRetries makes the runs queued for a retry after a backoff (see
	// EndLease) claimable now, their failures still counted, and returns
	// how many it woke.
	WakeRetries(ctx context.Context) (int, error)
	// LeaseOwners returns the owners of the leases runs hold now (expired
	// or not), each once, in order: what a replica that starts looks
	// through for leases of an earlier incarnation of itself.
	LeaseOwners(ctx context.Context) ([]string, error)
	// RequeueLeases ends every lease owner holds, at once, whether or not
	// it has expired: each run is queued (its fencing token incremented,
	// which fences off any write of the old lease) and claimable now. It
	// returns the runs requeued. It is for a replica that starts and finds
	// leases of an earlier incarnation of itself, which cannot renew them.
	RequeueLeases(ctx context.Context, owner string) ([]Run, error)
	// RenewLease extends a lease that is still held: ErrConflict when the
	// run's fencing token or lease owner no longer match l (the lease was
	// lost), ErrNotFound when the run does not exist.
	RenewLease(ctx context.Context, l Lease, leaseFor time.Duration) (Lease, error)
	// AppendLeased appends events to the run in one transaction, provided l
	// still holds the run's lease (fencing token and owner), else
	// ErrConflict and nothing is written.
	AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error)
	// ReleaseRun ends the lease l and, when to is AwaitingApproval, moves
	// the run to it (a leased run is InProgress; to may also be empty or
	// InProgress, which keep it; CloseRun ends a run). A run
	// queued meanwhile stays queued and can be claimed at once, and a run
	// left InProgress with work (an open turn, or a user message after
	// HandledSeq) is queued: a release never strands a message. It resets
	// Failures and NotBefore. ErrConflict when the lease was lost.
	ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error)
	// EndLease appends events (none is fine) and ends the lease l as
	// ReleaseRun does, in one transaction, provided l still holds the
	// run's lease, else ErrConflict and nothing is written: a turn's last
	// events and the end of its lease commit together. With r.Requeue the
	// run is queued for another turn as well; with r.Retry it is queued
	// for a retry after that backoff, and the failure counted.
	EndLease(ctx context.Context, l Lease, r Release, events ...NewEvent) ([]Event, Run, error)
	// StartStep opens the step of the slice that holds the lease l, as
	// its first write, or continues the run's open step (steps.go);
	// ErrLimit beyond s.Budget, ErrConflict when l no longer holds the
	// run. EndLease ends the step (Release.Step).
	StartStep(ctx context.Context, l Lease, s StepStart) (Step, error)
	// ListSteps returns up to limit (1 to MaxStepsPage) of the run's
	// steps after the sequence after, in order; ErrNotFound when the run
	// does not exist.
	ListSteps(ctx context.Context, runID string, after int64, limit int) ([]Step, error)
	// RecordContext records c as the run's Context and appends events
	// (none is fine) in one transaction, provided l still holds the run:
	// ErrConflict otherwise, ErrNotFound for a missing run. The store
	// sets c.At.
	RecordContext(ctx context.Context, l Lease, c RunContext, events ...NewEvent) ([]Event, error)
	// RequeueRun queues the run for a turn: an AwaitingApproval run goes
	// back to InProgress. ErrConflict when the run is Idle or terminal,
	// ErrNotFound when it does not exist or is deleted.
	RequeueRun(ctx context.Context, runID string) (Run, error)
	// CloseRun moves a run that is not terminal to the terminal status to,
	// revokes any lease (incrementing the fencing token, so a turn still
	// running can write nothing more) and clears the queue. It ends the
	// open turn, and the turn of every user message still waiting for
	// one, with the events of turnEnd, so that each user message has its
	// turn's end; with turnEnd nil, an open turn gets a bare end and
	// waiting messages none. The run's open approvals are withdrawn (w),
	// with their audit records, as StopTurn withdraws them. ErrClosed when
	// the run is already terminal, ErrNotFound when it does not exist or is
	// deleted.
	CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd TurnEndFunc, w Withdrawal) (Run, error)
	// DeleteRun marks the run deleted (cancelling it first when it is not
	// terminal, as CloseRun does) and withdraws its open approvals (w).
	// Its events stay until PurgeDeletedRuns erases them, but listings
	// and GetRun's callers no longer show it; its attachments are deleted
	// with it. ErrNotFound when it does not exist or is already deleted.
	DeleteRun(ctx context.Context, runID string, turnEnd TurnEndFunc, w Withdrawal) error
	// PurgeDeletedRuns erases up to limit (1 to MaxPurgeBatch) runs
	// deleted before deletedBefore, the oldest deletion first, with all
	// they hold — events, message keys, branches, snapshots, steps,
	// approvals, the executions of their tool calls — in one transaction
	// with the audit record audit builds of each erasure (none when audit
	// is nil), and returns them as they were. Runs that continue one keep
	// their own history and name no parent afterwards. The audit log's
	// records are kept. Concurrent purges erase different runs.
	PurgeDeletedRuns(ctx context.Context, deletedBefore time.Time, limit int, audit RunAudit) ([]Run, error)
	// ErasePrincipal erases everything of the person principal but the
	// audit log's records, with audit's record of it, in one transaction
	// (see erase.go), and returns what it erased.
	ErasePrincipal(ctx context.Context, principal string, audit ErasureAudit) (PrincipalErasure, error)
	// ExportPrincipal reads everything of the person principal that
	// ErasePrincipal would erase, and the audit records that name them,
	// in one snapshot, giving each row to row (see export.go).
	ExportPrincipal(ctx context.Context, principal string, row func(table string, columns map[string]any) error) error
	// PlaceLegalHold places a legal hold on a person's data, or gives
	// theirs a new reason, with audit's record of it, in one transaction
	// (see legalholds.go); LiftLegalHold lifts it (ErrNotFound when there
	// is none), and LegalHolds lists those that stand.
	PlaceLegalHold(ctx context.Context, h LegalHold, audit LegalHoldAudit) (LegalHold, error)
	LiftLegalHold(ctx context.Context, principal string, audit LegalHoldAudit) (LegalHold, error)
	LegalHolds(ctx context.Context) ([]LegalHold, error)
	// InactiveRuns returns the ids of up to limit (1 to MaxPurgeBatch)
	// runs not deleted, Idle or closed, whose last activity was before
	// before, the oldest first.
	InactiveRuns(ctx context.Context, before time.Time, limit int) ([]string, error)
	// DeleteInactiveRun deletes the run as DeleteRun does, with audit's
	// record of it, in one transaction, if it is still such a run; false
	// and nothing written when it is not, or is gone.
	DeleteInactiveRun(ctx context.Context, runID string, before time.Time, w Withdrawal, audit RunAudit) (Run, bool, error)
	// ParkIdleRuns moves InProgress runs with no lease, no queued work, no
	// open turn, no user message after HandledSeq and no activity since
	// quietSince to Idle, and returns them.
	ParkIdleRuns(ctx context.Context, quietSince time.Time) ([]Run, error)
	// ParkRun moves one quiet run to Idle at once, as ParkIdleRuns does
	// after its quiet time: InProgress, with no lease, no queued work, no
	// open turn, no user message after HandledSeq and no pending
	// approval. Its held MCP session is released. A run already Idle is
	// returned as it is; ErrConflict when it is not quiet or not
	// InProgress, ErrNotFound when it does not exist or is deleted.
	ParkRun(ctx context.Context, runID string) (Run, error)
	// RunsToResume returns up to limit runs that can go on but are not
	// queued: runs in AwaitingApproval none of whose approvals is still
	// pending (decided, expired or revoked, with the requeue that should
	// have followed lost), and InProgress runs that no process holds or
	// has queued but that have work: an open turn, or a user message after
	// HandledSeq (their worker failed without yielding). It is the
	// scheduler's backstop: every unanswered message is found.
	RunsToResume(ctx context.Context, limit int) ([]Run, error)
	// ListMessages returns the run's message events (types starting with
	// "message.") with After < Seq < Before, in order: the first q.Limit
	// of them, or the last q.Limit when q.Last. It reads the line of the
	// run's active branch, or of q.Branch (see branches.go; a run that
	// never branched has one line, its whole log). ErrNotFound when the
	// run does not exist; ErrInvalid when the limit is not positive.
	ListMessages(ctx context.Context, runID string, q MessageQuery) ([]Event, error)
	// ForkRun makes a branch of the run that replaces a user message of
	// its active line, makes it active and appends the branch's message,
	// queueing the run, in one transaction (branches.go).
	ForkRun(ctx context.Context, runID string, f Fork) (Branch, Event, Run, error)
	// SwitchBranch makes a branch of the run its active branch and
	// records the switch in the log (branches.go).
	SwitchBranch(ctx context.Context, runID string, branch int64) (Run, error)
	// DeleteMessage makes a branch of the run without a message of its
	// active line, the line left kept, and makes it active.
	DeleteMessage(ctx context.Context, runID string, d Deletion) (Branch, Event, Run, error)
	// ListBranches returns the run's branches beyond the original, each
	// with its line (branches.go).
	ListBranches(ctx context.Context, runID string) ([]Branch, error)
	// Updates returns this process's feed of notifications: what every
	// process (on PostgreSQL, through LISTEN/NOTIFY) or this one (SQLite)
	// changed in runs, their event logs and approvals, and the deltas
	// published with Publish. Notifications are hints (see Notification).
	// The subscriber gets every notification sent after Updates returned,
	// in order. On PostgreSQL all of a store's subscribers share one
	// LISTEN connection, opened by the first and closed when the last
	// leaves; after it is lost and restored, every subscriber gets
	// NotifyResync. Each subscriber has UpdateBuffer notifications of
	// room, so that a slow one holds up no other: what does not fit is
	// dropped, and the subscriber gets NotifyResync as soon as it has room
	// again, after those it had. The channel is closed when ctx ends or
	// the store closes.
	Updates(ctx context.Context) (<-chan Notification, error)
	// Publish sends a NotifyDelta, NotifyMCPAnswer, NotifyHeldInput,
	// NotifyHeldOutcome or NotifyMCPSession to every process's Updates.
	Publish(ctx context.Context, n Notification) error
	// WakeUps returns a channel that receives a value (coalesced) whenever
	// a run may have been queued, by this process or, on PostgreSQL, any
	// other (LISTEN/NOTIFY), and after a lost notification connection is
	// restored. It is closed when ctx ends.
	WakeUps(ctx context.Context) (<-chan struct{}, error)

	// InsertSigningKey stores a new key; a zero CreatedAt means now. A
	// duplicate ID or (Purpose, Generation) fails with ErrConflict.
	InsertSigningKey(ctx context.Context, k SigningKey) error
	// SigningKeys returns the purpose's keys whose PublishedUntil is after
	// now, oldest generation first.
	SigningKeys(ctx context.Context, purpose string, now time.Time) ([]SigningKey, error)
	// ResealSigningKey replaces the sealed private half of the key id
	// with sealed, the same key sealed again (under a new key-encryption
	// key), if it is still old; it reports whether it did. Nothing else
	// of the key changes.
	ResealSigningKey(ctx context.Context, id string, old, sealed []byte) (bool, error)

	// GetApproval returns the approval or ErrNotFound.
	GetApproval(ctx context.Context, id string) (Approval, error)
	// ListApprovals returns the principal's approvals in the given states
	// (every state for none), oldest first.
	ListApprovals(ctx context.Context, principal string, status ...ApprovalStatus) ([]Approval, error)
	// ListApprovalsForApprovers returns the approvals of tenant in the
	// given states (every state for none) that name one of groups among
	// their approvers, oldest first.
	ListApprovalsForApprovers(ctx context.Context, tenant string, groups []string, status ...ApprovalStatus) ([]Approval, error)
	// ListDecidedApprovals returns the approvals that are no longer
	// pending (approved, denied, expired, consumed or revoked) which q
	// may see: those q.Principal requested, and those of q.Tenant that
	// name one of q.Groups among their approvers. Newest first by EndedAt
	// (then by ID, descending), at most q.Limit of them, after q.After
	// when it is set. ErrInvalid when q.Limit is not 1 to
	// MaxDecidedApprovals or q.Principal is empty.
	ListDecidedApprovals(ctx context.Context, q DecidedApprovals) ([]Approval, error)
	// ListTenantApprovals returns the approvals of q's tenant in any
	// state, with q's filters: newest first by CreatedAt (then by ID,
	// descending), at most q.Limit of them, after q.After when it is set.
	// ErrInvalid when q.Limit is not 1 to MaxTenantApprovals, q.Scope is
	// empty or q.Status is not a state.
	ListTenantApprovals(ctx context.Context, q TenantApprovals) ([]Approval, error)
	// FindApproved returns an approved approval for exactly the binding b
	// that has not expired at now (the oldest decided, if several), or
	// ErrNotFound.
	FindApproved(ctx context.Context, b ApprovalBinding, now time.Time) (Approval, error)
	// CreateApprovalAudited records a pending approval, or finds the
	// identical one, and, when it creates the approval, appends build's
	// record as AppendAudit does, in one transaction: a failure writes
	// neither. ID, every field of Binding but Server, RunID and ClientID,
	// and ExpiresAt are required; a zero CreatedAt means now; Status must
	// be empty or pending. When a pending approval with the same Binding
	// exists and has not expired, it is returned with created false and
	// nothing is written (its record was written when it was created), so
	// concurrent identical requests yield one record. One that has expired
	// is marked expired first. When the Binding names no run (the call of
	// an MCP client, which learns of a decision only by calling again) and
	// an identical approval was denied, has not expired and its denial has
	// not been reported, that one is returned instead, with created false,
	// and marked reported: the next identical call is told of the denial,
	// once, and the one after it asks anew. (A run's turn reads the
	// decision itself.) A duplicate ID fails with ErrConflict; a
	// RunID naming no run with ErrNotFound. build may be called more than
	// once; a nil build (a service without an audit log) appends nothing.
	CreateApprovalAudited(ctx context.Context, a Approval, build func(head AuditHead) (AuditRecord, error)) (_ Approval, created bool, _ error)
	// DecideApprovalAudited moves the pending approval p.ID, when it has
	// not expired at p.Now, to p.To (approved or denied), as a
	// compare-and-swap recording who decided, why, and when, and appends build's record as AppendAudit
	// does, in one transaction: a failure, or a decision refused, writes
	// neither. ErrNotFound when the approval does not exist, ErrConflict
	// when it is not pending or has expired, ErrInvalid when p.To is
	// neither. build may be called more than once; a nil build appends
	// nothing.
	DecideApprovalAudited(ctx context.Context, p DecideApprovalParams, build func(head AuditHead) (AuditRecord, error)) (Approval, error)
	// ConsumeApprovalAudited uses the approval p.ID once: in one atomic
	// update it moves it from approved to consumed, provided it has not
	// expired at p.Now and its binding equals p.Binding in every field. In
	// the same transaction it appends build's record as AppendAudit does
	// and, when p.Execution is not nil, starts that execution as
	// BeginExecutionAudited does: a failure, or a consumption refused, writes none of them.
	// ErrNotFound when the approval does not exist; ErrConflict when it
	// exists but is not approved, has expired, or is bound to another
	// call. Of concurrent consumers, one succeeds. When p.Execution's key
	// already names an execution, nothing is written either: the approval stays
	// approved, and that execution is returned with started false,
	// whichever call it is of. build may be called more than once; a nil
	// build appends nothing.
	ConsumeApprovalAudited(ctx context.Context, p ConsumeApprovalParams, build func(head AuditHead) (AuditRecord, error)) (_ Approval, _ Execution, started bool, _ error)
	// RevokeApprovalsAudited revokes the tool's pending and approved (not
	// yet consumed) approvals whose definition hash is not
	// keepDefinitionHash, and returns how many; when it revokes any, it
	// appends build(revoked)'s record as AppendAudit does, in the same
	// transaction: a failure writes neither. build may be called more
	// than once; a nil build appends nothing.
	RevokeApprovalsAudited(ctx context.Context, tool, keepDefinitionHash string, now time.Time, build func(revoked int) func(head AuditHead) (AuditRecord, error)) (int, error)
	// ExpireApprovals marks every pending or approved approval whose
	// ExpiresAt is not after now as expired, and returns how many.
	ExpireApprovals(ctx context.Context, now time.Time) (int, error)

	// GetExecution returns the execution or ErrNotFound.
	GetExecution(ctx context.Context, idempotencyKey string) (Execution, error)
	// AwaitInputAudited records that a round of a call ended asking its
	// caller for input, in one transaction with what AppendAudit does with
	// build: the started execution idempotencyKey (none when empty) now
	// awaits input (ErrNotFound when it does not exist, ErrConflict when
	// it is not started), and the approval approvalID (none when empty),
	// consumed by the round, is approved again (ErrNotFound, or
	// ErrConflict when it is not consumed), so that only the round that
	// completes the call uses it up. A failure writes nothing. build may
	// be called more than once.
	AwaitInputAudited(ctx context.Context, idempotencyKey, approvalID string, now time.Time, build func(head AuditHead) (AuditRecord, error)) (Execution, error)
	// MarkOutcomeUnknownAudited marks every execution still started
	// before olderThan as outcome_unknown, the trace of a process that
	// stopped mid-call, and returns them, oldest first, so they can be
	// reported; it appends build(e)'s record as AppendAudit does for each
	// execution e it marks, in the same transaction: a failure marks and
	// records none of them. An execution that ended meanwhile is neither
	// marked nor recorded. build may be called more than once; a nil
	// build appends nothing.
	MarkOutcomeUnknownAudited(ctx context.Context, olderThan time.Time, build func(e Execution) func(head AuditHead) (AuditRecord, error)) ([]Execution, error)
	// EndAwaitingInputAudited ends every execution still awaiting input
	// whose latest round started before olderThan — a call whose caller
	// never came back with the answers — failed, with result (a JSON
	// value, required) and finished at now, so that a retry under its key
	// is answered with result; it does what AppendAudit does with build(e)
	// for each execution e it ends (nothing when build is nil), in one
	// transaction: a failure ends and records none of them. An execution
	// started again meanwhile is neither ended nor recorded. It returns
	// them, oldest first. build may be called more than once.
	EndAwaitingInputAudited(ctx context.Context, olderThan, now time.Time, result json.RawMessage, build func(e Execution) func(head AuditHead) (AuditRecord, error)) ([]Execution, error)
	// BeginExecutionAudited starts the execution e of a tool call, or
	// finds the one its idempotency key already names, and appends
	// build's record as AppendAudit does, in one transaction: a failure
	// writes neither. IdempotencyKey, Principal, Tool and ArgumentsHash
	// are required; a zero StartedAt means now. It returns started true
	// only to the one caller that inserted the record, or that started
	// again the same call's execution awaiting input (its StartedAt and
	// ApprovalID then become e's); everyone else gets the record as
	// stored, whatever its status. A key already used by another
	// principal, tool or arguments hash fails with ErrConflict, its
	// execution untouched. The record is appended whatever the key
	// already names. It lets a caller record why a call runs and start it
	// with one durable write. build may be called more than once; a nil
	// build appends nothing.
	BeginExecutionAudited(ctx context.Context, e Execution, build func(head AuditHead) (AuditRecord, error)) (_ Execution, started bool, _ error)
	// FinishExecutionAudited records how the started execution
	// p.IdempotencyKey ended (p.Status: succeeded or failed) and its
	// p.Result, at p.Now, as a compare-and-swap from started, and appends build's record as AppendAudit does, in one
	// transaction: a failure writes neither. ErrNotFound when the
	// execution does not exist, ErrConflict when it is not started
	// (already finished, or marked outcome_unknown); the record is
	// appended all the same, since what it records happened. A process
	// that cannot record how its call ended finishes it outcome_unknown,
	// without a result. build may be called more than once; a nil build
	// appends nothing.
	FinishExecutionAudited(ctx context.Context, p FinishExecutionParams, build func(head AuditHead) (AuditRecord, error)) (Execution, error)

	// AppendSnapshot stores s as the next version of its run's context
	// snapshot (snapshots.go) and returns it as stored; the store sets
	// CreatedAt, and Branch to the run's active branch. It is
	// append-only: a snapshot is never changed or deleted, and no event
	// of the run, nor its row, is touched. Everything is checked against
	// the run's active line (for a run that never branched, its whole
	// log). s.Version must be the latest snapshot's version plus one (1
	// for the first), and s.ToSeq at least the latest snapshot's ToSeq
	// (the latest that LatestSnapshot returns), else ErrConflict and
	// nothing is written: of concurrent appends of one version exactly
	// one succeeds, and a summariser that read an older snapshot learns
	// that its summary is stale. Coverage: s.FromSeq must be the line's
	// first message event, and s.ToSeq (≥ FromSeq) a message event of
	// the line, so every snapshot covers a prefix of the conversation and
	// folds the ones before it; else ErrInvalid. Also ErrInvalid: a
	// version under 1, an empty summary or one over MaxSnapshotSummary
	// bytes, an unknown kind, tokens out of range, text that is not
	// storable. ErrNotFound when the run does not exist or is deleted.
	AppendSnapshot(ctx context.Context, s ContextSnapshot) (ContextSnapshot, error)
	// LatestSnapshot returns the snapshot of the highest version that
	// applies to the run's active line: one written on a branch of the
	// line, covering only what the line shares with that branch. A run
	// that never branched: its snapshot of the highest version.
	// ErrNotFound when it has none (or does not exist).
	LatestSnapshot(ctx context.Context, runID string) (ContextSnapshot, error)
	// ListSnapshots returns every snapshot of the run, of every branch,
	// oldest version first (none is fine); ErrNotFound when the run does
	// not exist.
	ListSnapshots(ctx context.Context, runID string) ([]ContextSnapshot, error)

	// ListNotes returns the owner's notes by name.
	ListNotes(ctx context.Context, owner string) ([]Note, error)
	// GetNote returns the owner's note or ErrNotFound.
	GetNote(ctx context.Context, owner, name string) (Note, error)
	// PutNote creates the note or replaces its body, and returns it as
	// stored; the store sets the times.
	PutNote(ctx context.Context, n Note) (Note, error)
	// DeleteNote deletes the owner's note, or fails with ErrNotFound.
	DeleteNote(ctx context.Context, owner, name string) error

	// GetSettings returns the principal's settings: DefaultSettings when
	// they never saved any.
	GetSettings(ctx context.Context, principal string) (Settings, error)
	// PutSettings replaces the principal's settings and returns them as
	// stored; the store sets UpdatedAt. ErrInvalid for an unknown theme
	// or send key, or text that is not valid UTF-8 or holds NUL.
	PutSettings(ctx context.Context, s Settings) (Settings, error)
	// PinRun pins the run to the top of its owner principal's list (again:
	// the first pin's time stays); ErrNotFound when the run is not theirs,
	// is deleted or does not exist.
	PinRun(ctx context.Context, principal, runID string) (Pin, error)
	// UnpinRun removes the principal's pin of the run, if any.
	UnpinRun(ctx context.Context, principal, runID string) error
	// ListPins returns the principal's pins of runs not deleted, the
	// latest pinned first.
	ListPins(ctx context.Context, principal string) ([]Pin, error)

	// CreateBrowserSession records a signed-in browser. IDHash, Principal
	// and ExpiresAt (after CreatedAt) are required; a zero CreatedAt means
	// now. A duplicate IDHash fails with ErrConflict.
	CreateBrowserSession(ctx context.Context, s BrowserSession) (BrowserSession, error)
	// GetBrowserSession returns the session whose id hashes to idHash,
	// revoked or expired as it may be, or ErrNotFound.
	GetBrowserSession(ctx context.Context, idHash string) (BrowserSession, error)
	// RevokeBrowserSession signs the session out at now. Revoking a revoked
	// session keeps its first RevokedAt; ErrNotFound when there is none.
	RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error
	// RevokeBrowserSessions signs out every session of the principal that
	// is neither revoked nor expired at now, and returns how many.
	RevokeBrowserSessions(ctx context.Context, principal string, now time.Time) (int, error)
	// DeleteBrowserSessions deletes every session that has expired, or was
	// revoked, at or before before, and returns how many.
	DeleteBrowserSessions(ctx context.Context, before time.Time) (int, error)

	// CreateMCPSession records a stateful MCP session. ID, Principal, State
	// (at most MaxMCPSessionState bytes) and ExpiresAt (after CreatedAt) are
	// required; a zero CreatedAt means now. The sessions that have ended by
	// CreatedAt are deleted in the same transaction. A duplicate ID fails
	// with ErrConflict.
	CreateMCPSession(ctx context.Context, s MCPSession) (MCPSession, error)
	// GetMCPSession returns the session id, ended as it may be, or
	// ErrNotFound.
	GetMCPSession(ctx context.Context, id string) (MCPSession, error)
	// UpdateMCPSessionState replaces the session's state if it is old (a
	// compare-and-swap); otherwise, or when there is no such session, it
	// fails with ErrConflict.
	UpdateMCPSessionState(ctx context.Context, id string, old, state []byte) error
	// DeleteMCPSession deletes the session, or fails with ErrNotFound.
	DeleteMCPSession(ctx context.Context, id string) error
	// PutUpstreamSession records the shared upstream session s under
	// s.Key if the record there now holds the session old (a
	// compare-and-swap): old "" when there is none, or when the record of
	// old is gone. A record that has ended is still there: it is replaced
	// only by naming its session, whose holder is to end it upstream.
	// Otherwise it fails with ErrConflict and writes nothing. Key,
	// Session, ProtocolVersion, InitializeResult and ExpiresAt (after
	// CreatedAt) are required, within their bounds (MaxUpstreamSessionKey,
	// …); a zero CreatedAt means now, and UsedAt is set to CreatedAt.
	PutUpstreamSession(ctx context.Context, s UpstreamSession, old string) (UpstreamSession, error)
	// GetUpstreamSession returns the record of key, ended as it may be,
	// or ErrNotFound.
	GetUpstreamSession(ctx context.Context, key string) (UpstreamSession, error)
	// TouchUpstreamSession moves the UsedAt of key's record forward to at
	// if the record holds session (never back), and reports whether it
	// does; it is no error when it does not, or when there is no record.
	TouchUpstreamSession(ctx context.Context, key, session string, at time.Time) (bool, error)
	// ResealUpstreamSession puts session, the same upstream session sealed
	// anew, in place of old in key's record if the record holds old, moves
	// its UsedAt forward to at as TouchUpstreamSession does, and reports
	// whether it did. CreatedAt and ExpiresAt stay as they are.
	ResealUpstreamSession(ctx context.Context, key, old, session string, at time.Time) (bool, error)
	// ClaimIdleUpstreamSessions deletes up to limit records last used at
	// or before usedBefore, ended or not, the idlest first, and returns
	// them: their sessions are the caller's to end upstream. Of callers
	// claiming at once, each record goes to one.
	ClaimIdleUpstreamSessions(ctx context.Context, usedBefore time.Time, limit int) ([]UpstreamSession, error)
	// AppendMCPEvents appends events, in order and in one transaction,
	// each to its stream with the stream's next index (from 0), and
	// returns them with their indexes; a zero CreatedAt means now. Each
	// must have a Session, and Data of at most MaxMCPEventData bytes; an
	// invalid one appends none. The events older than MCPEventRetention
	// are deleted as a stream's first event is written, and a session's
	// beyond MCPEventsPerSession as it grows.
	AppendMCPEvents(ctx context.Context, events ...MCPEvent) ([]MCPEvent, error)
	// MCPEventsFrom returns the events of the stream from index on, in
	// order. Those deleted are missing: the caller checks the indexes.
	MCPEventsFrom(ctx context.Context, session, stream string, index int) ([]MCPEvent, error)

	// AppendAudit appends one record to the audit log. It calls build with
	// the current head inside a transaction that excludes every other
	// appender, in this process or another, and inserts what build returns,
	// which must have Seq = head.Seq + 1 and PrevHash = head.Hash (else
	// ErrInvalid). The store computes no hash: build does. An error from
	// build is returned as is and nothing is written. build may be called
	// more than once, with different heads: it must have no other effect.
	// Concurrent appends produce a gapless chain. A record whose EventID
	// is already in the log is not written: AppendAudit returns the record
	// there when it records the same event (the retry of an append that
	// committed, its acknowledgement lost), ErrConflict when it records
	// another. A write that appends a record along with other statements
	// fails with ErrConflict on such a record, and writes nothing.
	AppendAudit(ctx context.Context, build func(head AuditHead) (AuditRecord, error)) (AuditRecord, error)
	// AuditRecords returns up to limit records with Seq > afterSeq, in
	// order; ErrInvalid when limit is not positive.
	AuditRecords(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error)
	// AuditQuerier reads the audit log by what its records hold.
	AuditQuerier
	// AuditSinks is the delivery of the audit log to sinks.
	AuditSinks
	// AuditCheckpoints: the audit log's head and its signed checkpoints.
	AuditCheckpoints
	// ModelUsages: what each person's model requests used, by day.
	ModelUsages
	// Replicas: the replicas' heartbeats, the run queue and the pending
	// approvals, for operators.
	Replicas
	// Holds records the MCP sessions replicas hold for runs between turns.
	Holds
	// Attachments are the files people attach to their messages.
	Attachments

	// The authorization server's clients, codes, refresh tokens and
	// consents (oauth.go). Codes and tokens are addressed by their SHA-256
	// (hex); the store never sees them. Every time a method takes is
	// stored at microseconds; a zero CreatedAt (UpdatedAt for a consent)
	// means the store's now.

	// CreateOAuthClient stores a new client and returns it as stored. ID,
	// Kind and AuthMethod are required; SecretHash is required for
	// client_secret_basic and refused for the other methods and for a
	// metadata document's client; LastUsedAt and RevokedAt must be zero. A
	// zero UpdatedAt is CreatedAt. A duplicate ID fails with ErrConflict,
	// a bad kind or field with ErrInvalid.
	CreateOAuthClient(ctx context.Context, c OAuthClient) (OAuthClient, error)
	// PutMetadataClient creates or updates the client of a metadata
	// document (Kind metadata_document, or empty for it; RegisteredBy
	// empty), and returns it as stored. An update replaces Name,
	// RedirectURIs, GrantTypes, AuthMethod, Metadata and UpdatedAt, and
	// keeps CreatedAt, LastUsedAt and RevokedAt: a revoked client stays
	// revoked. ErrConflict when the id is a client of another kind;
	// ErrInvalid as CreateOAuthClient.
	PutMetadataClient(ctx context.Context, c OAuthClient) (OAuthClient, error)
	// GetOAuthClient returns the client, revoked or not, or ErrNotFound.
	GetOAuthClient(ctx context.Context, id string) (OAuthClient, error)
	// ListOAuthClients returns every client, revoked ones included, by
	// CreatedAt.
	ListOAuthClients(ctx context.Context) ([]OAuthClient, error)
	// CountOAuthRegistrations returns how many clients registeredBy (not
	// empty) registered at or after since, across replicas: the rate limit
	// of dynamic registration.
	CountOAuthRegistrations(ctx context.Context, registeredBy string, since time.Time) (int, error)
	// RevokeOAuthClient revokes the client at now (a revoked client keeps
	// its first RevokedAt) and, in the same transaction, its refresh
	// tokens and consents still standing, and records every grant of it
	// revoked (GrantRevoked), so that the access tokens already issued to
	// it are refused too; ErrNotFound when there is no such client. A
	// refresh token issued or rotated concurrently is either refused or
	// revoked with the others. Its codes are not touched: the token
	// endpoint refuses a revoked client, and IssueRefreshToken refuses its
	// tokens.
	RevokeOAuthClient(ctx context.Context, id string, now time.Time) error

	// CreateAuthorizationCode stores an issued code. CodeHash, ClientID,
	// Principal, RedirectURI, CodeChallenge, Resource and ExpiresAt (after
	// CreatedAt) are required; UsedAt, FamilyID and ReplayedAt must be
	// unset. A duplicate hash fails with ErrConflict, an unknown client
	// with ErrNotFound.
	CreateAuthorizationCode(ctx context.Context, c AuthorizationCode) error
	// RedeemAuthorizationCode uses the code once and, with g, answers its
	// grant, in one transaction. When the code exists, is unused and not
	// expired at now, it sets UsedAt=now and FamilyID=family and returns
	// the code. With g (nil: it only redeems), the same transaction writes
	// the grant (TokenGrant: the family's first refresh token, completed
	// from the code; the consent's use; the audit record) after checking
	// that the client and, when g.Consent, the principal's consent to it
	// still stand: when one is revoked (ErrConflict) or there is no
	// consent (ErrNotFound), the code is used up all the same, nothing
	// else is written, and that error is returned with the code. A code
	// already used is a replay: it sets ReplayedAt (the first replay's
	// kept), revokes the refresh tokens of the family the code issued
	// (RFC 6749 §4.1.2) and returns the code with ErrReused (an
	// ErrConflict), so that the caller can audit it. An expired code: the
	// code and ErrConflict, nothing written. Unknown: ErrNotFound. Of
	// concurrent redemptions of one code, exactly one succeeds. A caller
	// that refuses the request after reading the code (GetAuthorizationCode)
	// redeems it with no grant, so that it cannot be tried again.
	RedeemAuthorizationCode(ctx context.Context, codeHash, family string, now time.Time, g *TokenGrant) (AuthorizationCode, error)
	// GetAuthorizationCode returns the code whose hash is codeHash, used,
	// replayed or expired as it may be, or ErrNotFound.
	GetAuthorizationCode(ctx context.Context, codeHash string) (AuthorizationCode, error)

	// IssueRefreshToken stores the first token of a family (or any token
	// the caller issues outside a rotation). TokenHash, FamilyID,
	// ClientID, Principal, Resource, ExpiresAt and FamilyExpiresAt (both
	// after CreatedAt) are required; UsedAt and RevokedAt must be zero. A
	// duplicate hash fails with ErrConflict; so does a revoked client, a
	// revoked consent of the principal to the client, and a family whose
	// authorization code was replayed. An unknown client: ErrNotFound.
	IssueRefreshToken(ctx context.Context, t RefreshToken) error
	// RotateRefreshToken rotates the token oldHash and answers its grant
	// g, in one transaction: unknown, ErrNotFound; already used (reuse!),
	// it revokes the whole family and returns ErrReused (errors.Is(err,
	// ErrConflict) holds too); revoked, expired at now (its own ExpiresAt
	// or its FamilyExpiresAt), its client or the principal's consent to
	// it revoked, ErrConflict, or, when g.Consent, no consent,
	// ErrNotFound, and nothing written. Else it marks the old token used
	// at now and writes the grant (TokenGrant: the next token g.Refresh,
	// required; the consent's use; the audit record), and returns the old
	// token as updated. The next token takes the old one's FamilyID,
	// ClientID, Principal, Resource, Scope and Subject (set ones must be
	// equal, else ErrInvalid) and, when zero, its FamilyExpiresAt (a later
	// one is ErrInvalid: a rotation never extends the family); a zero
	// CreatedAt is now; the caller sets TokenHash and ExpiresAt. With an
	// error the old token is returned too, when it was read, for the
	// audit. A rotation keeps g.RepeatSalt on the old token until
	// g.RepeatUntil, with the successor's hash. Before then, the old
	// token presented again while its successor is neither used nor
	// revoked nor expired, and neither revoked itself, is a repeat, not a
	// reuse: refused as a rotation would be when its client or consent is
	// gone, else the grant's consent use and g.RepeatAudit are written,
	// not g.Refresh, and the old token is returned as it was rotated
	// (its SuccessorHash the earlier successor's, which the caller
	// answers again, derived from SuccessorSalt). The successor's use or
	// revocation ends the repeat. Of concurrent rotations of one token,
	// exactly one rotates it, and the others are repeats when the
	// rotation allowed them, else get ErrReused, the family revoked, the
	// successor included.
	RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, g TokenGrant) (RefreshToken, error)
	// EndRefreshRepeats clears the salts (RefreshToken.SuccessorSalt) of
	// the repeats ended at or before now, and returns how many.
	EndRefreshRepeats(ctx context.Context, now time.Time) (int, error)
	// GetRefreshToken returns the token whose hash is tokenHash, used,
	// revoked or expired as it may be, or ErrNotFound.
	GetRefreshToken(ctx context.Context, tokenHash string) (RefreshToken, error)
	// RevokeRefreshFamily revokes, at now, every token of the family of
	// the token tokenHash still standing (RFC 7009), a token rotated
	// concurrently included, and the family's grant (GrantRevoked);
	// ErrNotFound when there is no such token. A replayed code
	// (RedeemAuthorizationCode) and a reused refresh token
	// (RotateRefreshToken) revoke their family so too.
	RevokeRefreshFamily(ctx context.Context, tokenHash string, now time.Time) error
	// GrantRevoked reports whether the refresh-token family family —
	// an authorization code's grant, which its access tokens name — was
	// revoked (a replayed code, a reused refresh token, a revocation, its
	// client or consent revoked) no earlier than DeleteExpiredOAuth's
	// before: one read of a primary key.
	GrantRevoked(ctx context.Context, family string) (bool, error)

	// PutConsent records the principal's consent to the client (both
	// required), creating it or replacing its Scope and Resource, and
	// clears a revocation; it returns it as stored. CreatedAt is the first
	// put's; UpdatedAt and LastUsedAt are c.UpdatedAt (zero: now). An
	// unknown client fails with ErrNotFound.
	PutConsent(ctx context.Context, c Consent) (Consent, error)
	// GetConsent returns the principal's consent to the client, revoked
	// ones too (RevokedAt set), or ErrNotFound.
	GetConsent(ctx context.Context, principal, clientID string) (Consent, error)
	// ListConsents returns the principal's consents that are not revoked,
	// by LastUsedAt, newest first.
	ListConsents(ctx context.Context, principal string) ([]Consent, error)
	// TouchConsent records that the consent let a token be issued at now:
	// it moves the consent's LastUsedAt, and the client's, forward to now
	// (never back), in one transaction. ErrNotFound when there is no such
	// consent, ErrConflict when it is revoked; neither is touched then.
	TouchConsent(ctx context.Context, principal, clientID string, now time.Time) error
	// RevokeConsent revokes the consent at now and, in the same
	// transaction, that principal's refresh tokens of that client still
	// standing, one rotated concurrently included, and records those
	// grants revoked (GrantRevoked); ErrNotFound when there
	// is no such consent, ErrConflict when it is revoked already (by a
	// concurrent call too: exactly one call revokes a standing consent),
	// and then nothing changes (the first RevokedAt is kept).
	RevokeConsent(ctx context.Context, principal, clientID string, now time.Time) error
	// AnswerConsentForm records the answer a to a consent form (a.
	// RequestHash, Decision and ExpiresAt required; AnsweredAt zero is
	// now) and returns it as stored, unless the form was answered before:
	// then it returns the recorded answer and ErrConflict, and nothing
	// changes. Of concurrent answers to one form, across replicas,
	// exactly one is recorded.
	AnswerConsentForm(ctx context.Context, a ConsentAnswer) (ConsentAnswer, error)
	// DeleteExpiredOAuth deletes the codes that expired at or before
	// before, the consent forms' answers that expired then, the grants
	// revoked then, and the
	// refresh tokens that ended then: expired (their own
	// end or their family's), revoked or used. It returns how many rows
	// it deleted (the client assertions have their own:
	// DeleteExpiredClientAssertions). A used token deleted is no longer recognised as reused,
	// so before should leave the reuse detection a margin.
	DeleteExpiredOAuth(ctx context.Context, before time.Time) (int, error)

	// Configured clients and client assertions (oauth_configured.go).

	// PutConfiguredClient creates or updates a client of Usher's
	// configuration (Kind configured, or empty for it; RegisteredBy empty)
	// and returns it as stored, and what it changed. An update replaces
	// Name, RedirectURIs, GrantTypes, AuthMethod, SecretHash, Metadata and
	// UpdatedAt, and keeps CreatedAt, LastUsedAt and RevokedAt: a revoked
	// client stays revoked. A client stored with c's registration (those
	// six fields) is left as it is: ClientUnchanged, nothing written. With
	// audit (nil, or a nil build, for no record), a creation (prev nil) or
	// an update (prev the client before it) appends audit(prev)'s record in
	// the same transaction, so that each change is recorded once, with it.
	// Replicas starting together may put the same client. ErrConflict when
	// the id is a client of another kind; ErrInvalid as CreateOAuthClient.
	PutConfiguredClient(ctx context.Context, c OAuthClient, audit func(prev *OAuthClient) func(AuditHead) (AuditRecord, error)) (OAuthClient, ClientChange, error)
	// UseClientAssertion records that the client's assertion jti (RFC
	// 7523 §3, a JWT ID) was used at now and can be replayed until
	// expiresAt (after now); ErrConflict when the client's jti is recorded
	// and not expired at now — across replicas, of concurrent uses of one
	// jti exactly one succeeds. The client's recorded assertions expired at
	// now are deleted. An unknown client: ErrNotFound.
	UseClientAssertion(ctx context.Context, clientID, jti string, expiresAt, now time.Time) error
	// DeleteExpiredClientAssertions deletes every client's recorded
	// assertions expired at or before before, and returns how many: an
	// expired assertion is refused by its exp, so its jti need not be kept
	// (the sweep of broker/oauth; UseClientAssertion deletes only its own
	// client's).
	DeleteExpiredClientAssertions(ctx context.Context, before time.Time) (int, error)
}

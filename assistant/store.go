package assistant

import (
	"context"
	"time"

	"github.com/usherhq/usher/store"
)

// Store is the part of store.Store the runtime uses: its runs and their
// event logs, the scheduling of their turns, their context snapshots, the
// live updates, and the approvals its turns wait for.
type Store interface {
	runLog

	// Runs: the API's operations on them.
	OpenRun(ctx context.Context, r store.Run, maxActive int, first *store.NewEvent) (_ store.Run, created bool, _ error)
	ListRuns(ctx context.Context, owner string) ([]store.Run, error)
	RenameRun(ctx context.Context, runID, title string) (store.Run, error)
	SetRunMetadata(ctx context.Context, runID, metadata string) (store.Run, error)
	PostMessageOnce(ctx context.Context, runID string, e store.NewEvent, key string) (_ store.Event, _ store.Run, created bool, _ error)
	StopTurn(ctx context.Context, runID string, end store.TurnEndFunc, w store.Withdrawal) (store.Run, error)
	KeepStoppedReply(ctx context.Context, l store.Lease, e store.NewEvent) (store.Event, error)
	CloseRun(ctx context.Context, runID string, to store.RunStatus, turnEnd store.TurnEndFunc, w store.Withdrawal) (store.Run, error)
	DeleteRun(ctx context.Context, runID string, turnEnd store.TurnEndFunc, w store.Withdrawal) error
	RequeueRun(ctx context.Context, runID string) (store.Run, error)
	ContinueRun(ctx context.Context, p store.ContinueRunParams) (_ store.Run, created bool, _ error)
	ChildRuns(ctx context.Context, runID string) ([]string, error)
	SearchMessages(ctx context.Context, owner, query string, limit int) ([]store.MessageMatch, error)
	ListMessages(ctx context.Context, runID string, q store.MessageQuery) ([]store.Event, error)
	ForkRun(ctx context.Context, runID string, f store.Fork) (store.Branch, store.Event, store.Run, error)
	SwitchBranch(ctx context.Context, runID string, branch int64) (store.Run, error)
	DeleteMessage(ctx context.Context, runID string, d store.Deletion) (store.Branch, store.Event, store.Run, error)
	ListBranches(ctx context.Context, runID string) ([]store.Branch, error)

	// The scheduler and the turns it works.
	ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]store.Run, error)
	NextClaimAt(ctx context.Context) (time.Time, error)
	WakeRetries(ctx context.Context) (int, error)
	LeaseOwners(ctx context.Context) ([]string, error)
	RequeueLeases(ctx context.Context, owner string) ([]store.Run, error)
	WakeUps(ctx context.Context) (<-chan struct{}, error)
	RenewLease(ctx context.Context, l store.Lease, leaseFor time.Duration) (store.Lease, error)
	AppendLeased(ctx context.Context, l store.Lease, events ...store.NewEvent) ([]store.Event, error)
	EndLease(ctx context.Context, l store.Lease, r store.Release, events ...store.NewEvent) ([]store.Event, store.Run, error)
	RecordContext(ctx context.Context, l store.Lease, c store.RunContext, events ...store.NewEvent) ([]store.Event, error)
	// AddModelUsage adds what a person's model request used to its day.
	AddModelUsage(ctx context.Context, u store.ModelUsage) error
	// ModelTokensOn is a person's tokens of a day (TokenLimits).
	ModelTokensOn(ctx context.Context, principal, day string) (int64, error)
	// RunKeyUsed and MessageKeyUsed tell a retry at the token limit
	// from a new request.
	RunKeyUsed(ctx context.Context, owner, key string) (bool, error)
	MessageKeyUsed(ctx context.Context, runID, key string) (bool, error)
	StartStep(ctx context.Context, l store.Lease, s store.StepStart) (store.Step, error)
	ListSteps(ctx context.Context, runID string, after int64, limit int) ([]store.Step, error)
	ParkIdleRuns(ctx context.Context, quietSince time.Time) ([]store.Run, error)
	RunsToResume(ctx context.Context, limit int) ([]store.Run, error)
	ParkRun(ctx context.Context, runID string) (store.Run, error)

	// A person's settings and pins.
	GetSettings(ctx context.Context, principal string) (store.Settings, error)
	PutSettings(ctx context.Context, s store.Settings) (store.Settings, error)
	PinRun(ctx context.Context, principal, runID string) (store.Pin, error)
	UnpinRun(ctx context.Context, principal, runID string) error
	ListPins(ctx context.Context, principal string) ([]store.Pin, error)

	// Context snapshots (compaction).
	AppendSnapshot(ctx context.Context, s store.ContextSnapshot) (store.ContextSnapshot, error)
	LatestSnapshot(ctx context.Context, runID string) (store.ContextSnapshot, error)

	// Live updates, and the approvals turns wait for.
	Updates(ctx context.Context) (<-chan store.Notification, error)
	Publish(ctx context.Context, n store.Notification) error
	GetApproval(ctx context.Context, id string) (store.Approval, error)

	// The MCP sessions held between turns.
	holdStore
	// The files attached to messages.
	attachmentStore
	// Retention: inactive runs deleted, deleted runs erased.
	retentionStore
}

// runLog is what the live-update bus reads from the store: a run and its
// events.
type runLog interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListEvents(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error)
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Replica is one `usher serve` process as it last reported itself in a
// heartbeat. A replica is alive until ExpiresAt: each heartbeat moves it
// on, and a replica that dies ages out when it passes.
type Replica struct {
	ID        string // the replica's id, as it names itself in leases
	Version   string
	Addr      string // its listen address; may be empty
	StartedAt time.Time
	SeenAt    time.Time // the last heartbeat, by the store's clock
	ExpiresAt time.Time
	// Upstreams is the replica's view of the upstream MCP servers, a JSON
	// array the store keeps as it is given ("[]" for none).
	Upstreams json.RawMessage
}

// RunQueue is the assistant's run queue at a time: the runs a replica
// works now (their lease runs), and the runs waiting for one (queued for
// a turn, or whose lease expired).
type RunQueue struct {
	Running int64
	Queued  int64
	// OldestQueuedAt is when the longest-waiting run began to wait; zero
	// when none waits.
	OldestQueuedAt time.Time
}

// ApprovalBacklog is the pending approvals at a time: how many, and the
// oldest (zero when none is pending).
type ApprovalBacklog struct {
	Pending int64
	// OldestID, OldestTool, OldestServer and OldestAt name the oldest
	// pending approval and when it was requested; its arguments are not
	// read.
	OldestID     string
	OldestTool   string
	OldestServer string
	OldestAt     time.Time
}

// Replicas is the store's part in what operators see of an installation:
// the replicas' heartbeats, and the queue and the approvals waiting.
type Replicas interface {
	// BeatReplica records a heartbeat of r: it creates or replaces the
	// row of r.ID (required) with r's Version (required), Addr, StartedAt
	// (required) and Upstreams (a JSON array; nil is "[]"), seen now by
	// the store's clock and alive for aliveFor (positive) from then. It
	// returns the row as stored.
	BeatReplica(ctx context.Context, r Replica, aliveFor time.Duration) (Replica, error)
	// ListReplicas returns the replicas alive at when (ExpiresAt after
	// it), by ID.
	ListReplicas(ctx context.Context, when time.Time) ([]Replica, error)
	// DeleteReplica deletes the row of the replica id: a replica that
	// stops leaves. A missing row is not an error.
	DeleteReplica(ctx context.Context, id string) error
	// DeleteExpiredReplicas deletes the rows that expired before before,
	// and returns how many.
	DeleteExpiredReplicas(ctx context.Context, before time.Time) (int, error)
	// RunQueue returns the run queue at when.
	RunQueue(ctx context.Context, when time.Time) (RunQueue, error)
	// ApprovalBacklog returns the approvals pending (not expired) at when.
	ApprovalBacklog(ctx context.Context, when time.Time) (ApprovalBacklog, error)
}

const replicaColumns = `id, version, addr, started_at, seen_at, expires_at, upstreams`

// runWaits is the condition of a run waiting for a replica at $1: queued
// and not leased, or leased with its lease expired.
const runWaits = `status = 'InProgress' AND deleted_at IS NULL
	AND ((queued_at IS NOT NULL AND lease_owner IS NULL) OR lease_expires_at <= $1)`

var (
	beatReplica = sql1(`
INSERT INTO replicas (` + replicaColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, addr = excluded.addr,
	started_at = excluded.started_at, seen_at = excluded.seen_at, expires_at = excluded.expires_at,
	upstreams = excluded.upstreams
RETURNING ` + replicaColumns)

	listReplicas = sql1(`SELECT ` + replicaColumns + ` FROM replicas WHERE expires_at > $1 ORDER BY id`)

	deleteReplica = sql1(`DELETE FROM replicas WHERE id = $1`)

	deleteExpiredReplicas = sql1(`DELETE FROM replicas WHERE expires_at < $1`)

	runQueue = sql1(`
SELECT
	(SELECT count(*) FROM runs WHERE status = 'InProgress' AND deleted_at IS NULL
	   AND lease_owner IS NOT NULL AND lease_expires_at > $1),
	(SELECT count(*) FROM runs WHERE ` + runWaits + `),
	(SELECT min(coalesce(queued_at, lease_expires_at)) FROM runs WHERE ` + runWaits + `)`)

	pendingApprovals = sql1(`SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_at > $1`)

	oldestPendingApproval = sql1(`
SELECT id, tool, server, created_at FROM approvals WHERE status = 'pending' AND expires_at > $1
ORDER BY created_at, id LIMIT 1`)
)

// checkReplica validates a heartbeat before it is stored.
func checkReplica(r Replica, aliveFor time.Duration) error {
	var errs []error
	if r.ID == "" {
		errs = append(errs, errors.New("replica id is empty"))
	}
	if r.Version == "" {
		errs = append(errs, errors.New("replica version is empty"))
	}
	if r.StartedAt.IsZero() {
		errs = append(errs, errors.New("replica start time is zero"))
	}
	if aliveFor <= 0 {
		errs = append(errs, fmt.Errorf("replica alive for %v, want a positive duration", aliveFor))
	}
	if r.Upstreams != nil {
		var list []json.RawMessage
		if json.Unmarshal(r.Upstreams, &list) != nil {
			errs = append(errs, errors.New("replica upstreams are not a JSON array"))
		}
	}
	errs = append(errs,
		checkText("replica id", r.ID), checkText("replica version", r.Version), checkText("replica addr", r.Addr),
		checkTime("replica start time", r.StartedAt))
	return invalid(errs...)
}

func (c *core) BeatReplica(ctx context.Context, r Replica, aliveFor time.Duration) (Replica, error) {
	if err := checkReplica(r, aliveFor); err != nil {
		return Replica{}, err
	}
	upstreams := r.Upstreams
	if upstreams == nil {
		upstreams = json.RawMessage("[]")
	}
	var out Replica
	err := c.writeOne(ctx, func(x executor) error {
		now := storedTime(c.now())
		var err error
		out, err = scanReplica(x.row(ctx, beatReplica, r.ID, r.Version, r.Addr, storedTime(r.StartedAt), now,
			storedTime(now.Add(aliveFor)), string(upstreams)))
		return err
	})
	return out, c.fail(err)
}

func (c *core) ListReplicas(ctx context.Context, when time.Time) ([]Replica, error) {
	out, err := queryAll(ctx, c.reader(), listReplicas, scanReplica, storedTime(when))
	return out, c.fail(err)
}

func (c *core) DeleteReplica(ctx context.Context, id string) error {
	if err := invalid(checkText("replica id", id)); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, deleteReplica, id)
		return err
	}))
}

func (c *core) DeleteExpiredReplicas(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		n, err = x.exec(ctx, deleteExpiredReplicas, storedTime(before))
		return err
	})
	return int(n), c.fail(err)
}

func (c *core) RunQueue(ctx context.Context, when time.Time) (RunQueue, error) {
	var q RunQueue
	err := c.reader().row(ctx, runQueue, storedTime(when)).Scan(&q.Running, &q.Queued, at(&q.OldestQueuedAt))
	return q, c.fail(err)
}

func (c *core) ApprovalBacklog(ctx context.Context, when time.Time) (ApprovalBacklog, error) {
	var b ApprovalBacklog
	r := c.reader()
	if err := r.row(ctx, pendingApprovals, storedTime(when)).Scan(&b.Pending); err != nil {
		return ApprovalBacklog{}, c.fail(err)
	}
	err := r.row(ctx, oldestPendingApproval, storedTime(when)).Scan(&b.OldestID, &b.OldestTool, &b.OldestServer, at(&b.OldestAt))
	if errors.Is(err, sql.ErrNoRows) {
		return ApprovalBacklog{Pending: b.Pending}, nil
	}
	return b, c.fail(err)
}

// scanReplica reads one row of replicaColumns.
func scanReplica(row rowScanner) (Replica, error) {
	var r Replica
	var upstreams string
	err := row.Scan(&r.ID, &r.Version, &r.Addr, at(&r.StartedAt), at(&r.SeenAt), at(&r.ExpiresAt), &upstreams)
	r.Upstreams = json.RawMessage(upstreams)
	return r, err
}

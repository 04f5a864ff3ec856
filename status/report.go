package status

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/usherhq/usher/store"
)

// ReportStore is what Read reads.
type ReportStore interface {
	ListReplicas(ctx context.Context, when time.Time) ([]store.Replica, error)
	RunQueue(ctx context.Context, when time.Time) (store.RunQueue, error)
	ApprovalBacklog(ctx context.Context, when time.Time) (store.ApprovalBacklog, error)
	LatestAuditCheckpoint(ctx context.Context) (store.AuditCheckpoint, error)
}

// Report is the status of an installation at a time, as the database
// holds it. It is the body of GET /api/admin/status and what `usher
// status -json` prints.
type Report struct {
	At time.Time `json:"at"`
	// Problems name what needs an operator, first thing: no replica
	// alive, an upstream down. Empty when all is well.
	Problems  []string        `json:"problems"`
	Replicas  []ReplicaStatus `json:"replicas"`
	Upstreams []Upstream      `json:"upstreams"`
	Queue     Queue           `json:"queue"`
	Approvals Approvals       `json:"approvals"`
	// Checkpoint is the audit log's last signed checkpoint; null when
	// none has been signed.
	Checkpoint *Checkpoint `json:"checkpoint"`
}

// ReplicaStatus is one replica alive.
type ReplicaStatus struct {
	ID        string    `json:"id"`
	Version   string    `json:"version"`
	Addr      string    `json:"addr,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	LastSeen  time.Time `json:"lastSeen"`
}

// Upstream is one upstream MCP server: its state over the replicas that
// report it (down when one sees it down, up when one sees it up and none
// down, else unknown), and each replica's view.
type Upstream struct {
	Name     string              `json:"name"`
	State    string              `json:"state"`
	LastOK   time.Time           `json:"lastOk,omitzero"`
	Error    string              `json:"error,omitempty"`
	Replicas []UpstreamOnReplica `json:"replicas"`
}

// UpstreamOnReplica is one replica's view of an upstream.
type UpstreamOnReplica struct {
	Replica string    `json:"replica"`
	State   string    `json:"state"`
	LastOK  time.Time `json:"lastOk,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Queue is the assistant's run queue: runs worked now, runs waiting for a
// replica, and how long the oldest has waited.
type Queue struct {
	Queued  int64 `json:"queued"`
	Running int64 `json:"running"`
	// OldestQueuedAt and OldestAgeSeconds are absent when none waits.
	OldestQueuedAt   time.Time `json:"oldestQueuedAt,omitzero"`
	OldestAgeSeconds float64   `json:"oldestAgeSeconds,omitempty"`
}

// Approvals is the pending approvals: how many, and the oldest.
type Approvals struct {
	Pending int64 `json:"pending"`
	// Oldest is null when none is pending.
	Oldest *PendingApproval `json:"oldest"`
}

// PendingApproval names a pending approval by its tool, never its
// arguments.
type PendingApproval struct {
	ID          string    `json:"id"`
	Tool        string    `json:"tool"`
	Server      string    `json:"server,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
	AgeSeconds  float64   `json:"ageSeconds"`
}

// Checkpoint is the audit log's last signed checkpoint.
type Checkpoint struct {
	Seq        int64     `json:"seq"`
	At         time.Time `json:"at"`
	AgeSeconds float64   `json:"ageSeconds"`
}

// Read builds the report of the installation at now from st.
func Read(ctx context.Context, st ReportStore, now time.Time) (Report, error) {
	rep := Report{At: now.UTC(), Problems: []string{}, Replicas: []ReplicaStatus{}, Upstreams: []Upstream{}}
	replicas, err := st.ListReplicas(ctx, now)
	if err != nil {
		return Report{}, fmt.Errorf("status: replicas: %w", err)
	}
	for _, r := range replicas {
		rep.Replicas = append(rep.Replicas, ReplicaStatus{ID: r.ID, Version: r.Version, Addr: r.Addr, StartedAt: r.StartedAt, LastSeen: r.SeenAt})
	}
	rep.Upstreams = upstreams(replicas)
	q, err := st.RunQueue(ctx, now)
	if err != nil {
		return Report{}, fmt.Errorf("status: run queue: %w", err)
	}
	rep.Queue = Queue{Queued: q.Queued, Running: q.Running, OldestQueuedAt: q.OldestQueuedAt}
	if !q.OldestQueuedAt.IsZero() {
		rep.Queue.OldestAgeSeconds = age(now, q.OldestQueuedAt)
	}
	b, err := st.ApprovalBacklog(ctx, now)
	if err != nil {
		return Report{}, fmt.Errorf("status: approvals: %w", err)
	}
	rep.Approvals.Pending = b.Pending
	if b.OldestID != "" {
		rep.Approvals.Oldest = &PendingApproval{ID: b.OldestID, Tool: b.OldestTool, Server: b.OldestServer,
			RequestedAt: b.OldestAt, AgeSeconds: age(now, b.OldestAt)}
	}
	cp, err := st.LatestAuditCheckpoint(ctx)
	switch {
	case err == nil:
		rep.Checkpoint = &Checkpoint{Seq: cp.Seq, At: cp.At, AgeSeconds: age(now, cp.At)}
	case !errors.Is(err, store.ErrNotFound):
		return Report{}, fmt.Errorf("status: audit checkpoint: %w", err)
	}
	rep.Problems = problems(rep)
	return rep, nil
}

// upstreams gathers the replicas' views of each upstream, by name.
func upstreams(replicas []store.Replica) []Upstream {
	byName := map[string]*Upstream{}
	for _, r := range replicas {
		var states []UpstreamState
		if err := json.Unmarshal(r.Upstreams, &states); err != nil {
			continue // a row written by another version: its view is not read
		}
		for _, s := range states {
			u := byName[s.Name]
			if u == nil {
				u = &Upstream{Name: s.Name}
				byName[s.Name] = u
			}
			u.Replicas = append(u.Replicas, UpstreamOnReplica{Replica: r.ID, State: s.State, LastOK: s.LastOK, Error: s.Error})
		}
	}
	out := []Upstream{}
	for _, u := range byName {
		u.State = StateUnknown
		for _, v := range u.Replicas {
			switch {
			case v.State == StateDown:
				u.State = StateDown
				u.Error = cmp.Or(u.Error, v.Error)
			case v.State == StateUp && u.State != StateDown:
				u.State = StateUp
			}
			if v.LastOK.After(u.LastOK) {
				u.LastOK = v.LastOK
			}
		}
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Upstream) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// problems names what in rep needs an operator.
func problems(rep Report) []string {
	out := []string{}
	if len(rep.Replicas) == 0 {
		out = append(out, "no replica is alive")
	}
	for _, u := range rep.Upstreams {
		if u.State == StateDown {
			out = append(out, fmt.Sprintf("upstream %s is down", u.Name))
		}
	}
	return out
}

// age is how long before now t was, in whole milliseconds' seconds.
func age(now, t time.Time) float64 {
	return max(now.Sub(t), 0).Truncate(time.Millisecond).Seconds()
}

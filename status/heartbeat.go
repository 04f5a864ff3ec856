package status

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/buildinfo"
	"github.com/usherhq/usher/internal/periodic"
	"github.com/usherhq/usher/store"
)

// AliveIntervals is how many heartbeat intervals a replica stays alive
// after its last heartbeat: one late or failed heartbeat does not drop it.
const AliveIntervals = 3

// DefaultInterval is the heartbeat interval by default.
const DefaultInterval = 10 * time.Second

// forgetAfter is how long after it expired a dead replica's row is
// deleted.
const forgetAfter = time.Hour

// HeartbeatStore is what a heartbeat writes and reads.
type HeartbeatStore interface {
	BeatReplica(ctx context.Context, r store.Replica, aliveFor time.Duration) (store.Replica, error)
	ListReplicas(ctx context.Context, when time.Time) ([]store.Replica, error)
	DeleteReplica(ctx context.Context, id string) error
	DeleteExpiredReplicas(ctx context.Context, before time.Time) (int, error)
}

// HeartbeatOptions configures NewHeartbeat. A nil *HeartbeatOptions
// means every default.
type HeartbeatOptions struct {
	// ID names the replica; it should be the name it takes leases by.
	// Default NewReplicaID(): the host name and a suffix of this start.
	ID string
	// Alone reports that the replica has its database to itself (the
	// embedded default's SQLite file, which one process serves): every
	// other replica id found in it is an earlier incarnation of this one
	// (see EarlierIncarnation). Default false: replicas share it.
	Alone bool
	// Version is the replica's version. Default buildinfo.Read().Version.
	Version string
	// Addr is the replica's listen address. Default empty.
	Addr string
	// Interval is the time between two heartbeats. Default
	// DefaultInterval.
	Interval time.Duration
	// Upstreams reports the replica's view of its upstream MCP servers in
	// each heartbeat. Default none.
	Upstreams Upstreams
	// Registerer receives the gauge usher_replicas_alive. Default none.
	Registerer prometheus.Registerer
	// Logger records heartbeats that fail. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Heartbeat records one replica in the database every interval, from
// Start until Stop.
type Heartbeat struct {
	st      HeartbeatStore
	o       HeartbeatOptions
	started time.Time
	alive   prometheus.Gauge
	loop    *periodic.Loop
}

// NewHeartbeat returns the heartbeat of one replica into st.
func NewHeartbeat(st HeartbeatStore, opts *HeartbeatOptions) (*Heartbeat, error) {
	var o HeartbeatOptions
	if opts != nil {
		o = *opts
	}
	var errs []error
	if st == nil {
		errs = append(errs, errors.New("status: NewHeartbeat needs a store"))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("status: heartbeat interval %v is negative", o.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.ID == "" {
		o.ID = NewReplicaID()
	}
	if o.Version == "" {
		o.Version = buildinfo.Read().Version
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Upstreams == nil {
		o.Upstreams = UnknownUpstreams(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Heartbeat{st: st, o: o, alive: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "usher_replicas_alive",
		Help: "Replicas whose heartbeat is alive, as this replica last read the database.",
	})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(h.alive); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
	}
	return h, nil
}

// NewReplicaID returns a new name for this process: its host name, the
// replica's stable name, and a random suffix of this start, so that two
// processes of one host differ, and so do two starts of one process.
func NewReplicaID() string {
	host, _ := os.Hostname()
	var b [idSuffixBytes]byte
	rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// idSuffixBytes is the size of the random suffix of a replica id.
const idSuffixBytes = 6

// replicaName is the stable part of a replica id, without the suffix of
// its start; ok is false for an id NewReplicaID did not make.
func replicaName(id string) (name string, ok bool) {
	i := len(id) - 2*idSuffixBytes - 1
	if i < 0 || id[i] != '-' {
		return "", false
	}
	if _, err := hex.DecodeString(id[i+1:]); err != nil {
		return "", false
	}
	return id[:i], true
}

// EarlierIncarnation reports whether owner, a replica id found in a run's
// lease, names an earlier start of this very replica, which cannot renew
// that lease any more: the replica starting does not wait for it to
// expire. It is:
//   - with Alone, every id but this replica's;
//   - otherwise an id of this replica's name (its host name) with another
//     suffix, whose heartbeat is gone, or whose last heartbeat recorded
//     this replica's listen address (two processes of one host cannot
//     listen on one address at once, so that process is gone).
//
// Replicas of one host that listen on different addresses are not taken
// for each other while their heartbeats live.
func (h *Heartbeat) EarlierIncarnation(ctx context.Context, owner string) (bool, error) {
	if owner == h.o.ID {
		return false, nil
	}
	if h.o.Alone {
		return true, nil
	}
	mine, ok := replicaName(h.o.ID)
	theirs, ok2 := replicaName(owner)
	if !ok || !ok2 || mine != theirs {
		return false, nil
	}
	alive, err := h.st.ListReplicas(ctx, h.o.Now())
	if err != nil {
		return false, err
	}
	for _, r := range alive {
		if r.ID == owner {
			return h.o.Addr != "" && r.Addr == h.o.Addr, nil
		}
	}
	return true, nil
}

// ID is the replica's id.
func (h *Heartbeat) ID() string { return h.o.ID }

// Start records the replica at once, failing if it cannot, then every
// interval until Stop or until ctx ends.
func (h *Heartbeat) Start(ctx context.Context) error {
	h.started = h.o.Now()
	if err := h.beat(ctx); err != nil {
		return fmt.Errorf("status: heartbeat: %w", err)
	}
	first := true
	h.loop = periodic.New(h.o.Interval, func(ctx context.Context) {
		if first { // Start has just beaten
			first = false
			return
		}
		if err := h.beat(ctx); err != nil && ctx.Err() == nil {
			h.o.Logger.WarnContext(ctx, "status: heartbeat failed", "err", err)
		}
	})
	return h.loop.Start(ctx)
}

// Stop ends the heartbeats and removes the replica's row: a replica that
// stops leaves the list at once. It is idempotent.
func (h *Heartbeat) Stop() {
	if h.loop == nil {
		return
	}
	h.loop.Stop()
	h.loop = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.st.DeleteReplica(ctx, h.o.ID); err != nil {
		h.o.Logger.Warn("status: removing the replica's heartbeat failed; it ages out", "err", err)
	}
}

// beat records the replica, counts the replicas alive, and deletes the
// rows of replicas long dead.
func (h *Heartbeat) beat(ctx context.Context) error {
	upstreams, err := json.Marshal(nonNil(h.o.Upstreams.UpstreamStates()))
	if err != nil {
		return err
	}
	r := store.Replica{ID: h.o.ID, Version: h.o.Version, Addr: h.o.Addr, StartedAt: h.started, Upstreams: upstreams}
	if _, err := h.st.BeatReplica(ctx, r, AliveIntervals*h.o.Interval); err != nil {
		return err
	}
	now := h.o.Now()
	alive, err := h.st.ListReplicas(ctx, now)
	if err != nil {
		return err
	}
	h.alive.Set(float64(len(alive)))
	_, err = h.st.DeleteExpiredReplicas(ctx, now.Add(-forgetAfter))
	return err
}

// nonNil makes a nil list an empty one, which JSON writes as [].
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

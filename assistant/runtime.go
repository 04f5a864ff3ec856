package assistant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Defaults of Options.
const (
	DefaultMaxConcurrency       = 4
	DefaultMaxActiveRuns        = 5
	DefaultHistoryMessages      = 24
	DefaultMaxToolCallsPerSlice = 16
	DefaultMaxSteps             = 250
	DefaultMaxSlices            = 250
	DefaultLease                = 30 * time.Second
	DefaultSweepInterval        = 30 * time.Second
	DefaultHoldIdle             = 5 * time.Minute
	DefaultIdleAfter            = 30 * time.Minute
	DefaultMaxMessageBytes      = 64 << 10
	DefaultHeartbeat            = 15 * time.Second
	DefaultRetryBackoff         = time.Second
	DefaultMaxStreamsPerUser    = 16
	DefaultContextTokens        = 80_000
)

// DefaultSystemPrompt is the system prompt when Options.SystemPrompt is
// empty.
const DefaultSystemPrompt = `You are Usher, an assistant that helps people through the tools you are offered. ` +
	`Use only those tools. Some tool calls need a person's approval before they run: ` +
	`when a call waits for one, say so plainly and do not retry it yourself.`

// Options configure a Runtime. Store, Model, Tokens and MCPURL are
// required; every other field has the default its comment gives.
type Options struct {
	// Store is the database: runs, their event logs, approvals.
	Store Store
	// Model is the model provider.
	Model model.Provider
	// Tokens mints the broker tokens a turn calls the MCP server with.
	Tokens TokenSource
	// MCPURL is the URL of Usher's MCP endpoint, which the runner calls
	// like any MCP client.
	MCPURL string
	// HTTPClient carries the MCP calls. Default: a client with a 2-minute
	// timeout.
	HTTPClient *http.Client

	// ReplicaID names this process in leases. Default: host name and a
	// random suffix.
	ReplicaID string
	// EarlierIncarnation reports whether a lease owner found at Start is
	// an earlier start of this process (status.Heartbeat's), whose leases
	// no one renews: Start requeues those runs at once, so that a process
	// restarted after a crash resumes their turns without waiting for its
	// own leases to expire. Default: none is.
	EarlierIncarnation func(ctx context.Context, owner string) (bool, error)
	// MaxConcurrency is how many turns this process runs at once.
	// Default: 4.
	MaxConcurrency int
	// MaxActiveRuns is how many active runs a user may have. Default: 5.
	MaxActiveRuns int
	// HistoryMessages is how many messages of history a turn starts from.
	// Default: 24.
	HistoryMessages int
	// MaxToolCallsPerSlice is how many tool calls a turn makes before it
	// yields the run back to the queue for another slice. Default: 16.
	MaxToolCallsPerSlice int
	// MaxSteps is how many model steps one turn may take. Default: 250.
	MaxSteps int
	// MaxSlices is the run's budget: how many slices of work (steps,
	// store.Step) it may take over its life; the slice that would take
	// one more stops the run, failed, with an agent.run.budget event.
	// Default: 250.
	MaxSlices int
	// Lease is how long a claim on a run lasts unless renewed (it is
	// renewed every third of it). Default: 30 s.
	Lease time.Duration
	// SweepInterval is how often this process looks for runs with work
	// that nothing holds or has queued (decided approvals, unanswered
	// messages) and for quiet runs: a backstop, since leases are taken
	// over as they expire and every other piece of work wakes the
	// scheduler. Default: 30 s.
	SweepInterval time.Duration
	// RetryBackoff is how long a run whose slice of work failed (the
	// database, the MCP server, a panic) waits before it is tried again;
	// it doubles with each failure in a row, up to a minute. Default: 1 s.
	RetryBackoff time.Duration
	// HoldIdle is how long a run's MCP session is kept after its last
	// turn. Default: 5 min.
	HoldIdle time.Duration
	// IdleAfter is how long a run stays quiet before it is parked Idle.
	// Default: 30 min.
	IdleAfter time.Duration
	// MaxMessageBytes is the largest user message. Default: 64 KiB.
	MaxMessageBytes int
	// AttachmentMaxBytes is the largest file a person may attach.
	// Default: DefaultAttachmentMaxBytes (10 MiB).
	AttachmentMaxBytes int64
	// AttachmentQuotaBytes bounds the size of one person's attachments
	// together. Default: DefaultAttachmentQuotaBytes (1 GiB).
	AttachmentQuotaBytes int64
	// TokenLimits bound the model tokens one person may use in a day.
	// Default: none.
	TokenLimits TokenLimits
	// DeleteInactiveAfter is how long a conversation may go without
	// activity (Idle or closed) before the sweep deletes it, as its owner
	// could. Default 0: never.
	DeleteInactiveAfter time.Duration
	// PurgeDeletedAfter is how long a deleted conversation keeps its
	// content (its messages, tool calls and results, approvals) before the
	// sweep erases it; its audit records stay. Default 0: kept for good.
	PurgeDeletedAfter time.Duration
	// SystemPrompt opens every model session. Default:
	// DefaultSystemPrompt.
	SystemPrompt string
	// ContextTokens is the model's context limit, in tokens: the limit
	// each run's context accounting is recorded against (RunView.Context).
	// Default: 80,000.
	ContextTokens int
	// ModelName names the model, in the context snapshots it writes; it
	// is the default of Models. Default: none.
	ModelName string
	// Models are the models a run may choose, by name (RunMetadata.Model,
	// or PATCH /api/assistant/runs/{id} {"model"}); each request names
	// the run's choice. ModelName must be one of them. Default: none,
	// which offers ModelName alone and sends no name (the provider's
	// own).
	Models []string
	// Transport is TransportAuto (or TransportSSE): Server-Sent Events,
	// WebSocket and long-poll; or TransportLongPoll: the streaming routes
	// answer 503. Default: TransportAuto.
	Transport string
	// Heartbeat is how often a quiet stream sends a heartbeat. Default:
	// 15 s.
	Heartbeat time.Duration
	// MaxStreamsPerUser is how many live-update subscribers — event
	// streams (SSE or WebSocket), feeds and long-polls — one user may hold
	// open in this process at once; the next is answered 429
	// too_many_streams until one ends. Default: 16.
	MaxStreamsPerUser int

	// Audit records the approvals a stopped turn withdraws, in the stop's
	// transaction. Default: nil, no record.
	Audit *audit.Log

	// Logger receives what the runtime cannot tell users. Default:
	// discard.
	Logger *slog.Logger
	// Registerer receives the runtime's metrics (see Runtime.Collectors).
	// Default none: not exported.
	Registerer prometheus.Registerer
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Runtime runs the assistant: the API's operations on runs, and the
// scheduler that claims queued runs and works their turns.
type Runtime struct {
	o      Options
	st     Store
	log    *slog.Logger
	holder *holder
	// compactions count this process's compactions by outcome.
	compactions compactionCounters
	// retried counts the slices of work this process queued for a retry.
	retried atomic.Int64
	// tokenLimited counts the model requests refused by a daily token
	// limit, by where (limitedRequest, limitedTurn).
	tokenLimited [2]atomic.Int64
	// expired and purged count the inactive runs this process deleted and
	// the deleted runs it erased; lastRetain is when it last looked for
	// them (UnixNano; 0: never).
	expired, purged, lastRetain atomic.Int64
	// models counts the model requests; turnModel and compactModel are
	// Options.Model counted as a turn's and a compaction's.
	models                  *modelMetrics
	turnModel, compactModel model.Provider
	bus                     *bus

	// streams ends every live-update stream when closed (at shutdown).
	streams      context.Context
	closeStreams context.CancelFunc

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
	// watching is closed when the holder's watch has returned.
	watching chan struct{}
}

// holdChecks is how many hold checks may wait (holder.poke).
const holdChecks = 256

// New returns a Runtime, or one error naming every problem of opts.
func New(opts *Options) (*Runtime, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("option Store is required"))
	}
	if o.Model == nil {
		errs = append(errs, errors.New("option Model is required"))
	}
	if o.Tokens == nil {
		errs = append(errs, errors.New("option Tokens is required"))
	}
	if o.MCPURL == "" {
		errs = append(errs, errors.New("option MCPURL is required"))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"MaxConcurrency", o.MaxConcurrency}, {"MaxActiveRuns", o.MaxActiveRuns}, {"HistoryMessages", o.HistoryMessages},
		{"MaxToolCallsPerSlice", o.MaxToolCallsPerSlice}, {"MaxSteps", o.MaxSteps}, {"MaxSlices", o.MaxSlices}, {"MaxMessageBytes", o.MaxMessageBytes},
		{"ContextTokens", o.ContextTokens}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("option %s is %d, want 0 (the default) or more", n.name, n.v))
		}
	}
	for i, m := range o.Models {
		if m == "" || slices.Contains(o.Models[:i], m) {
			errs = append(errs, fmt.Errorf("option Models holds %q, want distinct names", m))
		}
	}
	if len(o.Models) > 0 && !slices.Contains(o.Models, o.ModelName) {
		errs = append(errs, fmt.Errorf("option ModelName is %q, want one of Models", o.ModelName))
	}
	switch o.Transport {
	case "", TransportAuto, TransportSSE, TransportLongPoll:
	default:
		errs = append(errs, fmt.Errorf("option Transport is %q, want %s, %s or %s", o.Transport, TransportAuto, TransportSSE, TransportLongPoll))
	}
	if o.AttachmentMaxBytes < 0 || o.AttachmentQuotaBytes < 0 {
		errs = append(errs, fmt.Errorf("options AttachmentMaxBytes and AttachmentQuotaBytes are %d and %d, want 0 (the default) or more", o.AttachmentMaxBytes, o.AttachmentQuotaBytes))
	}
	if o.TokenLimits.Daily < 0 {
		errs = append(errs, fmt.Errorf("option TokenLimits.Daily is %d, want 0 (none) or more", o.TokenLimits.Daily))
	}
	for g, n := range o.TokenLimits.Groups {
		if g == "" || n < 0 {
			errs = append(errs, fmt.Errorf("option TokenLimits.Groups has %q: %d, want a group and 0 (none) or more", g, n))
		}
	}
	if o.MaxStreamsPerUser < 0 {
		errs = append(errs, fmt.Errorf("option MaxStreamsPerUser is %d, want 0 (the default) or more", o.MaxStreamsPerUser))
	}
	if o.Heartbeat < 0 || (o.Heartbeat > 0 && o.Heartbeat < 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("option Heartbeat is %s, want 100ms or more", o.Heartbeat))
	}
	if o.Lease != 0 && o.Lease < 3*time.Second {
		errs = append(errs, fmt.Errorf("option Lease is %s, want 3s or more", o.Lease))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"SweepInterval", o.SweepInterval}, {"HoldIdle", o.HoldIdle}, {"IdleAfter", o.IdleAfter}, {"RetryBackoff", o.RetryBackoff}, {"DeleteInactiveAfter", o.DeleteInactiveAfter}, {"PurgeDeletedAfter", o.PurgeDeletedAfter}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("option %s is %s, want 0 (the default) or more", d.name, d.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("assistant: %w", err)
	}
	setDefault(&o.MaxConcurrency, DefaultMaxConcurrency)
	setDefault(&o.MaxActiveRuns, DefaultMaxActiveRuns)
	setDefault(&o.HistoryMessages, DefaultHistoryMessages)
	setDefault(&o.MaxToolCallsPerSlice, DefaultMaxToolCallsPerSlice)
	setDefault(&o.MaxSteps, DefaultMaxSteps)
	setDefault(&o.MaxSlices, DefaultMaxSlices)
	setDefault(&o.MaxMessageBytes, DefaultMaxMessageBytes)
	setDefault(&o.AttachmentMaxBytes, DefaultAttachmentMaxBytes)
	setDefault(&o.AttachmentQuotaBytes, DefaultAttachmentQuotaBytes)
	setDefault(&o.Lease, DefaultLease)
	setDefault(&o.SweepInterval, DefaultSweepInterval)
	setDefault(&o.HoldIdle, DefaultHoldIdle)
	setDefault(&o.IdleAfter, DefaultIdleAfter)
	setDefault(&o.Heartbeat, DefaultHeartbeat)
	setDefault(&o.RetryBackoff, DefaultRetryBackoff)
	setDefault(&o.MaxStreamsPerUser, DefaultMaxStreamsPerUser)
	setDefault(&o.ContextTokens, DefaultContextTokens)
	setDefault(&o.Transport, TransportAuto)
	if o.SystemPrompt == "" {
		o.SystemPrompt = DefaultSystemPrompt
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReplicaID == "" {
		host, _ := os.Hostname()
		var b [6]byte
		rand.Read(b[:])
		o.ReplicaID = host + "-" + hex.EncodeToString(b[:])
	}
	base := o.HTTPClient
	if base.Transport == nil {
		base = &http.Client{Transport: http.DefaultTransport, Timeout: base.Timeout}
	}
	streams, closeStreams := context.WithCancel(context.Background())
	rt := &Runtime{
		o:            o,
		st:           o.Store,
		log:          o.Logger,
		bus:          newBus(o.Store, o.Logger, o.MaxStreamsPerUser),
		streams:      streams,
		closeStreams: closeStreams,
		holder: &holder{endpoint: o.MCPURL, tokens: o.Tokens, base: base, idle: o.HoldIdle, now: o.Now,
			log: o.Logger, st: o.Store, replica: o.ReplicaID, sessions: map[string]*session{}, checks: make(chan string, holdChecks)},
	}
	rt.bus.runChanged = rt.holder.poke
	offered := o.Models
	if len(offered) == 0 {
		offered = []string{o.ModelName}
	}
	rt.models = newModelMetrics(offered)
	rt.turnModel = rt.models.provider(o.Model, purposeTurn, o.ModelName, o.Now, rt.addUsage)
	rt.compactModel = rt.models.provider(o.Model, purposeCompaction, o.ModelName, o.Now, rt.addUsage)
	if o.Registerer != nil {
		for _, c := range rt.Collectors() {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("assistant: metrics: %w", err)
			}
		}
	}
	return rt, nil
}

// addUsage records what a person's model request used (GET
// /api/admin/usage, usher usage). The request has been answered: a
// failure to record it is logged, and fails nothing.
func (rt *Runtime) addUsage(ctx context.Context, u store.ModelUsage) {
	if err := rt.st.AddModelUsage(context.WithoutCancel(ctx), u); err != nil {
		rt.log.WarnContext(ctx, "assistant: recording a model request's usage failed", "model", u.Model, "err", err)
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Start starts the scheduler: it claims queued runs when woken and on
// every sweep, and works up to MaxConcurrency turns at once. It returns
// once the scheduler listens for work.
func (rt *Runtime) Start(ctx context.Context) error {
	err := errors.New("assistant: the runtime was already started")
	rt.startOnce.Do(func() {
		ctx, rt.cancel = context.WithCancel(context.WithoutCancel(ctx))
		var wakes <-chan struct{}
		if wakes, err = rt.st.WakeUps(ctx); err != nil {
			rt.cancel()
			return
		}
		var updates <-chan store.Notification
		if updates, err = rt.st.Updates(ctx); err != nil {
			rt.cancel()
			return
		}
		rt.requeueEarlier(ctx)
		rt.done = make(chan struct{})
		rt.watching = make(chan struct{})
		go func() {
			defer close(rt.watching)
			rt.holder.watch(ctx)
		}()
		go rt.bus.run(updates)
		go rt.schedule(ctx, wakes)
	})
	return err
}

// requeueEarlier requeues the runs leased by an earlier incarnation of
// this process (Options.EarlierIncarnation). Should that fail, their
// leases expire and are taken over all the same.
func (rt *Runtime) requeueEarlier(ctx context.Context) {
	if rt.o.EarlierIncarnation == nil {
		return
	}
	owners, err := rt.st.LeaseOwners(ctx)
	if err != nil {
		rt.log.Warn("assistant: reading the runs' lease owners at start failed", "err", err)
		return
	}
	for _, owner := range owners {
		earlier, err := rt.o.EarlierIncarnation(ctx, owner)
		if err != nil {
			rt.log.Warn("assistant: telling an earlier start of this process failed", "owner", owner, "err", err)
			continue
		}
		if !earlier {
			continue
		}
		runs, err := rt.st.RequeueLeases(ctx, owner)
		if err != nil {
			rt.log.Warn("assistant: requeueing the runs of an earlier start failed", "owner", owner, "err", err)
			continue
		}
		rt.log.Info("assistant: requeued the runs an earlier start of this process leased", "owner", owner, "runs", len(runs))
	}
}

// Stop stops claiming, waits for the running turns to stop (they are
// cancelled; their runs are taken over when their leases expire, or at
// once by the next claim when they released them), and releases the held
// MCP sessions. It is idempotent.
func (rt *Runtime) Stop() {
	rt.stopOnce.Do(func() {
		if rt.cancel == nil {
			return
		}
		rt.closeStreams()
		rt.cancel()
		<-rt.done
		<-rt.watching
		rt.holder.closeAll()
	})
}

// The scheduler's timer: it fires claimSlack after the store's next claim
// time (a lease expires, a retry's backoff ends), and never sooner than
// minClaimGap after a claim, so that a run another replica is claiming at
// that moment is not polled for in a loop.
const (
	claimSlack  = 20 * time.Millisecond
	minClaimGap = 100 * time.Millisecond
	// claimRetry is how soon a claim that failed is tried again.
	claimRetry = time.Second
)

// schedule is the scheduler's loop. It claims when woken (a run was
// queued, here or on another replica), when the store's next claim time
// comes (the earliest lease expiry, so that a dead replica's run is taken
// over as its lease expires, or the end of a retry's backoff), on every
// sweep (missed wake-ups, runs with work left) and, when the last claim
// may have left work behind (every slot was taken), when a turn ends and
// frees a slot. Every run queued after a claim that left nothing behind
// wakes the scheduler, and so does a release that leaves its run queued.
func (rt *Runtime) schedule(ctx context.Context, wakes <-chan struct{}) {
	defer close(rt.done)
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, rt.o.MaxConcurrency)
	freed := make(chan struct{}, 1)
	sweep := time.NewTicker(rt.o.SweepInterval)
	defer sweep.Stop()
	next := time.NewTimer(time.Hour)
	next.Stop()
	defer next.Stop()
	// plan arms the timer for the store's next claim time.
	plan := func() {
		at, err := rt.st.NextClaimAt(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				rt.log.Error("assistant: reading the next claim time failed", "err", err)
			}
			next.Reset(claimRetry)
		case at.IsZero():
			next.Stop()
		default:
			next.Reset(max(at.Sub(rt.o.Now())+claimSlack, minClaimGap))
		}
	}

	// more: the last claim may have left claimable runs behind; outage:
	// the last claim failed.
	more, outage := false, false
	claim := func() {
		more = false
		for {
			free := rt.o.MaxConcurrency - len(slots)
			if free == 0 {
				more = true
				return
			}
			runs, err := rt.st.ClaimRuns(ctx, rt.o.ReplicaID, free, rt.o.Lease)
			if err != nil {
				if ctx.Err() == nil {
					rt.log.Error("assistant: claiming runs failed", "err", err)
				}
				more, outage = true, true
				next.Reset(claimRetry)
				return
			}
			for _, r := range runs {
				slots <- struct{}{}
				running.Go(func() {
					defer func() {
						<-slots
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					rt.work(ctx, r)
				})
			}
			if outage {
				// The store answers again: the runs waiting out a retry's
				// backoff go now, and are claimed with the others.
				outage = false
				if rt.wakeRetries(ctx) > 0 {
					continue
				}
			}
			if len(runs) < free {
				plan()
				return
			}
		}
	}
	claim()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wakes:
			if !ok {
				return
			}
		case <-freed:
			if !more {
				continue
			}
		case <-next.C:
		case <-sweep.C:
			rt.sweep(ctx)
		}
		claim()
	}
}

// sweep parks quiet runs, requeues the runs that have work but are neither
// queued nor leased (approvals decided, should the requeue on the decision
// itself have been lost; a turn open or a user message unanswered, should
// a worker have failed without queueing its run: the backstop of the
// package's invariant) and releases MCP sessions held too long.
func (rt *Runtime) sweep(ctx context.Context) {
	if parked, err := rt.st.ParkIdleRuns(ctx, rt.o.Now().Add(-rt.o.IdleAfter)); err != nil {
		rt.log.Error("assistant: parking idle runs failed", "err", err)
	} else if len(parked) > 0 {
		rt.log.Info("assistant: parked idle runs", "count", len(parked))
	}
	// Runs whose approvals were decided or expired go on, should the
	// requeue on the decision have been lost, and so do runs with an open
	// turn or an unanswered message that nothing holds or has queued.
	if waiting, err := rt.st.RunsToResume(ctx, 100); err != nil {
		rt.log.Error("assistant: looking for runs to resume failed", "err", err)
	} else {
		for _, r := range waiting {
			rt.ApprovalDecided(ctx, r.ID)
		}
	}
	rt.sweepAttachments(ctx)
	rt.retain(ctx)
	rt.holder.reap(ctx, func(runID string) bool {
		r, err := rt.st.GetRun(ctx, runID)
		return err == nil && r.Status == store.RunAwaitingApproval
	})
}

// Retries of a slice of work that failed (the database, the MCP server, a
// panic): the run is queued again after a backoff that doubles from
// Options.RetryBackoff up to retryCap with each failure in a row; after
// maxFailures in a row, the turn ends as failed, visibly, instead.
const (
	retryCap    = time.Minute
	maxFailures = 8
)

// wakeRetries makes the runs waiting out a retry's backoff claimable at
// once. It is called when the store answers a claim again after failing
// one: their slices most likely failed in the same outage, and would
// otherwise wait up to retryCap after it ended. It returns how many it
// woke.
func (rt *Runtime) wakeRetries(ctx context.Context) int {
	n, err := rt.st.WakeRetries(ctx)
	if err != nil {
		rt.log.Warn("assistant: waking the runs waiting out a retry failed", "err", err)
		return 0
	}
	if n > 0 {
		rt.log.Info("assistant: the database answers again; runs waiting out a retry are queued now", "count", n)
	}
	return n
}

// retryBackoff is the backoff after a failure that follows failures others
// in a row.
func (rt *Runtime) retryBackoff(failures int) time.Duration {
	return min(rt.o.RetryBackoff<<min(failures, 16), retryCap)
}

// failedSlice is how a slice of work on r that failed with an error ends:
// queued for a retry after a backoff or, after maxFailures in a row, with
// its turn ended as failed (started first, if it never was), so that the
// message gets its one answer. It reads the run again: the slice may have
// started the turn before it failed.
func (rt *Runtime) failedSlice(ctx context.Context, r store.Run) ending {
	retry := ending{rel: store.Release{Retry: rt.retryBackoff(r.Failures)}, outcome: store.StepFailed}
	if r.Failures+1 < maxFailures {
		return retry
	}
	cur, err := rt.st.GetRun(ctx, r.ID)
	if err != nil {
		return retry
	}
	seq, started := cur.TurnSeq, cur.TurnSeq != 0
	if !started {
		if seq, err = rt.nextUserMessage(ctx, cur); err != nil {
			return retry
		}
		if seq == 0 {
			return ending{outcome: store.StepFailed} // nothing to answer
		}
	}
	rt.log.Error("assistant: a turn failed too many times in a row; ending it", "run", r.ID, "failures", r.Failures+1)
	end := ending{outcome: store.StepEnded}
	if !started {
		end.events = append(end.events, store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: seq}), StartsTurn: seq})
	}
	end.events = append(end.events, store.NewEvent{Type: EventTurnEnd, EndsTurn: true, Payload: mustJSON(TurnEnd{
		MessageSeq: seq, Status: TurnFailed, Error: "The assistant failed to answer, again and again. Send a message to try again."})})
	return end
}

// Subscribers reports this process's live-update subscribers: of runs'
// event streams, and of users' feeds.
func (rt *Runtime) Subscribers() (runs, feeds int) { return rt.bus.subscribers() }

// HeldSessions reports how many MCP sessions this process holds for runs
// between turns.
func (rt *Runtime) HeldSessions() int { return rt.holder.held() }

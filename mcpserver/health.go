package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/periodic"
	"github.com/usherhq/usher/policy"
)

// The kinds of failed upstream calls, the values of the kind label of
// usher_upstream_call_errors_total.
const (
	// CallBusy: no upstream session was free on this replica; nothing was
	// sent.
	CallBusy = "busy"
	// CallNotSent: no connection to the upstream could be made; nothing
	// was sent.
	CallNotSent = "not_sent"
	// CallRefused: the upstream answered the call with a JSON-RPC error;
	// the call did not run.
	CallRefused = "refused"
	// CallTimeout: the call did not end within CatalogOptions.CallTimeout;
	// its outcome is unknown.
	CallTimeout = "timeout"
	// CallCancelled: the caller went away during the call; its outcome is
	// unknown.
	CallCancelled = "cancelled"
	// CallLost: the connection was lost after the call was sent; its
	// outcome is unknown.
	CallLost = "lost"
	// CallUpstreamError: the upstream ran the call and answered with a
	// tool error (isError).
	CallUpstreamError = "upstream_error"
)

// callKinds are the kinds, in the order the metric's series are made.
var callKinds = []string{CallBusy, CallNotSent, CallRefused, CallTimeout, CallCancelled, CallLost, CallUpstreamError}

// upstreamCallBuckets are the upper bounds, in seconds, of the upstream
// call latency histogram: a millisecond to the default call timeout.
var upstreamCallBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// callMetrics are the catalog's metrics of upstream calls.
type callMetrics struct {
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newCallMetrics(reg prometheus.Registerer) (*callMetrics, error) {
	m := &callMetrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_upstream_call_errors_total",
			Help: "Tool calls to an upstream by this process that failed, by kind: busy and not_sent (nothing was sent), refused (the upstream answered with a JSON-RPC error), timeout, cancelled and lost (the outcome is unknown), upstream_error (the tool answered with an error).",
		}, []string{"upstream", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_upstream_call_duration_seconds",
			Help:    "Time of the tool calls this process sent to an upstream, from the request to its answer or failure.",
			Buckets: upstreamCallBuckets,
		}, []string{"upstream"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.errors, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("metrics: %w", err)
			}
		}
	}
	return m, nil
}

// upstreamStats are one upstream's metrics and the result of its latest
// listing.
type upstreamStats struct {
	errors   map[string]prometheus.Counter // by kind
	duration prometheus.Observer

	mu      sync.Mutex
	checked time.Time // the latest listing's end
	listed  time.Time // the latest successful listing's end
	up      bool
	lastErr string
	tools   map[string]string // exposed name → definition hash, as offered at the latest successful listing
	refused map[refusal]bool  // what that listing listed and the catalog does not offer
}

func newUpstreamStats(m *callMetrics, name string) *upstreamStats {
	s := &upstreamStats{errors: map[string]prometheus.Counter{}, duration: m.duration.WithLabelValues(name)}
	for _, k := range callKinds {
		s.errors[k] = m.errors.WithLabelValues(name, k)
	}
	return s
}

// record records the end of a listing: whether it succeeded, else err.
func (s *upstreamStats) record(now time.Time, _ *offering, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checked = now
	if err != nil {
		s.up, s.lastErr = false, truncate(err.Error(), 512)
		return
	}
	s.up, s.lastErr, s.listed = true, "", now
}

// offered records what the catalog offers of the upstream after a
// successful listing: its tools, by definition hash, and what it refused.
// It returns the refusals the previous listing did not have.
func (s *upstreamStats) offered(tools map[string]string, refused []refusal) []refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fresh []refusal
	now := make(map[refusal]bool, len(refused))
	for _, r := range refused {
		if !s.refused[r] && !now[r] {
			fresh = append(fresh, r)
		}
		now[r] = true
	}
	s.tools, s.refused = tools, now
	return fresh
}

// failed counts a failed call of kind.
func (s *upstreamStats) failed(kind string) { s.errors[kind].Inc() }

// callKind is the kind of a call's failure from err, which the session's
// CallTool returned with ctx, the call's context.
func callKind(ctx context.Context, err error) string {
	if notSent(err) {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code != codeRejectedByTransport {
			return CallRefused
		}
		return CallNotSent
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return CallTimeout
	case errors.Is(ctx.Err(), context.Canceled):
		return CallCancelled
	}
	return CallLost
}

// UpstreamState is what a replica last learned of an upstream by listing
// it.
type UpstreamState struct {
	// Name is the upstream's configured name.
	Name string
	// Up is whether its latest listing succeeded.
	Up bool
	// Checked is when its latest listing ended; zero before the first.
	Checked time.Time
	// Listed is when its latest successful listing ended; zero before
	// the first.
	Listed time.Time
	// Error is why the latest listing failed; empty when it succeeded.
	// It may name the upstream's address, never a credential.
	Error string
	// Tools is how many of its tools the catalog offered after its
	// latest successful listing.
	Tools int
	// Refused is how many tools that listing listed that the catalog
	// does not offer: a name that does not fit MCP's grammar (a
	// look-alike), a built-in tool's name, a name another upstream's
	// tool has too, a name in another upstream's prefix, a definition
	// that cannot be hashed. Each is logged once, when it first appears.
	Refused int
	// Added, Changed and Removed count its tools that differ from the
	// tool lock (as `usher tools diff` shows them): offered and not in the
	// lock, offered with another definition hash, in the lock and no
	// longer offered.
	Added, Changed, Removed int
}

// HealthOptions configures a Health. Every zero value selects its default.
type HealthOptions struct {
	// Interval is how often every upstream is listed. Default
	// DefaultCheckInterval.
	Interval time.Duration
	// Lock is the tool lock the upstreams' tools are compared with. Nil:
	// no tool is reviewed.
	Lock *policy.Lock
	// Registerer receives the upstreams' health metrics when not nil:
	// usher_upstream_up, usher_upstream_last_list_timestamp_seconds,
	// usher_upstream_tools_changed and usher_upstream_tools_refused.
	Registerer prometheus.Registerer
	// Logger receives the upstreams that go down or come up. Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultCheckInterval is the default of HealthOptions.Interval.
const DefaultCheckInterval = 30 * time.Second

// Health lists a catalog's upstreams every interval and keeps what each
// listing found, for the metrics and for whoever shows the upstreams'
// state (States). Each check is the catalog's listing too: what it finds
// is what the next call is decided on, so that a change an upstream does
// not announce is seen within the interval. Listings that serve callers
// count as checks too.
type Health struct {
	cat  *Catalog
	opts HealthOptions
	loop *periodic.Loop
	// locked is the lock's tools by the upstream whose namespace holds
	// them.
	locked map[string]map[string]string
}

// NewHealth returns the health of cat's upstreams; Start starts the
// checks.
func NewHealth(cat *Catalog, opts *HealthOptions) (*Health, error) {
	if cat == nil {
		return nil, errors.New("mcpserver: health: a catalog is required")
	}
	var o HealthOptions
	if opts != nil {
		o = *opts
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("mcpserver: health: the interval must not be negative, got %s", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultCheckInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Health{cat: cat, opts: o, locked: map[string]map[string]string{}}
	builtin := map[string]bool{}
	for _, t := range cat.builtins {
		builtin[t.def.Name] = true
	}
	for _, u := range cat.upstreams {
		h.locked[u.cfg.Name] = map[string]string{}
	}
	if o.Lock != nil {
		for name, hash := range o.Lock.Tools {
			if builtin[name] {
				continue
			}
			if u, _, ok := cat.route(name); ok {
				h.locked[u.cfg.Name][name] = hash
			}
		}
	}
	h.loop = periodic.New(o.Interval, h.check)
	if o.Registerer != nil {
		if err := o.Registerer.Register(healthCollector{h}); err != nil {
			return nil, fmt.Errorf("mcpserver: health: metrics: %w", err)
		}
	}
	return h, nil
}

// Start lists every upstream at once and then every interval, until Stop
// or until ctx ends.
func (h *Health) Start(ctx context.Context) error { return h.loop.Start(ctx) }

// Stop ends the checks and waits for one under way. It is idempotent and
// safe to call without Start.
func (h *Health) Stop() { h.loop.Stop() }

// check lists every upstream, concurrently, each within the interval (and
// at most listTimeout), as the catalog's listing (Catalog.recheck).
func (h *Health) check(ctx context.Context) {
	before := make([]UpstreamState, len(h.cat.upstreams))
	for i, u := range h.cat.upstreams {
		before[i] = u.stats.state()
	}
	h.cat.recheck(ctx, min(h.opts.Interval, listTimeout))
	for i, u := range h.cat.upstreams {
		switch after := u.stats.state(); {
		case !after.Up && ctx.Err() == nil && (before[i].Up || before[i].Checked.IsZero()):
			// Down since the previous check, or since the start.
			h.opts.Logger.Warn("mcpserver: an upstream is down", "upstream", u.cfg.Name, "err", after.Error)
		case after.Up && !before[i].Up:
			h.opts.Logger.Info("mcpserver: an upstream is up", "upstream", u.cfg.Name)
		}
	}
}

// state copies what the latest listing found.
func (s *upstreamStats) state() UpstreamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	refused := 0
	for r := range s.refused {
		if r.kind == "tool" {
			refused++
		}
	}
	return UpstreamState{Up: s.up, Checked: s.checked, Listed: s.listed, Error: s.lastErr, Tools: len(s.tools), Refused: refused}
}

// States returns every upstream's state, in the catalog's order, with its
// tools compared with the lock.
func (h *Health) States() []UpstreamState {
	out := make([]UpstreamState, 0, len(h.cat.upstreams))
	for _, u := range h.cat.upstreams {
		s := u.stats.state()
		s.Name = u.cfg.Name
		if !s.Listed.IsZero() {
			u.stats.mu.Lock()
			for _, c := range policy.Diff(&policy.Lock{Tools: h.locked[u.cfg.Name]}, u.stats.tools) {
				switch c.Kind {
				case policy.Added:
					s.Added++
				case policy.Changed:
					s.Changed++
				case policy.Removed:
					s.Removed++
				}
			}
			u.stats.mu.Unlock()
		}
		out = append(out, s)
	}
	return out
}

// healthCollector exports the States of a Health.
type healthCollector struct{ h *Health }

var (
	upstreamUpDesc = prometheus.NewDesc("usher_upstream_up",
		"Whether this process's latest listing of the upstream succeeded (1) or failed (0).", []string{"upstream"}, nil)
	upstreamListedDesc = prometheus.NewDesc("usher_upstream_last_list_timestamp_seconds",
		"When this process last listed the upstream successfully, in seconds since the Unix epoch; 0 before the first.", []string{"upstream"}, nil)
	upstreamChangedDesc = prometheus.NewDesc("usher_upstream_tools_changed",
		"The upstream's tools that differ from the tool lock at this process's latest successful listing, by change: added (not in the lock), changed (another definition hash), removed (in the lock, no longer offered). Only what is offered counts (see usher_upstream_tools_refused).", []string{"upstream", "change"}, nil)
	upstreamRefusedDesc = prometheus.NewDesc("usher_upstream_tools_refused",
		"The tools the upstream listed at this process's latest successful listing that are not offered: a name that does not fit MCP's grammar, a built-in tool's name, a name another upstream's tool has too, a name in another upstream's prefix, a definition that cannot be hashed. Each is logged once, when it first appears.", []string{"upstream"}, nil)
)

// Describe implements prometheus.Collector.
func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamUpDesc
	ch <- upstreamListedDesc
	ch <- upstreamChangedDesc
	ch <- upstreamRefusedDesc
}

// Collect implements prometheus.Collector.
func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.States() {
		up, listed := 0.0, 0.0
		if s.Up {
			up = 1
		}
		if !s.Listed.IsZero() {
			listed = float64(s.Listed.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(upstreamUpDesc, prometheus.GaugeValue, up, s.Name)
		ch <- prometheus.MustNewConstMetric(upstreamListedDesc, prometheus.GaugeValue, listed, s.Name)
		ch <- prometheus.MustNewConstMetric(upstreamRefusedDesc, prometheus.GaugeValue, float64(s.Refused), s.Name)
		for _, ch2 := range []struct {
			change string
			n      int
		}{{string(policy.Added), s.Added}, {string(policy.Changed), s.Changed}, {string(policy.Removed), s.Removed}} {
			ch <- prometheus.MustNewConstMetric(upstreamChangedDesc, prometheus.GaugeValue, float64(ch2.n), s.Name, ch2.change)
		}
	}
}

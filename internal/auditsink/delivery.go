package auditsink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/periodic"
	"github.com/usherhq/usher/store"
)

// Cursors is the store of the sinks' cursors and leases (see
// store.AuditSinks); store.Store is one.
type Cursors interface {
	AuditSink(ctx context.Context, name string) (store.AuditSink, error)
	ClaimAuditSink(ctx context.Context, name, owner string, leaseFor time.Duration) (store.AuditSinkLease, error)
	AdvanceAuditSink(ctx context.Context, l store.AuditSinkLease, seq int64, leaseFor time.Duration) (store.AuditSinkLease, error)
	ReleaseAuditSink(ctx context.Context, l store.AuditSinkLease) error
}

// Target is one sink to deliver a source to.
type Target struct {
	// Name is the sink's name, and of its cursor in the database:
	// lowercase letters, digits, '-' and '_', at most 63, starting with a
	// letter or digit.
	Name string
	Sink Sink
	// Source is what it receives; nil means Options.Records, the audit
	// log's records, whose lag the metrics measure. Another source (the
	// checkpoints) has no lag metrics: its cursor is not the records'.
	Source Source
}

// namePattern is what a Target's name must look like: a sink's name, and
// for a second source of the same sink a suffix after a dot (which a
// sink's own name cannot have), as CheckpointsOf names it.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}(\.[a-z]{1,16})?$`)

// CheckpointsOf is the target that delivers the audit log's signed
// checkpoints to t's sink, beside t's records, with a cursor of its own:
// its name is t's and ".checkpoints".
func CheckpointsOf(t Target, log CheckpointLister) Target {
	return Target{Name: t.Name + ".checkpoints", Sink: t.Sink, Source: Checkpoints{Log: log}}
}

// Options configures New. A nil *Options means every default.
type Options struct {
	// Records is the source of a Target without one. Required then.
	Records Source
	// Owner names this process in the leases. Default: the host name and
	// random digits.
	Owner string
	// Interval is how often each sink is looked at. Default 2s.
	Interval time.Duration
	// LeaseFor is how long a claim or renewal of a sink's lease lasts.
	// Default 30s; it must exceed twice the longest send (a webhook's
	// client timeout, DefaultWebhookTimeout by default).
	LeaseFor time.Duration
	// BatchLines and BatchBytes bound a batch: at most BatchLines lines,
	// ended by the first line that brings it to BatchBytes. Defaults 500
	// and 1 MiB.
	BatchLines, BatchBytes int
	// BatchesPerPass bounds the batches a sink is sent in one pass.
	// Default 20.
	BatchesPerPass int
	// MinBackoff and MaxBackoff bound the wait after a failed send,
	// doubled at each failure in a row. Defaults 1s and 5m.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock of the backoff and of the lag. Default time.Now.
	Now func() time.Time
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the sinks' metrics, when not nil: each sink's
	// lag in records (usher_audit_sink_lag_records) and in seconds
	// (usher_audit_sink_lag_seconds, the age of the oldest record not yet
	// delivered), and the lines it was delivered
	// (usher_audit_sink_delivered_total) and the sends that failed
	// (usher_audit_sink_failures_total), by this process.
	Registerer prometheus.Registerer
}

// Delivery delivers to every target, each on a loop of its own.
type Delivery struct {
	sinks []*deliverer
	loops []*periodic.Loop
	log   *slog.Logger
}

// metrics are the sinks' metrics, labelled by sink.
type metrics struct {
	lagRecords, lagSeconds *prometheus.GaugeVec
	delivered, failures    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		lagRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_audit_sink_lag_records",
			Help: "Records of the audit log a sink has not yet been delivered.",
		}, []string{"sink"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_audit_sink_lag_seconds",
			Help: "Age of the oldest record of the audit log a sink has not yet been delivered; 0 when it has every record.",
		}, []string{"sink"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_audit_sink_delivered_total",
			Help: "Lines this process delivered to a sink.",
		}, []string{"sink"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_audit_sink_failures_total",
			Help: "Sends to a sink by this process that failed, each retried later.",
		}, []string{"sink"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.lagRecords, m.lagSeconds, m.delivered, m.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("auditsink: metrics: %w", err)
			}
		}
	}
	return m, nil
}

// New returns the delivery to targets, whose names must be distinct. It
// is started with Start.
func New(st Cursors, targets []Target, opts *Options) (*Delivery, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	setDefault(&o.Interval, 2*time.Second)
	setDefault(&o.LeaseFor, 30*time.Second)
	setDefault(&o.BatchLines, 500)
	setDefault(&o.BatchBytes, 1<<20)
	setDefault(&o.BatchesPerPass, 20)
	setDefault(&o.MinBackoff, time.Second)
	setDefault(&o.MaxBackoff, 5*time.Minute)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Owner == "" {
		o.Owner = newOwner()
	}
	var errs []error
	if st == nil {
		errs = append(errs, errors.New("New needs a store"))
	}
	if o.LeaseFor < 2*time.Second {
		errs = append(errs, fmt.Errorf("LeaseFor %s is under 2s", o.LeaseFor))
	}
	if o.MaxBackoff < o.MinBackoff {
		errs = append(errs, fmt.Errorf("MaxBackoff %s is under MinBackoff %s", o.MaxBackoff, o.MinBackoff))
	}
	seen := map[string]bool{}
	for i, t := range targets {
		switch {
		case !namePattern.MatchString(t.Name):
			errs = append(errs, fmt.Errorf("target %d: name %q is not lowercase letters, digits, '-' and '_'", i, t.Name))
		case seen[t.Name]:
			errs = append(errs, fmt.Errorf("target %d: name %q is another target's", i, t.Name))
		}
		seen[t.Name] = true
		if t.Sink == nil {
			errs = append(errs, fmt.Errorf("target %q has no sink", t.Name))
		}
		if t.Source == nil && o.Records == nil {
			errs = append(errs, fmt.Errorf("target %q has no source, and Options.Records is nil", t.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("auditsink: %w", err)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	d := &Delivery{log: o.Logger}
	for _, t := range targets {
		src := t.Source
		if src == nil {
			src = o.Records
		}
		dl := &deliverer{name: t.Name, sink: t.Sink, source: src, st: st, opts: o,
			log:       o.Logger.With("component", "auditsink", "sink", t.Name),
			delivered: m.delivered.WithLabelValues(t.Name), failures: m.failures.WithLabelValues(t.Name)}
		if t.Source == nil {
			dl.measured = true
			dl.lagRecords, dl.lagSeconds = m.lagRecords.WithLabelValues(t.Name), m.lagSeconds.WithLabelValues(t.Name)
		}
		d.sinks = append(d.sinks, dl)
		d.loops = append(d.loops, periodic.New(o.Interval, dl.pass))
	}
	return d, nil
}

// Start starts delivering to every target; the first pass runs at once.
func (d *Delivery) Start(ctx context.Context) error {
	for i, l := range d.loops {
		if err := l.Start(ctx); err != nil {
			for _, started := range d.loops[:i] {
				started.Stop()
			}
			return fmt.Errorf("auditsink: %w", err)
		}
	}
	return nil
}

// Stop stops delivering, waiting for a send under way, and gives back the
// leases held, so that another replica resumes at once. It is idempotent.
func (d *Delivery) Stop() {
	for _, l := range d.loops {
		l.Stop()
	}
	for _, dl := range d.sinks {
		dl.release()
	}
}

// newOwner names this process in the leases.
func newOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return host + "-" + hex.EncodeToString(b[:])
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// deliverer delivers one target. Its passes run one at a time (on its
// loop, or a test's), so its fields need no lock.
type deliverer struct {
	name   string
	sink   Sink
	source Source
	st     Cursors
	opts   Options
	log    *slog.Logger

	lease     *store.AuditSinkLease // nil when not held
	failed    int                   // sends failed in a row
	notBefore time.Time             // no send before it

	measured               bool // the records' lag is measured
	lagRecords, lagSeconds prometheus.Gauge
	delivered, failures    prometheus.Counter
}

// pass is one look at the sink: deliver what is pending, if this process
// holds (or takes) the sink's lease and no backoff is under way, then
// measure the lag.
func (d *deliverer) pass(ctx context.Context) {
	if err := d.deliver(ctx); err != nil && ctx.Err() == nil {
		d.log.WarnContext(ctx, "audit sink: delivery failed; the records stay pending", "err", err, "retry_at", d.notBefore)
	}
	if d.measured {
		d.measure(ctx)
	}
}

// deliver sends up to BatchesPerPass batches, moving the cursor after
// each the sink acknowledges.
func (d *deliverer) deliver(ctx context.Context) error {
	for range d.opts.BatchesPerPass {
		held, err := d.hold(ctx)
		if err != nil || !held || d.opts.Now().Before(d.notBefore) {
			return err
		}
		b, err := d.source.Batch(ctx, d.lease.DeliveredSeq, d.opts.BatchLines, d.opts.BatchBytes)
		if err != nil || b.Lines == 0 {
			return err
		}
		if err := d.sink.Send(ctx, b.Body); err != nil {
			if ctx.Err() != nil {
				return nil // stopping: the batch is sent again later
			}
			d.backOff(err)
			return fmt.Errorf("send %d lines after %d: %w", b.Lines, d.lease.DeliveredSeq, err)
		}
		d.failed, d.notBefore = 0, time.Time{}
		d.delivered.Add(float64(b.Lines))
		l, err := d.st.AdvanceAuditSink(ctx, *d.lease, b.Last, d.opts.LeaseFor)
		if err != nil {
			// Delivered but not recorded: the batch is delivered again,
			// by whoever holds the lease next.
			d.lease = nil
			return fmt.Errorf("record delivery through %d: %w", b.Last, err)
		}
		d.lease = &l
	}
	return nil
}

// hold makes sure this process holds the sink's lease with at least half
// of LeaseFor ahead: it renews the lease, or claims it. It reports false
// when another process holds it.
func (d *deliverer) hold(ctx context.Context) (bool, error) {
	if d.lease != nil {
		if d.lease.ExpiresAt.Sub(d.opts.Now()) > d.opts.LeaseFor/2 {
			return true, nil
		}
		l, err := d.st.AdvanceAuditSink(ctx, *d.lease, d.lease.DeliveredSeq, d.opts.LeaseFor)
		if err == nil {
			d.lease = &l
			return true, nil
		}
		d.lease = nil
		if !errors.Is(err, store.ErrConflict) {
			return false, fmt.Errorf("renew the lease: %w", err)
		}
	}
	l, err := d.st.ClaimAuditSink(ctx, d.name, d.opts.Owner, d.opts.LeaseFor)
	switch {
	case errors.Is(err, store.ErrConflict):
		return false, nil // another replica delivers
	case err != nil:
		return false, fmt.Errorf("claim the lease: %w", err)
	}
	d.lease = &l
	return true, nil
}

// backOff sets when the next send may be, after err: when a Retry-After
// asked, else MinBackoff doubled for each failure in a row, at most
// MaxBackoff.
func (d *deliverer) backOff(err error) {
	d.failures.Inc()
	d.failed++
	wait := d.opts.MaxBackoff
	if d.failed <= 30 {
		wait = min(d.opts.MinBackoff<<(d.failed-1), d.opts.MaxBackoff)
	}
	if ra, ok := errors.AsType[*RetryAfter](err); ok {
		wait = ra.Wait
	}
	d.notBefore = d.opts.Now().Add(wait)
}

// measure sets the sink's lag from its cursor in the database, which
// every replica reads, the one delivering or not.
func (d *deliverer) measure(ctx context.Context) {
	s, err := d.st.AuditSink(ctx, d.name)
	if err != nil {
		if ctx.Err() == nil {
			d.log.WarnContext(ctx, "audit sink: reading its cursor failed", "err", err)
		}
		return
	}
	d.lagRecords.Set(float64(max(s.HeadSeq-s.DeliveredSeq, 0)))
	lag := 0.0
	if !s.PendingAt.IsZero() {
		lag = max(d.opts.Now().Sub(s.PendingAt).Seconds(), 0)
	}
	d.lagSeconds.Set(lag)
}

// release gives the lease back, once the loop has stopped.
func (d *deliverer) release() {
	if d.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.st.ReleaseAuditSink(ctx, *d.lease); err != nil && !errors.Is(err, store.ErrConflict) {
		d.log.Warn("audit sink: giving back the lease failed; another replica takes over when it expires", "err", err)
	}
	d.lease = nil
}

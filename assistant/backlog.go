package assistant

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/store"
)

// Backlogs reads the work waiting across every replica; store.Store
// implements it.
type Backlogs interface {
	RunQueue(ctx context.Context, when time.Time) (store.RunQueue, error)
	ApprovalBacklog(ctx context.Context, when time.Time) (store.ApprovalBacklog, error)
}

// backlogTimeout bounds the read of a scrape: a database that does not
// answer leaves the backlog's series out of that scrape.
const backlogTimeout = 2 * time.Second

// BacklogCollector returns the metrics of the work waiting, read from st
// at each scrape so that every replica reports the same durable state:
// usher_runs_queued, usher_runs_running,
// usher_runs_oldest_queued_age_seconds, usher_approvals_pending and
// usher_approvals_oldest_pending_age_seconds. now is the clock (nil:
// time.Now); a failed read is logged to log and leaves the series out.
func BacklogCollector(st Backlogs, now func() time.Time, log *slog.Logger) prometheus.Collector {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &backlogCollector{st: st, now: now, log: log}
}

type backlogCollector struct {
	st  Backlogs
	now func() time.Time
	log *slog.Logger
}

var (
	runsQueuedDesc = prometheus.NewDesc("usher_runs_queued",
		"Runs waiting for a replica to work their turn (queued and not leased, those waiting out a retry's backoff included, or whose lease expired), across replicas.", nil, nil)
	runsRunningDesc = prometheus.NewDesc("usher_runs_running",
		"Runs whose turn a replica holds (an unexpired lease), across replicas.", nil, nil)
	runsOldestDesc = prometheus.NewDesc("usher_runs_oldest_queued_age_seconds",
		"How long the longest-queued of the queued runs has waited; 0 when none is queued.", nil, nil)
	approvalsPendingDesc = prometheus.NewDesc("usher_approvals_pending",
		"Approvals pending a decision and not expired, across replicas.", nil, nil)
	approvalsOldestDesc = prometheus.NewDesc("usher_approvals_oldest_pending_age_seconds",
		"How long the oldest pending approval has waited for a decision; 0 when none is pending.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsQueuedDesc, runsRunningDesc, runsOldestDesc, approvalsPendingDesc, approvalsOldestDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	now := c.now()
	q, err := c.st.RunQueue(ctx, now)
	if err != nil {
		c.log.Warn("assistant: reading the run queue for the metrics failed", "err", err)
		return
	}
	a, err := c.st.ApprovalBacklog(ctx, now)
	if err != nil {
		c.log.Warn("assistant: reading the pending approvals for the metrics failed", "err", err)
		return
	}
	age := func(since time.Time) float64 {
		if since.IsZero() {
			return 0
		}
		return max(now.Sub(since).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(runsQueuedDesc, prometheus.GaugeValue, float64(q.Queued))
	ch <- prometheus.MustNewConstMetric(runsRunningDesc, prometheus.GaugeValue, float64(q.Running))
	ch <- prometheus.MustNewConstMetric(runsOldestDesc, prometheus.GaugeValue, age(q.OldestQueuedAt))
	ch <- prometheus.MustNewConstMetric(approvalsPendingDesc, prometheus.GaugeValue, float64(a.Pending))
	ch <- prometheus.MustNewConstMetric(approvalsOldestDesc, prometheus.GaugeValue, age(a.OldestAt))
}

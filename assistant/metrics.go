package assistant

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the runtime's metrics: the MCP sessions held between
// turns (usher_assistant_held_sessions), the compactions by outcome
// (usher_assistant_compactions_total), the open live-update streams
// (usher_live_subscribers) and the turns queued again after a failure
// (usher_assistant_turns_retried_total), the requests refused by a daily
// token limit (usher_assistant_token_limit_refusals_total), the inactive
// conversations deleted and the deleted ones erased
// (usher_assistant_runs_expired_total, usher_assistant_runs_purged_total),
// and the model requests
// (usher_model_*, see modelMetrics), each of this process.
// Options.Registerer registers them.
func (rt *Runtime) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "usher_assistant_held_sessions",
			Help: "MCP sessions this process holds for runs between turns.",
		}, func() float64 { return float64(rt.HeldSessions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "usher_live_subscribers",
			Help: "Open live-update streams of runs' events and of users' feeds in this process.",
		}, func() float64 { runs, feeds := rt.Subscribers(); return float64(runs + feeds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "usher_assistant_turns_retried_total",
			Help: "Slices of a turn's work that failed on this process (the database, the MCP server, the model, a panic) and were queued for a retry after a backoff.",
		}, func() float64 { return float64(rt.retried.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "usher_assistant_runs_expired_total",
			Help: "Conversations this process deleted after assistant.delete_inactive_after without activity.",
		}, func() float64 { return float64(rt.expired.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "usher_assistant_runs_purged_total",
			Help: "Deleted conversations this process erased, past assistant.purge_deleted_after.",
		}, func() float64 { return float64(rt.purged.Load()) }),
	}
	for at, where := range [...]string{limitedRequest: "request", limitedTurn: "turn"} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "usher_assistant_token_limit_refusals_total",
			Help:        "Model requests this process did not make because their person had used the day's token limit: at a request of the API, or at a turn's next step.",
			ConstLabels: prometheus.Labels{"at": where},
		}, func() float64 { return float64(rt.tokenLimited[at].Load()) }))
	}
	cs = append(cs, rt.models.collectors()...)
	for _, o := range []struct {
		outcome string
		count   func(Compactions) int64
	}{
		{"written", func(c Compactions) int64 { return c.Written }},
		{"failed", func(c Compactions) int64 { return c.Failed }},
		{"invalid", func(c Compactions) int64 { return c.Invalid }},
		{"conflict", func(c Compactions) int64 { return c.Conflict }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "usher_assistant_compactions_total",
			Help:        "Context compactions of this process by outcome: a snapshot written, the model failed, a summary refused, another writer first.",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.count(rt.Compactions())) }))
	}
	return cs
}

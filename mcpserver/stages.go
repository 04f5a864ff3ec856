package mcpserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/httpx"
)

// The stages of a tools/call through the enforcement point, the
// values of the stage label of usher_mcp_tool_call_stage_seconds.
const (
	// stageDecide: from the enforcement point's start to the policy's
	// verdict (the catalog's lookup, the arguments' checks and the policy).
	stageDecide = "decide"
	// stageRecord: the write that must be durable before the upstream is
	// called (the decision's audit record, with the execution's start when
	// the call has an idempotency key, or with the approval's use).
	stageRecord = "record"
	// stageUpstream: the upstream's call, from asking for its session to
	// its result.
	stageUpstream = "upstream"
)

// stages times the stages of tool calls, so that an operator can see where
// a call's time goes: the sum of the stages' means over the mean of the
// endpoint's requests (usher_http_request_duration_seconds) leaves what
// the MCP session layer and HTTP take. Its observers are resolved once, so
// that a call pays three observations and no label lookups.
type stages struct {
	decide, record, upstream prometheus.Observer
}

// newStages returns the stage histogram's observers, registered with reg
// (none when reg is nil: the histogram is kept but not exported).
func newStages(reg prometheus.Registerer) (*stages, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "usher_mcp_tool_call_stage_seconds",
		Help:    "Time of each stage of tools/call requests on this process: decide (lookup, argument checks, policy; every call that reaches a verdict), record (the durable write before the upstream is called), upstream (the upstream's call).",
		Buckets: httpx.LatencyBuckets,
	}, []string{"stage"})
	if reg != nil {
		if err := reg.Register(h); err != nil {
			return nil, err
		}
	}
	return &stages{
		decide:   h.WithLabelValues(stageDecide),
		record:   h.WithLabelValues(stageRecord),
		upstream: h.WithLabelValues(stageUpstream),
	}, nil
}

// since observes the time from t to now on o.
func since(o prometheus.Observer, t time.Time) {
	o.Observe(time.Since(t).Seconds())
}

package mcpserver

import "github.com/prometheus/client_golang/prometheus"

// The sources of outcome_unknown executions, the values of the source
// label of usher_mcp_outcome_unknown_total.
const (
	// unknownCall: this process called the upstream and lost the answer
	// (the connection, the stream, the call's time ran out), or could not
	// record how the call ended.
	unknownCall = "call"
	// unknownSweep: a process stopped before recording how a call ended,
	// and a Sweeper on this process found it.
	unknownSweep = "sweep"
)

// newOutcomeUnknown returns the counter of the executions this process
// reported outcome_unknown from source, registered with reg (kept but not
// exported when reg is nil). The Server and the Sweeper each register
// their source's series.
func newOutcomeUnknown(reg prometheus.Registerer, source string) (prometheus.Counter, error) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "usher_mcp_outcome_unknown_total",
		Help:        "Tool executions this process reported outcome_unknown (they may or may not have acted, and are never run again), by source: call (the upstream's answer was lost, or how the call ended could not be recorded), sweep (a process stopped before recording it).",
		ConstLabels: prometheus.Labels{"source": source},
	})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

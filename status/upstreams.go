package status

import (
	"sync/atomic"
	"time"

	"github.com/usherhq/usher/mcpserver"
)

// The states of an upstream MCP server as a replica sees it.
const (
	StateUp      = "up"
	StateDown    = "down"
	StateUnknown = "unknown"
)

// UpstreamState is one upstream MCP server as a replica sees it.
type UpstreamState struct {
	Name  string `json:"name"`
	State string `json:"state"` // StateUp, StateDown or StateUnknown
	// LastOK is when the replica last reached it; zero for never or not
	// known.
	LastOK time.Time `json:"lastOk,omitzero"`
	// Error says why it is down, without secrets; empty when it is not.
	Error string `json:"error,omitempty"`
}

// Upstreams is what a heartbeat reports of the upstream MCP servers: the
// replica's view of each. It is called once per heartbeat and must not
// block on the network.
type Upstreams interface {
	UpstreamStates() []UpstreamState
}

// UnknownUpstreams reports each named upstream in StateUnknown: the
// upstreams a replica is configured with, before anything checks them.
type UnknownUpstreams []string

// UpstreamStates implements Upstreams.
func (u UnknownUpstreams) UpstreamStates() []UpstreamState {
	out := make([]UpstreamState, len(u))
	for i, name := range u {
		out[i] = UpstreamState{Name: name, State: StateUnknown}
	}
	return out
}

// HealthStates is what CheckedUpstreams reads of a health check of the
// upstreams: mcpserver.Health satisfies it.
type HealthStates interface {
	States() []mcpserver.UpstreamState
}

// CheckedUpstreams reports the upstreams as a health check last saw them
// once Use has given it one, and the Configured ones as unknown until
// then: a replica's heartbeat starts before its MCP server, which owns
// the check.
type CheckedUpstreams struct {
	Configured UnknownUpstreams
	health     atomic.Pointer[HealthStates]
}

// Use makes the upstreams' states those h reports from now on.
func (c *CheckedUpstreams) Use(h HealthStates) { c.health.Store(&h) }

// UpstreamStates implements Upstreams: an upstream not checked yet is
// unknown; one whose latest listing failed is down, with its error.
func (c *CheckedUpstreams) UpstreamStates() []UpstreamState {
	h := c.health.Load()
	if h == nil {
		return c.Configured.UpstreamStates()
	}
	states := (*h).States()
	out := make([]UpstreamState, len(states))
	for i, s := range states {
		out[i] = UpstreamState{Name: s.Name, State: StateUnknown, LastOK: s.Listed, Error: s.Error}
		switch {
		case s.Checked.IsZero():
		case s.Up:
			out[i].State = StateUp
		default:
			out[i].State = StateDown
		}
	}
	return out
}

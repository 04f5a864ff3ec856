package status

import "time"

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

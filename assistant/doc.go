// Package assistant owns the Assistant API (runs, messages, approvals
// endpoints, live updates), the run lifecycle, the turn scheduler and runner,
// model providers and context building.
//
// The runtime is not built yet; this package reserves its place in the
// architecture.
package assistant

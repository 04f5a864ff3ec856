// Package approvals owns durable approval requests and decisions, their
// binding to exact tool calls, and their single-use consumption.
//
// The package is not built yet; its table exists in the store schema.
package approvals

// Package gcpace owns the pace of a server process's garbage collector: a
// GOGC-style target with a floor under the heap goal, so that a process
// whose live heap is small but which allocates fast (every MCP message the
// Go SDK decodes takes a fresh 32 KiB buffer) is not collected every few
// requests, while one whose live heap is large is still held to the target.
//
// Go's collector lets the heap grow by GOGC percent of what was live after
// a collection, and never sets the goal below 4 MiB × GOGC/100. With a live
// heap of a few MiB that minimum is the goal, whatever the allocation rate.
// Hold re-sets GOGC after each collection to the lowest value not under
// the target whose goal reaches the floor, and never higher than the value
// whose own minimum is the floor, so the goal is about max(floor, live × (1
// + target/100)). GOMEMLIMIT still caps the heap below that.
package gcpace

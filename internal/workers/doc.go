// Package workers owns goroutines that are kept between the functions they
// run, so that a goroutine's stack, once grown to what those functions
// need, serves the next one.
//
// A new goroutine starts with a small stack, and a deep call path (a tool
// call through the MCP SDK, the policy, the store and the upstream's
// client) grows it a few times on its way down, each time copying it;
// started once per request, that copying was several per cent of a busy
// gateway's CPU. The technique is gRPC's server workers (grpc-go's
// NumStreamWorkers).
package workers

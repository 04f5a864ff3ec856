// Package mcpserver owns Usher's MCP endpoint: streamable HTTP transport,
// bearer authentication as an OAuth resource server, the tool catalog, and the
// enforcement point that consults the policy and approvals before any tool
// runs.
//
// The endpoint is not built yet; this package reserves its place in the
// architecture.
package mcpserver

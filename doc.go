// Package usher owns nothing at run time: it is the root of the Usher module,
// an MCP-native assistant gateway with a token broker. Its tests check the
// whole repository (package docs, formatting).
//
// The architecture is the set of top-level packages: cmd/usher (the binary),
// broker, mcpserver, policy, approvals, assistant and store, with narrow
// plumbing under internal/.
package usher

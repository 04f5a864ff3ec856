// Package broker owns Usher's token broker: the RS256 signing keys
// (generation, encrypted storage, scheduled rotation), the published JWKS,
// and minting, renewing and verifying the short-lived broker tokens that carry
// a user's identity to an MCP server.
//
// A broker token is an RFC 9068 access token (header typ "at+jwt") for exactly
// one audience, with scope "mcp:invoke" and at most a few minutes of life. The
// user's own identity-provider token never leaves the API edge; the broker
// token stands in for it.
package broker

// Package oauthtest owns a client of Usher's authorization server as an
// external MCP app drives it in tests: registration (RFC 7591), the
// authorization request with PKCE, the consent page answered with a
// signed-in person's session cookie, and the token endpoint. Tests of
// `usher serve` in several packages share it.
package oauthtest

// Package broker owns Usher's token broker: the RS256 signing keys
// (generation, encrypted storage, scheduled rotation), the published JWKS,
// and minting, renewing and verifying the short-lived broker tokens that carry
// a user's identity to an MCP server.
//
// A broker token is an RFC 9068 access token (header typ "at+jwt") for exactly
// one audience, with scope "mcp:invoke" and at most a few minutes of life. The
// user's own identity-provider token never leaves the API edge; the broker
// token stands in for it.
//
// Keys. A [Keyring] keeps one purpose's keys in the database, each private
// half sealed with AES-256-GCM under a 32-byte seal key and bound to its kid
// (the RFC 7638 thumbprint) and purpose. A new key is published a while
// before it signs, so verifiers that cached the key set learn it first; a
// retired key stays published until every token it signed has expired.
// Replicas sharing the database agree on one key per generation.
//
// Verification. A [Verifier] checks a token against a [KeySource] — the
// Keyring in process, or a remote key set fetching the JWKS over HTTP, both
// kept by the module's one key set cache (internal/jwks) — with golang-jwt,
// in one function, cheap checks first. A token verified before is
// remembered by the SHA-256 of its bytes, so that presenting it again costs
// a lookup, not an RSA verification; its expiry is checked at every use,
// and the cache is dropped when the token's key leaves the key set or
// changes. Its errors say how to answer: an [ErrInvalidToken] is 401, an
// [ErrInsufficientScope] 403, anything else 503. Their details are for
// logs, never for clients.
package broker

// Package clientmeta owns Usher's fetching of OAuth Client ID Metadata
// Documents (draft-ietf-oauth-client-id-metadata-document, the MCP
// authorization specification's preferred way for a client to identify
// itself): a client whose client_id is an https URL publishes its metadata
// (name, redirect URIs, authentication method) as JSON at that URL, and
// Usher's authorization server fetches it instead of holding a
// registration.
//
// A [Fetcher] turns such a client_id into a validated [Document]. Because
// the URL comes from whoever starts an authorization request, fetching it
// is a server-side request forgery hazard, and the Fetcher is built to
// refuse everything but a small JSON document on the public internet:
//
//   - The client_id must be an https URL with a path, without fragment, user
//     info or dot segments, checked before any fetch. Plain http is accepted
//     only with [Options].AllowLoopbackHTTP, which Usher sets only when its
//     own public URL is on loopback, and then only to a loopback host.
//   - Names are resolved by the Fetcher itself and every address is checked
//     before it is dialled — and again, by the dialer's Control function, on
//     the socket's actual remote address — so that a name answering a public
//     address to a check and a private one to the connection (DNS rebinding)
//     cannot slip through. Refused: loopback (unless AllowLoopbackHTTP),
//     private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
//     (169.254/16 including the cloud metadata address 169.254.169.254,
//     fe80::/10), unspecified, multicast, CGNAT (100.64/10), the reserved and
//     documentation ranges, and the IPv6 forms that embed an IPv4 address
//     (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo). No proxy from the
//     environment is used: the address dialled is the document's host.
//   - Redirects are refused, not followed: the draft says an authorization
//     server MUST NOT follow them, and a redirect is the classic way past an
//     address check. Only a 200 answer (or a 304 to a revalidation) is
//     accepted.
//   - One fetch takes at most [Options].Timeout (5 s) in all, from the name
//     lookup to the last byte; the body is at most [Options].MaxBodyBytes
//     (64 KiB): a larger one is refused, never truncated; the Content-Type
//     must be application/json or application/<something>+json.
//
// The document must be a JSON object, nested at most [MaxDepth] deep, whose
// client_id equals the URL exactly
// (simple string comparison, no normalisation), with a client_name and a
// non-empty redirect_uris, each acceptable by [RedirectURIProblem] — the
// rule broker/oauth holds registered and configured clients to as well —,
// and may carry client_uri, logo_uri, grant_types,
// response_types, token_endpoint_auth_method, jwks_uri or jwks, and scope;
// other members are kept in [Document].Raw and otherwise ignored. Member
// names match exactly and a name given twice refuses the document, so that
// every reader of Raw sees the same redirect_uris. A document
// cannot hold a secret, so client_secret_basic, client_secret_post,
// client_secret_jwt and a client_secret member are refused; the
// authentication method is none (the default here, since RFC 7591's default
// client_secret_basic is impossible for a document) or private_key_jwt with
// exactly one of jwks_uri and jwks.
//
// Documents are cached by client_id, honouring Cache-Control: max-age sets
// the lifetime, clamped to [Options].MinTTL (5 min) and [Options].MaxTTL
// (24 h), so that a client can neither make Usher fetch on every request nor
// be remembered for ever; a document without max-age lives MinTTL; no-store
// is never cached. A stale entry with an ETag is revalidated with
// If-None-Match, and a 304 renews it. The cache holds at most
// [Options].CacheSize (1,000) documents, dropping the least recently used.
// Concurrent fetches of one URL share one request; each caller stops waiting
// when its own context ends. Failures are not cached.
//
// [Fetcher.FetchKeySet] fetches the jwks_uri of a client that
// authenticates with private_key_jwt under the same rules, uncached: the
// authorization server caches the parsed key sets itself.
//
// Every refusal is an [*Error] whose Reason is a short sentence fit for an
// OAuth error_description; its Error text is that sentence only, and the
// underlying cause (the dialer's or the TLS stack's text, which may name
// internal addresses) is kept in its Cause field for logs.
package clientmeta

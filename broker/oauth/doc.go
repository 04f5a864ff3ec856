// Package oauth owns Usher's OAuth 2.1 authorization server for its MCP
// endpoint: the [Server], whose [Server.Handler] serves the endpoints over
// the store, and the protocol pieces they are made of, each a pure
// function or a small http.Handler with no storage of its own.
//
// The Server's endpoints: the authorization endpoint (GET: a request,
// which sends a user who is not signed in to sign in and back through
// PathAuthorizeContinue, and issues a code at once when the user's
// consent to the client is remembered, else shows the consent page; POST:
// the consent page's answer, same-origin and CSRF-checked), the token
// endpoint (authorization_code with PKCE, refresh_token with rotation and
// reuse detection, and for the clients allowed to, the token exchange of
// RFC 8693 of a person's access token for Usher's API; the access tokens
// are broker tokens), Dynamic Client
// Registration (rate-limited per address) and revocation (RFC 7009, of
// refresh tokens). Clients come from registration, from Client ID
// Metadata Documents (broker/clientmeta), or from Usher's configuration
// ([ConfiguredClient], written by [Server.PutConfiguredClients]); they
// authenticate at the token and revocation endpoints with none (public),
// client_secret_basic, or private_key_jwt — a JWT signed by a key of the
// client's JWKS, RS256 or ES256, each jti used once across replicas
// (RFC 7523). What they do is audited
// (internal/audit), never with a secret, code or token: hashes or a jti.
//
//   - Errors: [Error] and [WriteError] give every OAuth endpoint the RFC 6749
//     §5.2 error body, never the API's error shape, and [Server.RefuseBody]
//     the bodies the router refuses before an endpoint runs. An
//     authorization request refused without a redirect is told in that
//     body, or to a browser (Accept: text/html) in a page saying the same.
//   - Discovery: [NewMetadata] and [MetadataHandler] publish the RFC 8414
//     document at the well-known paths; the endpoint paths are the Path
//     constants.
//   - PKCE (RFC 7636): [CheckChallenge] at the authorization endpoint and
//     [VerifyPKCE] at the token endpoint, S256 only.
//   - Redirect URIs: [CheckRedirectURI] when a client is registered and
//     [MatchRedirect] when it asks for a code (exact match; RFC 8252 §7.3's
//     any-port rule for native clients' loopback IP literals).
//   - Dynamic Client Registration (RFC 7591): [ParseRegistration],
//     [Registration.Response], [NewClientID], [NewSecret], [HashSecret] and
//     [CheckSecret].
//   - Housekeeping: a [Sweeper] deletes the codes and refresh tokens that
//     ended longer ago than the refresh idle lifetime, which reuse
//     detection needs, and the expired client assertions.
//   - Consent: [RenderConsent] draws the page a user approves or denies a
//     client on, with the headers that keep it from being framed.
//   - Authorization requests: [ParseAuthorize], [CheckResource] (RFC 8707,
//     also for the token endpoint) and the redirects of [AuthorizeRequest],
//     which carry iss (RFC 9207).
//
// Everything a client sends is hostile until checked: each parser bounds the
// size of what it reads, refuses repeated parameters and duplicate JSON
// members, and says in its error what an OAuth client may be told and no
// more.
package oauth

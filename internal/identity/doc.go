// Package identity owns the authentication of callers of Usher's API: it
// verifies their OIDC access tokens (Microsoft Entra ID or any OIDC issuer),
// turns them into a [Principal] keyed by issuer, tenant and object id, and
// provides the HTTP middleware that puts that principal in the request context.
//
// Tokens are accepted only from the Authorization header, only when signed
// with RS256 by a key of the issuer's published key set, issued by the
// configured issuer, unexpired, addressed to one of the API's audiences, from
// an allowed tenant and carrying the required delegated scopes. Tokens an
// application obtained for itself (app-only, client credentials) are
// refused: only a signed-in person calls the API.
package identity

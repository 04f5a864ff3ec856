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
// refused: only a signed-in person calls the API. So are tokens that do not
// list the person's groups because there are too many (Entra's groups
// overage): a person must never pass as a member of no group.
// [Verifier.Admits] applies the same issuer and tenant allow-list to a
// person verified earlier, for what carries on their access (an MCP
// client's refresh tokens), and [Verifier.AdmitsTenant] the allow-list to
// the tenant of a token Usher minted (its broker tokens).
package identity

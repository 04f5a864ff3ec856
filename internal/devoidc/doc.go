// Package devoidc owns the built-in development OpenID Connect provider that
// the embedded default runs when no external issuer is configured. It is a
// real issuer — discovery, JWKS, authorization code flow with PKCE (S256
// only), RS256-signed access and ID tokens — so the API verifies its tokens
// through the same OIDC code path as Microsoft Entra ID's: there is no
// authentication bypass.
//
// Anyone who can reach its sign-in page can sign in as any user name, with
// any groups (which the access token carries as Entra's do, so that a
// policy's approver groups and the reviewers' groups can be tried): it is
// for development on one machine, never for production. Authorization
// codes live in memory, so it serves a single process.
package devoidc

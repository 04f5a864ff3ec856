// Package web owns the Sessions UI: the pages and assets served at "/"
// (hand-written HTML, CSS and JavaScript modules, embedded in the binary),
// and the browser sign-in behind them — OpenID Connect authorization code
// with PKCE done by the server (a backend for frontend), server-side
// sessions behind a sealed session cookie, and the CSRF protection of
// every state-changing request made with that cookie.
//
// A signed-in browser is the same principal the API sees with a bearer
// token: the access token from the sign-in is verified by the API's own
// verifier, and the session carries the principal it yields. The cookie is
// sealed with AES-256-GCM under a key derived from the installation's
// secret, so any replica can read it; it carries a random session id whose
// hash keys the session's row in the store, so that signing out ends the
// session on every replica, and the sweep that deletes ended sessions
// belongs here too.
package web

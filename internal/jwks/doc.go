// Package jwks owns Usher's one cache of signature key sets: the JSON Web
// Key Sets fetched over HTTP by the broker's remote verifiers and by the
// OIDC verifier of API callers, and the broker's keyring read from the
// database. Every set is kept by a [Cache] with the same rules: a set is
// used until it expires (its loader's maximum age, or the HTTP response's
// Cache-Control max-age when shorter); a kid not in the set reloads it at
// most once per minimum interval, however many tokens ask; one load runs at
// a time, no lock is held while it runs, and each waiter stops waiting when
// its own context ends; a failed reload keeps the set already loaded.
//
// [Remote] fetches a JWKS document and keeps only the keys fit to verify
// RS256 signatures.
package jwks

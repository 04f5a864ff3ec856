// Package seal owns Usher's sealed values: a value with its expiry,
// encrypted and authenticated with AES-256-GCM under a key derived from a
// secret the replicas share, so that a browser or a client can carry state
// that no one can read, change or reuse for another purpose. The web
// sign-in seals its cookies with it, the OAuth server its pending
// authorization requests.
package seal

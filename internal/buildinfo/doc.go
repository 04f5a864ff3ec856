// Package buildinfo owns what a binary says of its own build: the release
// version (set at link time by `make build`, else the module's version),
// the commit and its time (stamped by the go command from the checkout),
// whether the tree had uncommitted changes, and the Go version.
package buildinfo

// Package policy owns the approval policy: loading, validating and evaluating
// it, tool-definition pinning (the tool lock) and explanations of decisions.
// It is pure: it performs no I/O beyond reading its own files.
//
// The package is not built yet; this file reserves its place in the
// architecture.
package policy

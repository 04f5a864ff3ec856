// Package child owns the processes a benchmark starts beside itself —
// `usher serve`, the echo upstream, the transparent proxy — so that what
// is measured runs as users run it, each in a process of its own: how one
// is started and known to be ready, how it is stopped, and the machine's
// load around it.
package child

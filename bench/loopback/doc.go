// Package loopback owns how a benchmark's helper process (the echo
// upstream, the transparent proxy) is served over HTTP on a loopback
// address, as bench/mcpbench starts them: it prints the endpoint on the
// first line of standard output, and on SIGINT or SIGTERM shuts down
// gracefully.
package loopback

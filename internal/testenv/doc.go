// Package testenv owns what Usher's tests take from the machine they run
// on, and what happens when it is missing: the PostgreSQL server
// (TEST_DATABASE_URL), Debian's Chromium, the Node.js tools, and the
// programs that process-level tests run as processes of their own
// (`usher serve`, the benchmark's echo upstream, proxy and relay, the MCP
// fixtures), each built once — with what running them needs: a free
// loopback address, a buffer for their output, and a bounded wait.
//
// A test that needs something missing is skipped with a message that is
// the same wherever it is needed, so that a run's skips are told as one
// line per group (`make test` prints them) — except under CI (the CI
// variable set), where it fails: CI provides everything and never skips.
//
// `make test` builds the programs before the tests start, into the
// directory named by USHER_TEST_BIN, and every test package runs those
// same files. Without USHER_TEST_BIN, a test process builds what its tests
// ask for, on first use, into a directory of its own that Remove deletes.
package testenv

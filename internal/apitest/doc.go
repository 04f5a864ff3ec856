// Package apitest owns the client side of Usher's JSON APIs for the tests
// that drive a running server over HTTP: one request with its body decoded,
// an error body's code, a run read back and its whole event log paged
// through. It speaks to a real server; it fails the test on what no API
// answer should be (a transport error, a body that is not JSON).
package apitest

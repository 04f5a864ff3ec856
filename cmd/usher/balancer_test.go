package main

import (
	"net/http"
	"testing"

	"github.com/usherhq/usher/internal/testenv"
)

// TestBalancerStreamAnsweredBeforeBodyEnd: the tests' balancer passes a
// replica's response stream begun before its transport read past the
// request body's end on to its end, the order that cut a stateful call's
// stream now and then (see testenv.StreamBeforeBodyEnd).
func TestBalancerStreamAnsweredBeforeBodyEnd(t *testing.T) {
	t.Parallel()
	testenv.StreamBeforeBodyEnd(t, func(replica string, wrap func(http.RoundTripper) http.RoundTripper) string {
		lb := newBalancer(t)
		lb.set(replica)
		lb.proxy.Transport = wrap(http.DefaultTransport)
		return lb.url + "/mcp"
	})
}

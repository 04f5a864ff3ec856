package main

import (
	"net/http"
	"testing"

	"github.com/usherhq/usher/internal/testenv"
)

// TestReplicaBalancerStreamAnsweredBeforeBodyEnd: the -replicas balancer
// passes a replica's response stream begun before its transport read past
// the request body's end on to its end, the order that cut a stream in
// the warm-up now and then (see testenv.StreamBeforeBodyEnd).
func TestReplicaBalancerStreamAnsweredBeforeBodyEnd(t *testing.T) {
	testenv.StreamBeforeBodyEnd(t, func(replica string, wrap func(http.RoundTripper) http.RoundTripper) string {
		lb, err := newReplicaBalancer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lb.close() })
		if err := lb.route(replica, replica); err != nil {
			t.Fatal(err)
		}
		lb.one.Transport = wrap(lb.one.Transport)
		return lb.url + "/one/mcp"
	})
}

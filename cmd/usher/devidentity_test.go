package main

import (
	"net"
	"strings"
	"testing"
)

// TestSelfURL checks where the process calls itself: loopback on its port
// when it listens on every address, as in a container (server.addr
// 0.0.0.0:8080), where the listener's own address is no URL to call.
func TestSelfURL(t *testing.T) {
	for _, tc := range []struct {
		addr *net.TCPAddr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, "http://[::1]:8080"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 0, 7), Port: 8080}, "http://10.1.0.7:8080"},
	} {
		if got := selfURL(tc.addr); got != tc.want {
			t.Errorf("selfURL(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// TestCheckDevIdentity checks that the development sign-in that cannot run
// says why in the configuration's terms.
func TestCheckDevIdentity(t *testing.T) {
	for _, tc := range []struct {
		publicURL, selfURL, want string
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{"https://usher.example.com", "http://127.0.0.1:8080", ""},
		{"http://0.0.0.0:8080", "http://127.0.0.1:8080", "is its own issuer at the public URL, http://0.0.0.0:8080, which must be https or http on a loopback host: set server.public_url"},
		{"http://usher.example.com", "http://127.0.0.1:8080", "must be https or http on a loopback host"},
		{"http://127.0.0.1:8080", "http://10.1.0.7:8080", "calls this process at http://10.1.0.7:8080, which is not loopback"},
	} {
		err := checkDevIdentity(tc.publicURL, tc.selfURL)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkDevIdentity(%s, %s) = %v, want %q", tc.publicURL, tc.selfURL, err, tc.want)
		}
	}
}

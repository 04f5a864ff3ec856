package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClientAddr(t *testing.T) {
	xff, err := NewTrustedProxies([]string{"10.0.0.0/8", "192.0.2.7", "fd00::/8"}, "x-forwarded-for")
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := NewTrustedProxies([]string{"10.0.0.0/8", "fd00::/8"}, HeaderForwarded)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		proxies *TrustedProxies
		peer    string
		headers map[string][]string
		want    string
	}{
		// An untrusted peer is the client, whatever it writes.
		{"no proxies trusted, spoofed header", nil, "203.0.113.5:4000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}, "Forwarded": {"for=198.51.100.1"}}, "203.0.113.5"},
		{"untrusted peer, spoofed X-Forwarded-For", xff, "203.0.113.5:4000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, 10.0.0.1"}}, "203.0.113.5"},
		{"untrusted peer, spoofed Forwarded", fwd, "203.0.113.5:4000",
			map[string][]string{"Forwarded": {"for=198.51.100.1"}}, "203.0.113.5"},
		{"untrusted IPv6 peer", xff, "[2001:db8::5]:4000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "2001:db8::5"},

		// A trusted peer: the rightmost untrusted entry.
		{"one trusted proxy", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"a chain of trusted proxies", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.9, 192.0.2.7, 10.9.9.9"}}, "203.0.113.9"},
		{"the client's own leftmost entries are passed over", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"10.0.0.1, 1.1.1.1, 203.0.113.9"}}, "203.0.113.9"},
		{"several header lines are one list", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1", "203.0.113.9, 10.2.2.2"}}, "203.0.113.9"},
		{"IPv4 with a port", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.9:61000"}}, "203.0.113.9"},
		{"bracketed IPv6 with a port", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"[2001:db8::9]:61000"}}, "2001:db8::9"},
		{"bare IPv6", xff, "[fd00::1]:5000",
			map[string][]string{"X-Forwarded-For": {"2001:db8::9"}}, "2001:db8::9"},
		{"IPv4-mapped IPv6 peer", xff, "[::ffff:10.1.2.3]:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"every entry trusted: the leftmost", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"10.0.0.8, 10.0.0.9"}}, "10.0.0.8"},
		{"trusted peer without the header", xff, "10.1.2.3:5000", nil, "10.1.2.3"},
		{"the other header is not read", xff, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1"}}, "10.1.2.3"},
		{"Forwarded", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {`for=198.51.100.1, for=203.0.113.9;proto=https;by=10.1.2.3`}}, "203.0.113.9"},
		{"Forwarded, quoted IPv6 and a trusted hop", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {`for="[2001:db8:cafe::17]:4711", For=10.4.4.4`}}, "2001:db8:cafe::17"},
		{"Forwarded, quoted separators", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {`for=198.51.100.1, proto=https;host="a,b;c";for="203.0.113.9:1"`}}, "203.0.113.9"},
		{"Forwarded: X-Forwarded-For is not read", fwd, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "10.1.2.3"},

		// Malformed entries: the last trusted hop, never what lies left of them.
		{"garbage", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, not-an-address"}}, "10.1.2.3"},
		{"garbage behind a trusted hop", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, garbage, 10.5.5.5"}}, "10.5.5.5"},
		{"empty entry", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1,,"}}, "10.1.2.3"},
		{"empty header", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {""}}, "10.1.2.3"},
		{"unknown", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, unknown"}}, "10.1.2.3"},
		{"a zone", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, fe80::1%eth0"}}, "10.1.2.3"},
		{"a bad port", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.9:http"}}, "10.1.2.3"},
		{"IPv6 with a port, unbracketed", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1, for=2001:db8::1"}}, "10.1.2.3"},
		{"Forwarded unknown", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1, for=unknown"}}, "10.1.2.3"},
		{"Forwarded obfuscated", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1, for=_hidden"}}, "10.1.2.3"},
		{"Forwarded without for", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1, proto=https"}}, "10.1.2.3"},
		{"Forwarded for twice", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {"for=198.51.100.1;for=203.0.113.9"}}, "10.1.2.3"},
		{"Forwarded unterminated quote", fwd, "10.1.2.3:5000",
			map[string][]string{"Forwarded": {`for=198.51.100.1, for="203.0.113.9`}}, "10.1.2.3"},
		{"a chain longer than 32", xff, "10.1.2.3:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, " + strings.Repeat("10.0.0.1, ", 40) + "10.0.0.2"}}, "10.0.0.1"},

		// A peer that is no IP address.
		{"unix socket", xff, "@", map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/oauth/register", nil)
			r.RemoteAddr = tc.peer
			for k, v := range tc.headers {
				r.Header[k] = v
			}
			if got := tc.proxies.ClientAddr(r); got != tc.want {
				t.Errorf("ClientAddr = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewTrustedProxies(t *testing.T) {
	if p, err := NewTrustedProxies(nil, HeaderXForwardedFor); p != nil || err != nil {
		t.Errorf("no proxies = %v, %v; want nil, nil", p, err)
	}
	for _, tc := range []struct {
		cidrs  []string
		header string
	}{
		{[]string{"0.0.0.0/0"}, HeaderXForwardedFor},
		{[]string{"::/0"}, HeaderXForwardedFor},
		{[]string{"10.0.0.0/33"}, HeaderXForwardedFor},
		{[]string{"proxy.internal"}, HeaderXForwardedFor},
		{[]string{"fe80::1%eth0"}, HeaderXForwardedFor},
		{[]string{"10.0.0.0/8"}, "X-Real-IP"},
		{[]string{"10.0.0.0/8"}, ""},
	} {
		if _, err := NewTrustedProxies(tc.cidrs, tc.header); err == nil {
			t.Errorf("NewTrustedProxies(%q, %q) accepted", tc.cidrs, tc.header)
		}
	}
	p, err := NewTrustedProxies([]string{" 10.1.0.0/16 ", "2001:db8::1"}, "forwarded")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8::1]:1"
	r.Header.Set("Forwarded", "for=203.0.113.1")
	if got := p.ClientAddr(r); got != "203.0.113.1" {
		t.Errorf("single IPv6 address as a proxy: %q", got)
	}
}

package clientmeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// Resolver looks a host name up, as (*net.Resolver).LookupNetIP does: the
// method value net.DefaultResolver.LookupNetIP is one. network is "ip".
type Resolver func(ctx context.Context, network, host string) ([]netip.Addr, error)

// refusedPrefixes are ranges no metadata document is served from that the
// netip predicates do not already cover: shared address space (CGNAT),
// "this network", IETF protocol assignments, benchmarking, documentation
// and reserved space, and the IPv6 forms that embed an IPv4 address or
// reach one through a translator (so that ::ffff:0:a00:1, 64:ff9b::a00:1 or
// 2002:a00:1:: cannot stand for 10.0.0.1).
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (and ::, ::1)
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// addressError is a dial refused by the address policy. It names the
// address, for logs; clients are told only that the address is forbidden.
type addressError struct{ addr netip.Addr }

func (e *addressError) Error() string {
	return fmt.Sprintf("address %s is not a public unicast address", e.addr)
}

// resolveError is a failed name lookup.
type resolveError struct{ err error }

func (e *resolveError) Error() string { return "resolving: " + e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// checkAddr applies the address policy: nil when a is a public unicast
// address, or a loopback one and loopback is allowed. loopbackOnly (plain
// http) accepts loopback addresses only.
func checkAddr(a netip.Addr, allowLoopback, loopbackOnly bool) error {
	orig := a
	a = a.Unmap().WithZone("")
	refused := &addressError{orig}
	if !a.IsValid() {
		return refused
	}
	if a.IsLoopback() {
		if allowLoopback {
			return nil
		}
		return refused
	}
	if loopbackOnly {
		return refused
	}
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
		return refused
	}
	for _, p := range refusedPrefixes {
		if p.Contains(a) {
			return refused
		}
	}
	return nil
}

// dialer dials a metadata document's host: it resolves the name itself,
// drops the addresses the policy refuses, and dials the others in turn,
// each by address, so that what is dialled is what was checked; the
// net.Dialer's Control function checks the socket's remote address once
// more, just before connect.
type dialer struct {
	resolve       Resolver
	allowLoopback bool
	rootCAs       *x509.CertPool
}

// netDialer returns the net.Dialer for one policy.
func (d *dialer) netDialer(loopbackOnly bool) *net.Dialer {
	return &net.Dialer{
		Timeout: 5 * time.Second, // the request context's deadline is shorter still
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dialling %q: %w", address, err)
			}
			return checkAddr(ap.Addr(), d.allowLoopback, loopbackOnly)
		},
	}
}

// dial connects to address (host:port) under the policy.
func (d *dialer) dial(ctx context.Context, network, address string, loopbackOnly bool) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portText, err)
	}
	addrs, err := d.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	nd := d.netDialer(loopbackOnly)
	// refused are the policy's refusals, failed the dials of the allowed
	// addresses: when an allowed address was dialled, its failure is the
	// error, since the address was not the problem.
	var refused, failed []error
	for _, a := range addrs {
		if err := checkAddr(a, d.allowLoopback, loopbackOnly); err != nil {
			refused = append(refused, err)
			continue
		}
		conn, err := nd.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		failed = append(failed, err)
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case len(failed) > 0:
		return nil, errors.Join(failed...)
	case len(refused) > 0:
		return nil, errors.Join(refused...)
	default:
		return nil, &resolveError{fmt.Errorf("%s has no address", host)}
	}
}

// lookup returns host's addresses: itself when it is an IP literal.
func (d *dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := d.resolve(ctx, "ip", host)
	if err != nil {
		return nil, &resolveError{err}
	}
	return addrs, nil
}

// dialHTTP dials for plain http, which is only ever to loopback.
func (d *dialer) dialHTTP(ctx context.Context, network, address string) (net.Conn, error) {
	return d.dial(ctx, network, address, true)
}

// dialTLS dials for https and completes the TLS handshake (HTTP/1.1 only).
// It is the transport's DialTLSContext, so that https and http dials, which
// allow different addresses, go through different functions.
func (d *dialer) dialTLS(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := d.dial(ctx, network, address, false)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(address)
	tc := tls.Client(conn, &tls.Config{
		ServerName: host,
		RootCAs:    d.rootCAs,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

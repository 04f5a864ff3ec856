package httpx

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The forwarding headers a TrustedProxies may read.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded" // RFC 7239
)

// maxForwardingHops bounds how many entries of a forwarding header are
// read, from the right: no real chain of proxies is longer.
const maxForwardingHops = 32

// TrustedProxies finds the address of the client that sent a request when
// Usher runs behind reverse proxies: the peer of the connection, unless
// that peer is one of the proxies, in which case the forwarding header
// they write says who connected to them. Nothing else in a request says
// where it came from: a client writes what it wants into the headers, and
// only the entries a trusted proxy appended can be believed.
//
// A nil *TrustedProxies trusts no proxy: every request's address is its
// connection's peer.
type TrustedProxies struct {
	nets   []netip.Prefix
	header string
}

// NewTrustedProxies returns the proxies of cidrs — prefixes such as
// 10.0.0.0/8 or fd00::/8, or single addresses — whose forwarding header is
// header: HeaderXForwardedFor or HeaderForwarded, the one those proxies
// write (reading the other would let a client choose its address, since a
// proxy passes on a header it does not write). A prefix of length 0 is
// refused: trusting every address makes the header the client's to
// choose. No cidrs is nil: no proxy is trusted.
func NewTrustedProxies(cidrs []string, header string) (*TrustedProxies, error) {
	switch {
	case strings.EqualFold(header, HeaderXForwardedFor):
		header = HeaderXForwardedFor
	case strings.EqualFold(header, HeaderForwarded):
		header = HeaderForwarded
	default:
		return nil, fmt.Errorf("the forwarding header must be %s or %s, got %q", HeaderXForwardedFor, HeaderForwarded, header)
	}
	var errs []error
	var nets []netip.Prefix
	for _, c := range cidrs {
		p, err := parsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%q is not an address or a CIDR prefix", c))
		case p.Bits() == 0:
			errs = append(errs, fmt.Errorf("%q trusts every address: name the proxies' own addresses", c))
		default:
			nets = append(nets, p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(nets) == 0 {
		return nil, nil
	}
	return &TrustedProxies{nets: nets, header: header}, nil
}

// parsePrefix reads a CIDR prefix, or a single address as the prefix of
// it alone.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, errors.New("an IPv4-mapped prefix")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("not an address")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// trusted reports whether a is one of the proxies.
func (t *TrustedProxies) trusted(a netip.Addr) bool {
	for _, p := range t.nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientAddr returns the address of the client that sent r, as text (an
// IP address without port or zone, IPv4 in dotted form):
//
//   - the connection's peer (r.RemoteAddr), when it is not a trusted
//     proxy, whatever the headers say;
//   - otherwise the rightmost address of the forwarding header that is not
//     a trusted proxy: each proxy appends the address it was connected
//     from, so the entries right of the first untrusted one were written
//     by trusted proxies, and everything left of it by the client;
//   - when that header is absent, the peer; when the entry after the
//     last trusted proxy cannot be read (empty, not an IP address, with a
//     zone or a bad port, RFC 7239's "unknown" or an obfuscated
//     identifier) or the chain is longer than 32 entries, the last trusted
//     proxy's address, which the client cannot choose; when every entry is
//     a trusted proxy, the leftmost.
//
// A peer address that is not an IP address (a Unix socket) is returned as
// it is.
func (t *TrustedProxies) ClientAddr(r *http.Request) string {
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return strings.TrimSpace(r.RemoteAddr)
	}
	if t == nil || !t.trusted(peer) {
		return peer.String()
	}
	var hops []string
	switch t.header {
	case HeaderForwarded:
		hops = forwardedFor(r.Header.Values(HeaderForwarded))
	default:
		hops = listEntries(r.Header.Values(HeaderXForwardedFor))
	}
	last := peer // the nearest trusted proxy so far
	for i, n := len(hops)-1, 0; i >= 0; i, n = i-1, n+1 {
		if n == maxForwardingHops {
			return last.String()
		}
		a, ok := hopAddr(hops[i], t.header == HeaderForwarded)
		if !ok {
			return last.String()
		}
		if !t.trusted(a) {
			return a.String()
		}
		last = a
	}
	return last.String()
}

// peerAddr reads r.RemoteAddr: host:port, or a bare address.
func peerAddr(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(strings.TrimSpace(host))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// listEntries splits the lines of a comma-separated header into its
// entries, in order: several lines of one header are one list (RFC 9110
// §5.3).
func listEntries(lines []string) []string {
	var out []string
	for _, l := range lines {
		for e := range strings.SplitSeq(l, ",") {
			out = append(out, strings.TrimSpace(e))
		}
	}
	return out
}

// hopAddr reads one entry of a forwarding header: an IP address, with or
// without a port (IPv6 with a port in brackets; RFC 7239 brackets IPv6
// always). Zones are refused: no proxy forwards a link-local hop.
func hopAddr(s string, forwarded bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	switch {
	case strings.HasPrefix(s, "["):
		host, rest, found := strings.Cut(s[1:], "]")
		if !found || (rest != "" && !validPort(rest)) {
			return netip.Addr{}, false
		}
		a, err = netip.ParseAddr(host)
		if err == nil && !a.Is6() {
			return netip.Addr{}, false
		}
	case strings.Count(s, ":") == 1:
		host, port, _ := strings.Cut(s, ":")
		if !validPort(":" + port) {
			return netip.Addr{}, false
		}
		a, err = netip.ParseAddr(host)
		if err == nil && !a.Is4() {
			return netip.Addr{}, false
		}
	default:
		if forwarded && strings.Contains(s, ":") {
			return netip.Addr{}, false // RFC 7239 §6: an IPv6 address is bracketed
		}
		a, err = netip.ParseAddr(s)
	}
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// validPort reports whether s is ":" and 1 to 5 digits.
func validPort(s string) bool {
	p, ok := strings.CutPrefix(s, ":")
	if !ok || len(p) == 0 || len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// forwardedFor reads the for= parameter of each element of RFC 7239
// Forwarded header lines, in order. An element without one, or with one
// that is not well-formed, is "": an entry that cannot be read.
func forwardedFor(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, elem := range splitQuoted(l, ',') {
			v := ""
			for _, pair := range splitQuoted(elem, ';') {
				name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(name, "for") {
					continue
				}
				if v != "" {
					v = "" // for= twice: which one a proxy meant is unknown
					break
				}
				v = unquote(value)
				if v == "" {
					break
				}
			}
			out = append(out, v)
		}
	}
	return out
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote returns a token, or the content of a quoted-string without its
// escapes; "" for one that is not well-formed.
func unquote(v string) string {
	if !strings.HasPrefix(v, `"`) {
		if strings.ContainsAny(v, "\" \t\\") {
			return ""
		}
		return v
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return ""
	}
	var b strings.Builder
	inner := v[1 : len(v)-1]
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if c == '\\' {
			if i++; i == len(inner) {
				return ""
			}
			c = inner[i]
		} else if c == '"' {
			return ""
		}
		b.WriteByte(c)
	}
	return b.String()
}

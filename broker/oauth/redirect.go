package oauth

import (
	"net"
	"strconv"
	"strings"

	"github.com/usherhq/usher/broker/clientmeta"
)

// maxURILen bounds every URI a client sends: redirect URIs, client ids,
// resources.
const maxURILen = 2000

// CheckRedirectURI accepts a redirect URI a client registers, or one
// configured, under the one rule of every kind of client,
// [clientmeta.RedirectURIProblem] (a metadata document's redirect_uris are
// checked by it too): https with a host, http on a loopback host, or an
// app's private-use scheme with a path or an authority, dotted or not,
// unless a browser or the operating system acts on it itself. Anything
// else is refused with an invalid_redirect_uri *Error (RFC 7591 §3.2.2)
// that says why.
func CheckRedirectURI(uri string) error {
	if reason := clientmeta.RedirectURIProblem(uri); reason != "" {
		return newError(CodeInvalidRedirectURI, reason, false)
	}
	return nil
}

// isLoopbackName reports whether host (a URL's Hostname()) is localhost or
// a loopback IP literal.
func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MatchRedirect reports whether requested is one of the registered redirect
// URIs: an exact string match — no leniency for a trailing slash, case,
// percent-encoding or an extra query parameter.
//
// For a native client (one that redirects to the user's own machine), a
// registered loopback IP redirect, http://127.0.0.1[:port]/... or
// http://[::1][:port]/..., also matches the same URI with any port or none
// (RFC 8252 §7.3: the app listens on an ephemeral port). Everything but the
// port must still be identical. localhost does not get this rule: RFC 8252
// §8.3 recommends the IP literals, and the name may resolve elsewhere, so a
// localhost redirect matches only exactly (the clients that use it register
// the port they listen on).
func MatchRedirect(registered []string, requested string, native bool) bool {
	for _, r := range registered {
		if r == requested {
			return true
		}
	}
	if !native || clientmeta.RedirectURIProblem(requested) != "" {
		return false
	}
	reqHost, reqRest, ok := splitLoopback(requested)
	if !ok {
		return false
	}
	for _, r := range registered {
		if host, rest, ok := splitLoopback(r); ok && host == reqHost && rest == reqRest {
			return true
		}
	}
	return false
}

// splitLoopback splits a loopback IP redirect URI, exactly as written, into
// its scheme and host ("http://127.0.0.1" or "http://[::1]") and what
// follows the port (a path and query, or ""), dropping the port; ok is
// false for any other URI or a malformed port.
func splitLoopback(uri string) (host, rest string, ok bool) {
	for _, prefix := range [...]string{"http://127.0.0.1", "http://[::1]"} {
		after, found := strings.CutPrefix(uri, prefix)
		if !found {
			continue
		}
		if port, ok := strings.CutPrefix(after, ":"); ok {
			n := 0
			for n < len(port) && port[n] >= '0' && port[n] <= '9' {
				n++
			}
			if v, err := strconv.Atoi(port[:n]); n == 0 || n > 5 || err != nil || v < 1 || v > 65535 {
				return "", "", false
			}
			after = port[n:]
		}
		if after != "" && after[0] != '/' && after[0] != '?' {
			return "", "", false
		}
		return prefix, after, true
	}
	return "", "", false
}

package oauth

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// maxURILen bounds every URI a client sends: redirect URIs, client ids,
// resources.
const maxURILen = 2000

// CheckRedirectURI accepts a redirect URI a client registers (RFC 6749
// §3.1.2, RFC 8252 §7, OAuth 2.1 §2.3.1): an absolute URI of at most 2,000
// printable ASCII characters, without fragment or user info, that is
//
//   - https with a host;
//   - http on a loopback host — 127.0.0.0/8, [::1] or localhost — for native
//     apps' loopback redirects (RFC 8252 §7.3; localhost is accepted here
//     but gets no port leniency in [MatchRedirect]);
//   - or a private-use scheme (RFC 8252 §7.1), with a path or an
//     authority: com.example.app:/callback, and also a scheme that is not
//     a reversed domain name, such as Cursor's
//     cursor://anysphere.cursor-mcp/oauth/callback — unless it is a scheme
//     the browser or the operating system acts on itself (see
//     [privateUseRefused]).
//
// Everything else — javascript:, data:, file:, http to any other host,
// one-letter schemes (a Windows drive) — is refused with an
// invalid_redirect_uri *Error (RFC 7591 §3.2.2).
//
// RFC 8252 asks for a reversed domain name so that two apps are unlikely
// to claim one scheme; nothing makes an operating system give a dotted
// scheme to its owner either. What protects a code sent to a private-use
// scheme from another app that claims it is PKCE, which Usher requires of
// every client: the app that receives the code cannot redeem it without
// the verifier only the client that asked holds.
func CheckRedirectURI(uri string) error {
	if reason := redirectURIProblem(uri); reason != "" {
		return newError(CodeInvalidRedirectURI, reason, false)
	}
	return nil
}

// redirectURIProblem says what is wrong with uri as a redirect URI, or "".
func redirectURIProblem(uri string) string {
	if uri == "" {
		return "A redirect URI is empty."
	}
	if len(uri) > maxURILen {
		return "A redirect URI is too long."
	}
	if !uriChars(uri) {
		return "A redirect URI has characters a URI cannot have."
	}
	if strings.Contains(uri, "#") {
		return "A redirect URI must not have a fragment."
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return "A redirect URI must be an absolute URI."
	}
	if u.User != nil {
		return "A redirect URI must not have user info."
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
		if u.Host == "" || u.Hostname() == "" {
			return "An https redirect URI must have a host."
		}
		return ""
	case scheme == "http":
		if !isLoopbackName(u.Hostname()) {
			return "An http redirect URI must be on a loopback host (127.0.0.1, [::1] or localhost); use https."
		}
		return ""
	case privateUseRefused(scheme):
		return "A redirect URI must be https, http on a loopback host, or an app's private-use scheme such as com.example.app:/callback."
	default:
		if u.Opaque != "" || u.Path == "" && u.Host == "" {
			return "A private-use scheme redirect URI must have a path, as in com.example.app:/callback."
		}
		return ""
	}
}

// refusedSchemes are the schemes, besides http and https, that a browser
// or an operating system handles itself rather than hand to the app that
// registered them: running script (javascript, vbscript), content made of
// the URI (data, blob, view-source), local files and browser internals
// (file, filesystem, about, chrome…, resource, jar), other protocols
// (ws, ftp, mailto…), Android intents (which start any app, with
// extras), and Windows' own handlers (ms-…, search-ms, shell), some of
// which have run programs.
var refusedSchemes = map[string]bool{
	"javascript": true, "vbscript": true, "livescript": true,
	"data": true, "blob": true, "view-source": true,
	"file": true, "filesystem": true, "about": true, "resource": true, "jar": true,
	"chrome": true, "chrome-extension": true, "chrome-untrusted": true, "devtools": true,
	"edge": true, "opera": true, "brave": true, "moz-extension": true, "safari-extension": true,
	"ws": true, "wss": true, "ftp": true, "sftp": true, "ssh": true, "telnet": true, "gopher": true,
	"mailto": true, "tel": true, "sms": true, "news": true, "nntp": true, "irc": true,
	"intent": true, "android-app": true, "content": true,
	"search-ms": true, "search": true, "shell": true,
}

// privateUseRefused reports whether scheme (lower-case, as url.Parse
// accepts one: RFC 3986 §3.1) may not be a private-use redirect scheme: a
// refused scheme, a Windows handler (ms-…), or one letter (C:/Windows/…
// is a path).
func privateUseRefused(scheme string) bool {
	return len(scheme) < 2 || refusedSchemes[scheme] || strings.HasPrefix(scheme, "ms-")
}

// uriChars reports whether s has only the characters RFC 3986 allows in a
// URI (printable ASCII without space, '"', '<', '>', '\', '^', '`', '{',
// '|', '}'), so that no control, space or Unicode look-alike passes.
func uriChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}", c) >= 0 {
			return false
		}
	}
	return true
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
	if !native || redirectURIProblem(requested) != "" {
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

package clientmeta

import (
	"net/url"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
)

// MaxRedirectURILen bounds a redirect URI, in bytes.
const MaxRedirectURILen = 2000

// RedirectURIProblem says what is wrong with uri as a redirect URI of a
// client of Usher's authorization server, as a sentence fit for an OAuth
// error_description, or "" when it is acceptable. It is the one rule for
// every kind of client: a metadata document's redirect_uris (here), a
// registration's and a configured client's (oauth.CheckRedirectURI), and
// the redirect_uri of an authorization request; it lives in this package
// because broker/oauth imports it. An acceptable redirect URI (RFC 6749
// §3.1.2, RFC 8252 §7, OAuth 2.1 §2.3.1) is an absolute URI of at most
// MaxRedirectURILen printable ASCII characters, without fragment or user
// info, that is
//
//   - https with a host;
//   - http on a loopback host — 127.0.0.0/8, [::1] or localhost — for native
//     apps' loopback redirects (RFC 8252 §7.3);
//   - or a private-use scheme (RFC 8252 §7.1), with a path or an
//     authority: com.example.app:/callback, and also a scheme that is not
//     a reversed domain name, such as Cursor's
//     cursor://anysphere.cursor-mcp/oauth/callback — unless it is a scheme
//     the browser or the operating system acts on itself (see
//     privateUseRefused).
//
// Everything else — javascript:, data:, file:, http to any other host,
// one-letter schemes (a Windows drive) — is refused.
//
// RFC 8252 asks for a reversed domain name so that two apps are unlikely
// to claim one scheme; nothing makes an operating system give a dotted
// scheme to its owner either. What protects a code sent to a private-use
// scheme from another app that claims it is PKCE, which Usher requires of
// every client: the app that receives the code cannot redeem it without
// the verifier only the client that asked holds.
func RedirectURIProblem(uri string) string {
	if uri == "" {
		return "A redirect URI is empty."
	}
	if len(uri) > MaxRedirectURILen {
		return "A redirect URI is too long."
	}
	if !httpx.URIChars(uri) {
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
		if !httpx.IsLoopbackHost(u.Hostname()) {
			return "An http redirect URI must be on a loopback host (an IP address of 127.0.0.0/8, [::1], or localhost); use https."
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
// scheme the browser or the operating system handles itself, a Windows
// handler (ms-…), or one letter (C:/Windows/… is a path).
func privateUseRefused(scheme string) bool {
	return len(scheme) < 2 || refusedSchemes[scheme] || strings.HasPrefix(scheme, "ms-")
}

package clientmeta

import (
	"net/url"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
)

// maxClientIDLen bounds a client_id URL: it is stored and shown to users,
// and no real metadata URL comes near it.
const maxClientIDLen = 2048

// checkClientID reports whether raw is an acceptable Client ID Metadata
// Document URL, without fetching it: https (or http to a loopback host when
// allowHTTP, the Fetcher's AllowLoopbackHTTP), with a host and a path,
// without fragment, user info or dot segments
// (draft-ietf-oauth-client-id-metadata-document §3), printable ASCII only.
// A query is allowed (the draft discourages it, but permits it).
func checkClientID(raw string, allowHTTP bool) *Error {
	if raw == "" {
		return refuse("the client_id is empty")
	}
	if len(raw) > maxClientIDLen {
		return refuse("the client_id URL is too long")
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] <= ' ' || raw[i] >= 0x7f {
			return refuse("the client_id URL has a character a URL cannot hold")
		}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return refuse("the client_id is not a URL")
	case u.Opaque != "" || u.Host == "":
		return refuse("the client_id is not an absolute URL with a host")
	case u.User != nil:
		return refuse("the client_id URL must not have user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return refuse("the client_id URL must not have a fragment")
	case u.Path == "":
		return refuse("the client_id URL must have a path")
	case hasDotSegment(u.EscapedPath()):
		return refuse("the client_id URL must not have dot segments")
	case u.Hostname() == "":
		return refuse("the client_id is not an absolute URL with a host")
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && allowHTTP && httpx.IsLoopbackHost(u.Hostname()):
		return nil
	case u.Scheme == "http" && allowHTTP:
		return refuse("the client_id URL must be https (http only to a loopback host)")
	default:
		return refuse("the client_id URL must be https")
	}
}

// hasDotSegment reports whether an escaped path has a "." or ".." segment,
// also percent-encoded (%2e), since a server may decode it and resolve it.
func hasDotSegment(escaped string) bool {
	for seg := range strings.SplitSeq(escaped, "/") {
		s := strings.ToLower(seg)
		s = strings.ReplaceAll(s, "%2e", ".")
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

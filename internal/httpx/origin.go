package httpx

import (
	"net/http"
	"net/url"
	"strings"
)

// Origin returns the origin (RFC 6454) of an absolute http or https URL the
// way a browser sends it in the Origin header: scheme://host[:port],
// lower-cased, without the scheme's default port. It returns "" for
// anything else, such as the opaque origin "null", which then matches no
// origin.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || u.User != nil {
		return ""
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	switch {
	case scheme == "http" && port == "80", scheme == "https" && port == "443":
		port = ""
	case scheme != "http" && scheme != "https":
		return ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port
	}
	return scheme + "://" + host
}

// SameOrigin reports whether r comes from a page of origin (the origin of
// that URL), comparing scheme, host and port, so that neither a page on
// the plain-http twin of an https origin nor one on another port of the
// same host passes. A request without an Origin header is not from a
// browser page and passes, unless the browser says it is cross-site
// (Sec-Fetch-Site).
func SameOrigin(r *http.Request, origin string) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	got := r.Header.Values("Origin")
	switch len(got) {
	case 0:
		return true
	case 1:
		want := Origin(origin)
		return want != "" && Origin(got[0]) == want
	default:
		return false
	}
}

package httpx

import (
	"errors"
	"net/url"
	"strings"
)

// CheckEndpoint accepts the URL of a service Usher talks to or hands out:
// absolute https, or http on a loopback host, without user info, query or
// fragment.
func CheckEndpoint(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Host == "" || u.Opaque != "":
		return errors.New("must be an absolute URL")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("must not have user info, query or fragment")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && IsLoopbackHost(u.Hostname()):
		return nil
	default:
		return errors.New("must be https (http only on a loopback host)")
	}
}

// URIChars reports whether s has only the characters RFC 3986 allows in a
// URI (printable ASCII without space, '"', '<', '>', '\', '^', '`', '{',
// '|', '}'), so that no control, space or Unicode look-alike passes.
func URIChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}", c) >= 0 {
			return false
		}
	}
	return true
}

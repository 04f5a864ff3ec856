package httpx

import (
	"net"
	"strings"
)

// IsLoopbackHost reports whether host (a URL's Hostname(), without port or
// brackets) names the loopback interface: "localhost" in any case, or a
// loopback IP address. Plain http is acceptable only to such hosts.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Command passproxy is the transparent proxy of the out-of-process
// benchmark (bench/mcpbench): net/http/httputil's ReverseProxy in front of
// the echo upstream, passing every request and response through as they
// are — streams flushed at once — with no authentication, policy or audit.
// What it adds to a call is what one more loopback hop and an HTTP proxy
// cost on the machine: the floor under any gateway's figure, measured in
// the same run. It listens on loopback and prints its endpoint (the
// upstream's path on its own address) on the first line of its standard
// output.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"

	"github.com/usherhq/usher/bench/loopback"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	upstream := flag.String("upstream", "", "the upstream's endpoint URL (http://host:port/path)")
	flag.Parse()
	if err := run(*addr, *upstream); err != nil {
		fmt.Fprintln(os.Stderr, "passproxy:", err)
		os.Exit(1)
	}
}

func run(addr, upstream string) error {
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		return fmt.Errorf("-upstream must be an http:// URL, got %q", upstream)
	}
	// Concurrent calls keep their connections to the upstream, as Usher's
	// upstream client does: http.DefaultTransport keeps 2 idle per host,
	// and with 8 clients the proxy would dial the upstream again and again.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: target.Scheme, Host: target.Host})
			r.Out.Host = target.Host
		},
		Transport: tr,
		// Server-Sent Events go through as they are written.
		FlushInterval: -1,
	}
	return loopback.Serve(addr, proxy, func(a net.Addr) string { return fmt.Sprintf("proxy at http://%s%s", a, target.Path) })
}

package clientmeta_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/testenv"
)

// docServer is a real TLS server on loopback serving one handler, which a
// test may swap, and counting the requests it receives.
type docServer struct {
	*httptest.Server
	hits    atomic.Int64
	mu      sync.Mutex
	handler http.HandlerFunc
}

// newDocServer starts a TLS (or, when plain, an http) server answering with h.
func newDocServer(t *testing.T, plain bool, h http.HandlerFunc) *docServer {
	t.Helper()
	s := &docServer{handler: h}
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		h := s.handler
		s.mu.Unlock()
		h(w, r)
	})
	s.Server = httptest.NewUnstartedServer(serve)
	// The refused handshakes of the certificate test are expected.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if plain {
		s.Start()
	} else {
		s.StartTLS()
	}
	t.Cleanup(s.Close)
	return s
}

// set replaces the server's handler.
func (s *docServer) set(h http.HandlerFunc) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// port is the server's loopback port.
func (s *docServer) port() string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

// id is the client_id of path on host (a name the resolver maps) at the
// server's port, over https (or http for a plain server).
func (s *docServer) id(host, path string) string {
	scheme := "https"
	if strings.HasPrefix(s.URL, "http:") {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(host, s.port()) + path
}

// resolver is an Options.Resolver answering from a table; other names are
// not found.
func resolver(table map[string][]string) clientmeta.Resolver {
	return func(_ context.Context, network, host string) ([]netip.Addr, error) {
		if network != "ip" {
			return nil, errors.New("unexpected network " + network)
		}
		var out []netip.Addr
		for _, a := range table[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		if len(out) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return out, nil
	}
}

// newClock returns a clock for Options.Now, at a fixed time.
func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// fetcher returns a Fetcher trusting s's certificate, resolving example.com
// and localhost to 127.0.0.1, with loopback allowed (the servers are on
// loopback), changed by edit.
func fetcher(t *testing.T, s *docServer, edit func(*clientmeta.Options)) *clientmeta.Fetcher {
	t.Helper()
	opts := &clientmeta.Options{
		AllowLoopbackHTTP: true,
		Resolver: resolver(map[string][]string{
			"example.com": {"127.0.0.1"},
			"localhost":   {"127.0.0.1"},
		}),
		Timeout: 2 * time.Second,
	}
	if s != nil && s.Certificate() != nil {
		opts.RootCAs = x509.NewCertPool()
		opts.RootCAs.AddCert(s.Certificate())
	}
	if edit != nil {
		edit(opts)
	}
	f, err := clientmeta.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// document returns a valid document of clientID, changed by edit.
func document(clientID string, edit func(map[string]any)) map[string]any {
	d := map[string]any{
		"client_id":                  clientID,
		"client_name":                "Example MCP Client",
		"client_uri":                 "https://app.example.com",
		"logo_uri":                   "https://app.example.com/logo.png",
		"redirect_uris":              []string{"http://127.0.0.1:3000/callback", "http://localhost:3000/callback"},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	}
	if edit != nil {
		edit(d)
	}
	return d
}

// serveJSON returns a handler answering v as application/json with the
// given extra headers (name, value pairs).
func serveJSON(v any, headers ...string) http.HandlerFunc {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return serveBody("application/json", body, headers...)
}

// serveBody returns a handler answering body with contentType.
func serveBody(contentType string, body []byte, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.Write(body)
	}
}

// reason returns err's Reason, failing the test unless it is an *Error.
func reason(t *testing.T, err error) string {
	t.Helper()
	var e *clientmeta.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *clientmeta.Error", err, err)
	}
	return e.Reason
}

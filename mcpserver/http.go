package mcpserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
)

// Refusals of the HTTP checks that run before authentication.
var (
	errForbiddenHost   = httpx.Errorf(http.StatusForbidden, "forbidden_host", "The request's Host is not allowed.")
	errForbiddenOrigin = httpx.Errorf(http.StatusForbidden, "forbidden_origin", "The request's Origin is not allowed.")
	errBadBody         = httpx.Errorf(http.StatusBadRequest, "bad_request", "The request body could not be read.")
)

// batchRefusal is the JSON-RPC error answering a batch: the protocol
// versions this endpoint speaks have no batches (2025-06-18 removed them),
// and refusing them up front keeps one call per request everywhere after.
var batchRefusal = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Batch requests are not supported."}}` + "\n")

// checkHTTP applies the checks that need no credentials, cheapest first:
// the Host of a request that reached a loopback listener (against DNS
// rebinding: a web page must not reach a local Usher through a name it
// controls); the Origin of a browser request, which must be Usher's own or
// one of Options.AllowedOrigins (answering their CORS preflights); and the
// declared body size.
func (s *Server) checkHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r) {
			s.log.InfoContext(r.Context(), "mcpserver: Host refused", "host", r.Host)
			httpx.WriteError(w, r, s.log, errForbiddenHost)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !s.origins[httpx.Origin(origin)] {
				s.log.InfoContext(r.Context(), "mcpserver: Origin refused", "origin", origin)
				httpx.WriteError(w, r, s.log, errForbiddenOrigin)
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "WWW-Authenticate, Mcp-Session-Id, Mcp-Protocol-Version")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				preflight(w, r)
				return
			}
		}
		if r.ContentLength > s.opts.MaxBodyBytes {
			httpx.WriteError(w, r, s.log, httpx.ErrBodyTooLarge)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preflight answers a CORS preflight from an allowed origin.
func preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "POST, GET, DELETE")
	var allowed []string
	for _, f := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
		if f = strings.TrimSpace(f); isToken(f) {
			allowed = append(allowed, f)
		}
	}
	if len(allowed) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(allowed, ", "))
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// hostAllowed reports whether r's Host may be served. A request that reached
// a loopback listener must name a loopback host, the public URL's host or
// one of Options.AllowedHosts; so must every request when AllowedHosts is
// set.
func (s *Server) hostAllowed(r *http.Request) bool {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	onLoopback := local != nil && httpx.IsLoopbackHost(hostOnly(local.String()))
	if !onLoopback && len(s.opts.AllowedHosts) == 0 {
		return true
	}
	host := strings.ToLower(hostOnly(r.Host))
	return httpx.IsLoopbackHost(host) || s.hosts[host]
}

// readBody reads a POST body within Options.MaxBodyBytes (413 beyond),
// refuses a JSON-RPC batch (a top-level array) before the SDK sees it, and
// passes the request to sessions or to sessionless (see servedStateless);
// on a stateless endpoint the two are the same.
func (s *Server) readBody(sessions, sessionless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next := sessions
			if s.servedStateless(r, "") {
				next = sessionless
			}
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				httpx.WriteError(w, r, s.log, httpx.ErrBodyTooLarge)
				return
			}
			s.log.InfoContext(r.Context(), "mcpserver: reading the body failed", "err", err)
			httpx.WriteError(w, r, s.log, errBadBody)
			return
		}
		if first := bytes.TrimLeft(body, " \t\r\n"); len(first) > 0 && first[0] == '[' {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(batchRefusal)
			return
		}
		r2 := r.WithContext(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		id, method := peekRequest(body)
		if !s.servedStateless(r, method) {
			s.serveToResponse(w, r2, nil, sessions)
			return
		}
		s.serveToResponse(w, r2, id, sessionless)
	})
}

// servedStateless reports whether r (a POST of method, or "" for another HTTP
// method) is served as the stateless endpoint serves it: every request
// when the endpoint is stateless; on a stateful one, a request that names
// no session (Mcp-Session-Id) and is not a handshake of the protocols
// before 2026-07-28 (initialize, with no MCP-Protocol-Version of
// 2026-07-28 or later). A client of those protocols begins with
// initialize and gets a session; a client of 2026-07-28, or one that
// sends its requests without a handshake, is served as before sessions,
// one request at a time, with no session left behind.
func (s *Server) servedStateless(r *http.Request, method string) bool {
	if !s.opts.Stateful {
		return true
	}
	if r.Header.Get("Mcp-Session-Id") != "" {
		return false
	}
	modern := r.Header.Get("Mcp-Protocol-Version") >= sessionlessVersion
	if r.Method != http.MethodPost {
		return modern
	}
	return method != "initialize" || modern
}

// hostOnly returns the host of a host[:port], without brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), such as a
// header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

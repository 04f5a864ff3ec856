package mcpserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHTTPChecks covers the checks made before and around authentication:
// Origin, Host, body size and batches.
func TestHTTPChecks(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
		server: func(o *Options) {
			o.AllowedOrigins = []string{"http://localhost:6274"}
			o.MaxBodyBytes = 4096
		},
	})
	tok := e.token(alice, "")
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fx__echo","arguments":{"text":"a"}}}]`
	for _, tc := range []struct {
		name   string
		body   string
		header http.Header
		host   string
		status int
		want   string // in the body
	}{
		{"an evil origin", initialize, with(bearer(tok), "Origin", "http://evil.example.com"), "", 403, "forbidden_origin"},
		{"an evil origin without a token", initialize, http.Header{"Origin": {"http://evil.example.com"}}, "", 403, "forbidden_origin"},
		{"a null origin", initialize, with(bearer(tok), "Origin", "null"), "", 403, "forbidden_origin"},
		{"an allowed origin", initialize, with(bearer(tok), "Origin", "http://localhost:6274"), "", 200, ""},
		{"Usher's own origin", initialize, with(bearer(tok), "Origin", e.url), "", 200, ""},
		{"a rebound host name", initialize, bearer(tok), "evil.example.com", 403, "forbidden_host"},
		{"a loopback host name", initialize, bearer(tok), "localhost", 200, ""},
		{"a declared oversized body", initialize + strings.Repeat(" ", 4096), bearer(tok), "", 413, "body_too_large"},
		{"a batch", batch, bearer(tok), "", 400, `"code":-32600`},
		{"a batch after whitespace", "\n\t " + batch, bearer(tok), "", 400, `"code":-32600`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mcp", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %s, want %d with %q", resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}
	if n := up.called("echo"); n != 0 {
		t.Errorf("a refused request ran the upstream tool %d times", n)
	}

	t.Run("a chunked oversized body", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mcp",
			io.MultiReader(strings.NewReader(initialize), strings.NewReader(strings.Repeat(" ", 5000))))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		req.Header = with(bearer(tok), "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("status = %d, want 413", resp.StatusCode)
		}
	})

	t.Run("a preflight from an allowed origin", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodOptions, e.url+"/mcp", nil)
		req.Header = http.Header{"Origin": {"http://localhost:6274"}, "Access-Control-Request-Method": {"POST"},
			"Access-Control-Request-Headers": {"authorization, content-type, mcp-protocol-version"}}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:6274" ||
			!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") {
			t.Errorf("got %d %v", resp.StatusCode, resp.Header)
		}
	})
}

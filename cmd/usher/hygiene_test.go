package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/usherhq/usher/internal/apitest"
)

// trickleBody sends a POST declaring a 4000-byte body over a real loopback
// connection, then one byte every 50 ms (the body would take 200 s), and
// returns the answer the server gives while it trickles in.
func trickleBody(t *testing.T, base, path string) *http.Response {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4000\r\n\r\n", path, u.Host)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	// Without the read timeout, nothing comes back before the body is in.
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: no answer while the body trickles in: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A body that trickles in is cut off at server.read_timeout, on every
// route, while the live-update streams (SSE and WebSocket) stay open
// longer than that.
func TestSlowBodiesAreCutOff(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	s := startServer(t, map[string]string{
		"USHER_SERVER_READ_TIMEOUT": bound.String(),
		"USHER_EVENTS_HEARTBEAT":    "1s",
	})
	// Each request and each stream on a connection of its own, at once:
	// what is waited for is the bound, not the machine.
	for _, path := range []string{"/mcp", "/no/such/path", "/dev/oidc/token", "/auth/logout", "/api/assistant/runs"} {
		t.Run("body of "+path, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp := trickleBody(t, s.url, path)
			var body struct{ Error struct{ Code string } }
			json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusRequestTimeout || body.Error.Code != "request_timeout" || !resp.Close {
				t.Errorf("%s = %d %q (close %v), want 408 request_timeout, closed", path, resp.StatusCode, body.Error.Code, resp.Close)
			}
			if took := time.Since(start); took < bound {
				t.Errorf("%s answered after %s, before the %s bound", path, took, bound)
			}
		})
	}

	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id, _ := run["runId"].(string)
	// Three heartbeats a second apart: open three times the bound.
	t.Run("SSE stream", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		feed := openSSE(t, s.url+"/api/assistant/updates/stream", alice, 0)
		for range 3 {
			feed.until(t, isType("heartbeat"))
		}
		if took := time.Since(start); took < 2*bound {
			t.Errorf("the SSE stream's heartbeats came within %s", took)
		}
	})
	t.Run("WebSocket", func(t *testing.T) {
		t.Parallel()
		ws := "ws" + strings.TrimPrefix(s.url, "http") + "/api/assistant/runs/" + id + "/events/ws"
		conn, resp, err := websocket.DefaultDialer.Dial(ws, http.Header{"Authorization": {"Bearer " + alice}})
		if err != nil {
			t.Fatalf("dial: %v (%v)", err, resp)
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		for beats := 0; beats < 3; {
			var m struct{ Event string }
			if err := conn.ReadJSON(&m); err != nil {
				t.Fatalf("websocket after %s: %v", time.Since(start), err)
			}
			if m.Event == "heartbeat" {
				beats++
			}
		}
		if took := time.Since(start); took < 2*bound {
			t.Errorf("the WebSocket's heartbeats came within %s", took)
		}
	})
}

// The WebSocket route takes pages of Usher's own origin only: scheme, host
// and port all compared.
func TestWebSocketOriginMustMatch(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/api/assistant/runs/" + run["runId"].(string) + "/events/ws"
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	tests := []struct {
		name, origin, fetchSite string
		want                    int
	}{
		{"same origin", s.url, "same-origin", http.StatusSwitchingProtocols},
		{"no Origin: not a browser", "", "", http.StatusSwitchingProtocols},
		{"wrong scheme", "https://" + u.Host, "", http.StatusForbidden},
		{"wrong scheme, browser says cross-site", "https://" + u.Host, "cross-site", http.StatusForbidden},
		{"wrong port", fmt.Sprintf("http://%s:%d", u.Hostname(), port+1), "", http.StatusForbidden},
		{"wrong host", "http://localhost:" + u.Port(), "", http.StatusForbidden},
		{"same origin, browser says cross-site", s.url, "cross-site", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Authorization": {"Bearer " + alice}}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			if tt.fetchSite != "" {
				h.Set("Sec-Fetch-Site", tt.fetchSite)
			}
			conn, resp, err := websocket.DefaultDialer.Dial(ws, h)
			if conn != nil {
				conn.Close()
			}
			if resp == nil {
				t.Fatalf("no response: %v", err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("Origin %q = %d, want %d", tt.origin, resp.StatusCode, tt.want)
			}
		})
	}
}

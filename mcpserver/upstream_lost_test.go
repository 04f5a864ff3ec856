package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestUpstreamLostAfterTheCallWentOut checks what a caller is told when
// an upstream runs a call and the connection drops before its answer: the
// call may have taken effect, so its outcome is unknown — not a refusal,
// and not "the tool failed" — and a retry of the same key does not run it
// again. A call that cannot reach the upstream at all was not run.
func TestUpstreamLostAfterTheCallWentOut(t *testing.T) {
	t.Parallel()
	up, runs := chargeServer("flaky")
	ts := interceptedUpstream(t, up, []string{"tools/call"}, func(sdk http.Handler, w http.ResponseWriter, r *http.Request) {
		// Run the call, then lose the connection before any answer.
		sdk.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	})

	reg := prometheus.NewRegistry()
	e := newEnv(t, envConfig{rules: map[string]Decision{"fl__charge": Allow}, upstreams: []Upstream{{Name: "fl", URL: ts.URL}},
		catalog: func(o *CatalogOptions) { o.Registerer = reg }, server: func(o *Options) { o.Registerer = reg }})
	cs := e.connect(alice, "", nil, "")
	meta := mcp.Meta{MetaIdempotencyKey: "charge-1"}
	res := call(t, cs, "fl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the upstream ran the call %d times, want 1", n)
	}
	if !res.IsError || !strings.Contains(text(res), "outcome is unknown") {
		t.Errorf("a call lost after it went out = %q, want its outcome unknown", text(res))
	}
	again := call(t, cs, "fl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 {
		t.Errorf("a retry of the same key ran the call again (%d runs)", n)
	}
	if v := gauge(t, reg, "usher_mcp_outcome_unknown_total", map[string]string{"source": "call"}); v != 1 {
		t.Errorf("usher_mcp_outcome_unknown_total{source=call} = %v, want 1", v)
	}
	if v := gauge(t, reg, "usher_upstream_call_errors_total", map[string]string{"upstream": "fl", "kind": CallLost}); v != 1 {
		t.Errorf("usher_upstream_call_errors_total{kind=lost} = %v, want 1", v)
	}
	if !again.IsError || strings.Contains(text(again), "charged") {
		t.Errorf("the retry = %q", text(again))
	}

	// An upstream that cannot be reached: nothing was sent. (Not
	// ts.Close, which would wait for the catalog's stream that listens
	// for changes to the upstream's lists.)
	ts.Listener.Close()
	ts.CloseClientConnections()
	res = call(t, cs, "fl__charge", map[string]any{}, mcp.Meta{MetaIdempotencyKey: "charge-2"})
	if !res.IsError || strings.Contains(text(res), "outcome is unknown") {
		t.Errorf("a call to an upstream that is down = %q, want a failure that ran nothing", text(res))
	}
	if v := gauge(t, reg, "usher_upstream_call_errors_total", map[string]string{"upstream": "fl", "kind": CallNotSent}); v != 1 {
		t.Errorf("usher_upstream_call_errors_total{kind=not_sent} = %v, want 1", v)
	}
}

// chargeServer is an upstream MCP server named name with one tool,
// charge, which answers "charged", and the count of its runs.
func chargeServer(name string) (*mcp.Server, *atomic.Int32) {
	runs := new(atomic.Int32)
	up := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "charge", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged"}}}, nil
		})
	return up, runs
}

// interceptedUpstream serves up on loopback (stateless), except the
// requests whose body names one of methods: those go to intercept, with
// up's handler to run them and the body still to be read.
func interceptedUpstream(t *testing.T, up *mcp.Server, methods []string, intercept func(sdk http.Handler, w http.ResponseWriter, r *http.Request)) *httptest.Server {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !slices.ContainsFunc(methods, func(m string) bool { return bytes.Contains(body, []byte(`"`+m+`"`)) }) {
			sdk.ServeHTTP(w, r)
			return
		}
		intercept(sdk, w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

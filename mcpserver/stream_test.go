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
)

// TestUpstreamStreamEndsWithoutAnswer checks what a caller is told, and
// what the audit says, when an upstream takes a tools/call, runs it, and
// closes its response stream without the answer and without an event id
// to resume it from: the outcome is unknown (the call may have run), for
// that reason, told apart from a lost connection; a retry of the same key
// does not run it again.
func TestUpstreamStreamEndsWithoutAnswer(t *testing.T) {
	var runs atomic.Int32
	up := mcp.NewServer(&mcp.Implementation{Name: "closer", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "charge", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged"}}}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !strings.Contains(string(body), `"tools/call"`) {
			sdk.ServeHTTP(w, r)
			return
		}
		// Run the call, then answer with a response stream that carries
		// a notification, no event id, and ends.
		sdk.ServeHTTP(httptest.NewRecorder(), r)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"working\"}}\n\n")
	}))
	t.Cleanup(ts.Close)

	e := newEnv(t, envConfig{rules: map[string]Decision{"cl__charge": Allow}, upstreams: []Upstream{{Name: "cl", URL: ts.URL}}})
	cs := e.connect(alice, "", nil, "")
	meta := mcp.Meta{MetaIdempotencyKey: "charge-1"}
	res := call(t, cs, "cl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the upstream ran the call %d times, want 1", n)
	}
	if !res.IsError || !strings.Contains(text(res), "closed its response stream without answering") || !strings.Contains(text(res), "outcome is unknown") {
		t.Errorf("a call whose upstream stream ended = %q, want its outcome unknown because the stream ended", text(res))
	}
	again := call(t, cs, "cl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 || !again.IsError || strings.Contains(text(again), "charged") {
		t.Errorf("a retry of the same key: %d runs, %q", n, text(again))
	}
	var found bool
	for _, ev := range e.events() {
		if ev.Tool == "cl__charge" && ev.Kind == KindOutcomeUnknown {
			found = true
			if !slices.Contains(ev.Reasons, streamEndedReason) || ev.Outcome != OutcomeUnknown {
				t.Errorf("the outcome_unknown record = %+v, want the reason %q", ev, streamEndedReason)
			}
		}
	}
	if !found {
		t.Errorf("no outcome_unknown record: %v", e.audit.kinds("cl__charge"))
	}
}

// TestLostConnectionIsNotAStreamEnd: a connection lost before the
// answer is the general unknown outcome, without the stream's reason.
func TestLostConnectionIsNotAStreamEnd(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "flaky", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "charge", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !strings.Contains(string(body), `"tools/call"`) {
			sdk.ServeHTTP(w, r)
			return
		}
		// A response stream begun, then the connection lost mid-event.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\"")
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(ts.Close)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fl__charge": Allow}, upstreams: []Upstream{{Name: "fl", URL: ts.URL}}})
	res := call(t, e.connect(alice, "", nil, ""), "fl__charge", map[string]any{}, nil)
	if !res.IsError || !strings.Contains(text(res), "outcome is unknown") || strings.Contains(text(res), "response stream") {
		t.Errorf("a lost connection = %q, want the general unknown outcome", text(res))
	}
	for _, ev := range e.events() {
		if ev.Kind == KindOutcomeUnknown && slices.Contains(ev.Reasons, streamEndedReason) {
			t.Errorf("a lost connection was recorded as a stream that ended: %+v", ev)
		}
	}
}

package assistant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// keyedTools is an MCP server with one tool, charge, that runs at most
// once per idempotency key (the call's usher/tool_call_id), as Usher's
// MCP server does: a repeated key is answered with the same result.
// runs counts the tool's executions.
func keyedTools(t *testing.T) (*httptest.Server, *atomic.Int32) {
	return keyedToolsWith(t, nil)
}

// keyedToolsWith is keyedTools served with opts; a call without a key
// is refused.
func keyedToolsWith(t *testing.T, opts *mcp.StreamableHTTPOptions) (*httptest.Server, *atomic.Int32) {
	runs := new(atomic.Int32)
	var keys sync.Map
	srv := mcp.NewServer(&mcp.Implementation{Name: "keyed-tools", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "charge", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta[metaToolCallID].(string)
			if key == "" {
				return nil, errors.New("no key")
			}
			if _, seen := keys.LoadOrStore(key, true); !seen {
				runs.Add(1)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged once"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, opts))
	t.Cleanup(func() {
		ts.Close()
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	return ts, runs
}

// losingRelay forwards requests to target over loopback, except that the
// first tools/call it forwards loses its answer: the relay reads it and
// drops the client's connection, as a replica killed after the call went
// out, or a network cut, does.
func losingRelay(t *testing.T, target string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	var lost atomic.Bool
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"tools/call"`)) || !lost.CompareAndSwap(false, true) {
			proxy.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(httptest.NewRecorder(), r) // the call goes out and runs
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(relay.Close)
	return relay
}

// TestLostAnswerIsNotARefusal: a tool call whose connection to the MCP
// server is lost after the call went out is asked again under the same
// key, on a new connection, and the model gets the call's one outcome —
// not "refused" — and the tool ran once.
func TestLostAnswerIsNotARefusal(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		tools, runs := keyedTools(t)
		relay := losingRelay(t, tools.URL)
		ms, provider := scriptedModel(t)
		ms.ReplyToolCalls(model.ToolCall{ID: "call_1", Name: "charge", Arguments: json.RawMessage(`{}`)})
		ms.Reply("Done.")
		h := newHarness(t, st, provider, &Options{MCPURL: relay.URL})
		code, out := h.call(t, "POST", "/runs", `{"message": "charge it"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		waitHandled(t, st, runID, 1, 20*time.Second)
		if ends := turnEnds(t, st, runID); len(ends) != 1 || ends[0].Status != TurnCompleted {
			t.Fatalf("turn ends = %+v, want one completed", ends)
		}
		reqs := ms.Requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2", len(reqs))
		}
		msgs := reqs[1].Messages
		last := msgs[len(msgs)-1]
		if last.Role != "tool" || last.Content != "charged once" || strings.Contains(last.Content, "refused") {
			t.Errorf("the model was told %q (%s), want the call's outcome", last.Content, last.Role)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the tool ran %d times, want once", n)
		}
	})
}

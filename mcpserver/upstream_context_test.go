package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNewProtocolClientFirstToStatefulUpstream checks that the first call
// of a client speaking the sessionless protocol (2026-07-28), to a fresh
// Usher, reaches a stateful upstream that speaks only the handshake
// protocols: the upstream session is opened with none of the caller's
// request values, so the caller's protocol version is not sent in the
// upstream's handshake.
func TestNewProtocolClientFirstToStatefulUpstream(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "stateful", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{
		Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":100}}}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil) // stateful
	ts := httptest.NewServer(sdk)
	t.Cleanup(ts.Close)

	for _, first := range []string{"tools/list", "tools/call"} {
		t.Run(first, func(t *testing.T) {
			e := newEnv(t, envConfig{rules: map[string]Decision{"st__echo": Allow}, upstreams: []Upstream{{Name: "st", URL: ts.URL}}})
			cs := e.connect(alice, "", nil, "2026-07-28")
			if first == "tools/list" {
				if got := listed(t, cs); !strings.Contains(strings.Join(got, " "), "st__echo") {
					t.Fatalf("tools/list = %v", got)
				}
			}
			res := call(t, cs, "st__echo", map[string]any{"text": "hi"}, nil)
			if res.IsError || text(res) != "echo: hi" {
				t.Errorf("st__echo = %s", text(res))
			}
		})
	}
}

// TestConnectContext checks the context upstream sessions are opened with:
// none of the request's values, its deadline, and its cancellation.
func TestConnectContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	parent, cancelParent := context.WithDeadline(context.WithValue(t.Context(), key{}, "caller's"), deadline)
	ctx, cancel := connectContext(withCaller(parent, Caller{Subject: alice}))
	defer cancel()
	if v := ctx.Value(key{}); v != nil {
		t.Errorf("a value of the request reached the connect context: %v", v)
	}
	if _, ok := CallerFromContext(ctx); ok {
		t.Error("the caller reached the connect context")
	}
	if got, ok := ctx.Deadline(); !ok || !got.Equal(deadline) {
		t.Errorf("deadline = %v, %v; want %v", got, ok, deadline)
	}
	cancelParent()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("after the request was cancelled: %v", ctx.Err())
	}
}

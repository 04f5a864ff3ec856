package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/testenv"
)

// TestToolsLockUpstreamWithoutTemplatesList runs `usher tools lock`
// against an upstream that declares resources but answers
// resources/templates/list with -32601 (Method not found): the lock is
// written, with the upstream's tool.
func TestToolsLockUpstreamWithoutTemplatesList(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "no-templates", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	srv.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "doc"}}}, nil
		})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "resources/templates/list" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}
			}
			return next(ctx, method, req)
		}
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(up.Close)

	dir := t.TempDir()
	lock, cfg := filepath.Join(dir, "tools.lock"), filepath.Join(dir, "usher.yaml")
	yaml := fmt.Sprintf("mcp:\n  upstreams:\n    - name: up\n      url: %q\npolicy:\n  lock_file: %q\n", up.URL, lock)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testenv.Output
	if err := run(t.Context(), []string{"tools", "lock", "--config", cfg, "--data-dir", filepath.Join(dir, "data")}, getenv(nil), &stdout, &stderr); err != nil {
		t.Fatalf("usher tools lock: %v\n%s%s", err, &stdout, &stderr)
	}
	b, err := os.ReadFile(lock)
	if err != nil || !strings.Contains(string(b), "up__lookup") {
		t.Errorf("the lock %q (%v), want up__lookup in it", b, err)
	}
}

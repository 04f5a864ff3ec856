// Command echoupstream is the upstream MCP server of the out-of-process
// benchmark (bench/mcpbench): a Go SDK server with one tool, echo (and the
// same echo as the resource template echo://{text} and the prompt echo),
// over streamable HTTP, stateful (Mcp-Session-Id) and answering with
// Server-Sent Events, as many MCP servers do. It listens on loopback and
// prints its endpoint on the first line of its standard output.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/bench/loopback"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "echoupstream:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	return loopback.Serve(addr, handler(), func(a net.Addr) string { return fmt.Sprintf("echo upstream at http://%s/mcp", a) })
}

// handler serves the echo tool: stateful sessions, SSE responses.
func handler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-upstream", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{
		Name: "echo", Description: "Returns its text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil
	})
	// The same echo as a resource template and as a prompt, for the
	// benchmark of resources/read and prompts/get.
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "echo://{text}", Name: "echo", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			text := strings.TrimPrefix(req.Params.URI, "echo://")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "echo: " + text}}}, nil
		})
	srv.AddPrompt(&mcp.Prompt{Name: "echo", Description: "Returns its text.", Arguments: []*mcp.PromptArgument{{Name: "text", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "echo: " + req.Params.Arguments["text"]}}}}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: 10 * time.Minute}))
	return mux
}

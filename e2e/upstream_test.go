//lint:file-ignore SA1019 the conformance suite tests logging, sampling and elicitation, which the 2026-07-28 protocol deprecates.

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The fixture upstream is an MCP server offering what the conformance suite's
// server scenarios call: its test tools, resources, prompts and completions,
// under the names the suite calls. Usher serves it as an upstream configured
// with the prefix "none", so that every name and resource URI passes through
// as it is, and beside it a second upstream with a prefix: the fixture's JSON
// server offers "schema_2020_12_tool", which under the prefix "json_" is
// Usher's "json_schema_2020_12_tool".
//
// It runs in the test process, over streamable HTTP on loopback, with SDK
// sessions: Usher keeps one upstream session per caller and asks it for log
// messages once, at the start.

// Fixture paths, one per upstream.
const (
	fixtureTestPath = "/test" // served with the prefix "none"
	fixtureJSONPath = "/json" // served with the prefix "json_"
)

// startFixture serves the fixture upstream on loopback until the test ends,
// and returns its base URL.
func startFixture(t *testing.T) string {
	mux := http.NewServeMux()
	servers := map[string]*mcp.Server{
		fixtureTestPath: fixtureTestServer(),
		fixtureJSONPath: fixtureJSONServer(),
	}
	// A server that stops ends its sessions: the replicas of a stateful
	// Usher share their callers' sessions to it, and none ends one that
	// another may still use.
	t.Cleanup(func() {
		for _, server := range servers {
			for ss := range server.Sessions() {
				_ = ss.Close()
			}
		}
	})
	for path, server := range servers {
		mux.Handle(path, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
			// Keeps each stream's events, so that a client can resume a
			// stream the server closed (the reconnection tool does).
			EventStore: mcp.NewMemoryEventStore(nil),
		}))
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

// The suite's minimal media: a 1x1 red PNG and a silent WAV.
const (
	pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	wavBase64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
)

func mustDecode(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

var (
	pngData = mustDecode(pngBase64)
	wavData = mustDecode(wavBase64)
)

// noArguments is the input schema of a tool without arguments.
var noArguments = json.RawMessage(`{"type":"object","properties":{}}`)

// text is a result of one text block.
func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// toolError is a tool result with isError set.
func toolError(s string) *mcp.CallToolResult {
	r := text(s)
	r.IsError = true
	return r
}

// pause waits d, the spacing between notifications the scenarios ask for, or
// until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fixtureTestServer serves the tools, resources, prompts and completions
// the suite asks for, under its names.
func fixtureTestServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "usher-conformance-fixture", Version: "1.0.0"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	tool := func(name, description string, schema json.RawMessage, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: schema}, h)
	}

	tool("test_simple_text", "Returns one text block.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("This is a simple text response for testing."), nil
		})
	tool("test_image_content", "Returns one PNG image.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}}}, nil
		})
	tool("test_audio_content", "Returns one WAV audio clip.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: wavData, MIMEType: "audio/wav"}}}, nil
		})
	tool("test_embedded_resource", "Returns one embedded text resource.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content.",
			}}}}, nil
		})
	tool("test_multiple_content_types", "Returns text, an image and an embedded resource.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Multiple content types test:"},
				&mcp.ImageContent{Data: pngData, MIMEType: "image/png"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
					URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`,
				}},
			}}, nil
		})
	tool("test_tool_with_logging", "Sends three log messages at info level, 50 ms apart, while it runs.", noArguments,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				if i > 0 {
					if err := pause(ctx, 50*time.Millisecond); err != nil {
						return nil, err
					}
				}
				if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "fixture", Data: msg}); err != nil {
					return nil, err
				}
			}
			return text("Tool with logging executed successfully"), nil
		})
	tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100, 50 ms apart, when the call has a progress token.", noArguments,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			token := req.Params.GetProgressToken()
			for i, p := range []float64{0, 50, 100} {
				if i > 0 {
					if err := pause(ctx, 50*time.Millisecond); err != nil {
						return nil, err
					}
				}
				if token == nil {
					continue
				}
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p, Total: 100}); err != nil {
					return nil, err
				}
			}
			return text(fmt.Sprintf("Progress reported for token %v", token)), nil
		})
	tool("test_error_handling", "Always fails with a tool error.", noArguments,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return toolError("This tool intentionally returns an error for testing"), nil
		})
	tool("test_sampling", "Asks the client's model to complete the prompt.",
		json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"The prompt to send to the model"}},"required":["prompt"]}`),
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Prompt string `json:"prompt"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return toolError("the arguments are not valid: " + err.Error()), nil
			}
			if caps := req.Session.InitializeParams().Capabilities; caps == nil || caps.Sampling == nil {
				return toolError("the client does not offer sampling"), nil
			}
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}},
				MaxTokens: 100,
			})
			if err != nil {
				return toolError("sampling failed: " + err.Error()), nil
			}
			reply := "(not text)"
			if t, ok := res.Content.(*mcp.TextContent); ok {
				reply = t.Text
			}
			return text("LLM response: " + reply), nil
		})
	elicit := func(name, description string, schema json.RawMessage, params func(args json.RawMessage) (*mcp.ElicitParams, error)) {
		tool(name, description, schema, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p, err := params(req.Params.Arguments)
			if err != nil {
				return toolError("the arguments are not valid: " + err.Error()), nil
			}
			if caps := req.Session.InitializeParams().Capabilities; caps == nil || caps.Elicitation == nil {
				return toolError("the client does not offer elicitation"), nil
			}
			res, err := req.Session.Elicit(ctx, p)
			if err != nil {
				return toolError("elicitation failed: " + err.Error()), nil
			}
			content, _ := json.Marshal(res.Content)
			return text(fmt.Sprintf("Elicitation result: action=%s, content=%s", res.Action, content)), nil
		})
	}
	elicit("test_elicitation", "Asks the user, through the client, for a user name.",
		json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"The message to show the user"}},"required":["message"]}`),
		func(args json.RawMessage) (*mcp.ElicitParams, error) {
			var in struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal(args, &in); err != nil {
				return nil, err
			}
			return &mcp.ElicitParams{Message: in.Message, RequestedSchema: json.RawMessage(
				`{"type":"object","properties":{"username":{"type":"string","description":"Your preferred user name"},"email":{"type":"string","description":"Your e-mail address"}},"required":["username"]}`)}, nil
		})
	elicit("test_elicitation_sep1034_defaults", "Asks the user for values that have defaults (SEP-1034).", noArguments,
		func(json.RawMessage) (*mcp.ElicitParams, error) {
			return &mcp.ElicitParams{Message: "Test defaults for primitives", RequestedSchema: json.RawMessage(`{"type":"object","properties":{
				"name":{"type":"string","description":"User name","default":"John Doe"},
				"age":{"type":"integer","description":"User age","default":30},
				"score":{"type":"number","description":"User score","default":95.5},
				"status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
				"verified":{"type":"boolean","description":"Verification status","default":true}}}`)}, nil
		})
	elicit("test_elicitation_sep1330_enums", "Asks the user to choose from enums of every form (SEP-1330).", noArguments,
		func(json.RawMessage) (*mcp.ElicitParams, error) {
			return &mcp.ElicitParams{Message: "Test enum schemas", RequestedSchema: json.RawMessage(`{"type":"object","properties":{
				"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
				"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
				"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
				"untitledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","enum":["option1","option2","option3"]}},
				"titledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"anyOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]}}}}`)}, nil
		})
	tool("test_reconnection", "Closes its response stream in the middle of the call and answers after the client reconnects (SEP-1699).", noArguments,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Extra != nil && req.Extra.CloseSSEStream != nil {
				req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
			}
			if err := pause(ctx, 100*time.Millisecond); err != nil {
				return nil, err
			}
			return text("Reconnection test completed successfully."), nil
		})

	resource := func(r *mcp.Resource, contents func(uri string) *mcp.ResourceContents) {
		s.AddResource(r, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents(req.Params.URI)}}, nil
		})
	}
	resource(&mcp.Resource{URI: "test://static-text", Name: "static-text", Description: "A static text resource", MIMEType: "text/plain"},
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "text/plain", Text: "This is the content of the static text resource."}
		})
	resource(&mcp.Resource{URI: "test://static-binary", Name: "static-binary", Description: "A static binary resource (a PNG image)", MIMEType: "image/png"},
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "image/png", Blob: pngData}
		})
	resource(&mcp.Resource{URI: "test://watched-resource", Name: "watched-resource", Description: "A resource clients may subscribe to", MIMEType: "text/plain"},
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "text/plain", Text: "Watched resource content"}
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: "test://template/{id}/data", Name: "template", Description: "A resource template with one parameter", MIMEType: "application/json",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		rest, ok1 := strings.CutPrefix(req.Params.URI, "test://template/")
		id, ok2 := strings.CutSuffix(rest, "/data")
		if !ok1 || !ok2 || id == "" {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		body, _ := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id})
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(body)}}}, nil
	})

	prompt := func(p *mcp.Prompt, messages func(args map[string]string) []*mcp.PromptMessage) {
		s.AddPrompt(p, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: p.Description, Messages: messages(req.Params.Arguments)}, nil
		})
	}
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	prompt(&mcp.Prompt{Name: "test_simple_prompt", Title: "Simple prompt", Description: "A prompt without arguments"},
		func(map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}
		})
	prompt(&mcp.Prompt{Name: "test_prompt_with_arguments", Title: "Prompt with arguments", Description: "A prompt with two required arguments",
		Arguments: []*mcp.PromptArgument{{Name: "arg1", Description: "First argument", Required: true}, {Name: "arg2", Description: "Second argument", Required: true}}},
		func(args map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{user(&mcp.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", args["arg1"], args["arg2"])})}
		})
	prompt(&mcp.Prompt{Name: "test_prompt_with_embedded_resource", Title: "Prompt with an embedded resource", Description: "A prompt that embeds a resource",
		Arguments: []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
		func(args map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{
				user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: args["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
				user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
			}
		})
	prompt(&mcp.Prompt{Name: "test_prompt_with_image", Title: "Prompt with an image", Description: "A prompt that includes an image"},
		func(map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{
				user(&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}),
				user(&mcp.TextContent{Text: "Please analyze the image above."}),
			}
		})
	return s
}

// fixtureJSONServer serves the suite's "json_schema_2020_12_tool" as
// "schema_2020_12_tool", for the prefix "json_".
func fixtureJSONServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "usher-conformance-fixture-json", Version: "1.0.0"}, nil)
	s.AddTool(&mcp.Tool{
		Name:        "schema_2020_12_tool",
		Description: "Has an input schema that uses JSON Schema 2020-12 keywords (SEP-1613).",
		InputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
			"properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
			"additionalProperties": false
		}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("Received " + string(req.Params.Arguments)), nil
	})
	return s
}

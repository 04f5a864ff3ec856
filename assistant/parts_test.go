package assistant

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestToolResultParts: a tool result's content beyond text is described
// in its event (kind, media type, URI, name, size; never the bytes) and
// reaches a text-only provider as placeholder lines after the text.
func TestToolResultParts(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	srv := mcp.NewServer(&mcp.Implementation{Name: "media", Version: "1"}, nil)
	size := int64(900)
	mcp.AddTool(srv, &mcp.Tool{Name: "snapshot", Description: "Takes a picture."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Here it is."},
				&mcp.ImageContent{Data: make([]byte, 48213), MIMEType: "image/png"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///notes/todo.txt", MIMEType: "text/plain", Text: "milk\neggs"}},
				&mcp.ResourceLink{URI: "file:///notes/plans.md", Name: "plans", Title: "Plans", Size: &size},
			}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.Close()
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	ms := modeltest.NewServer(t)
	raw, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(&Options{Store: st, Model: payload.NewProvider(raw, payload.OpenAICompatible), MCPURL: hs.URL,
		Tokens: func(context.Context, Grant) oauth2.TokenSource {
			return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unused"})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	r, _, err := rt.CreateRun(t.Context(), "owner", Sender{}, NewRun{Title: "media"})
	if err != nil {
		t.Fatal(err)
	}
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "snapshot", Arguments: json.RawMessage(`{}`)})
	ms.Reply("A picture, a note and a link.")
	say(t, rt, r.ID, "take a picture")

	want := "Here it is.\n[image: image/png, 48213 bytes]\n[resource: file:///notes/todo.txt, text/plain, 9 bytes]\n" +
		`[resource link: file:///notes/plans.md "Plans", 900 bytes]`
	reqs := ms.Requests()
	last := reqs[len(reqs)-1].Messages
	if tool := last[len(last)-1]; tool.Role != "tool" || tool.Content != want {
		t.Errorf("the tool message sent = %+v, want %q", tool, want)
	}
	msgs, err := st.ListMessages(t.Context(), r.ID, store.MessageQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var res ToolResult
	for _, e := range msgs {
		if e.Type == EventToolResult {
			mustUnmarshal(t, e.Payload, &res)
			if len(e.Payload) > 2000 {
				t.Errorf("the result's event is %d bytes: the image was kept", len(e.Payload))
			}
		}
	}
	wantParts := []ContentPart{
		{Kind: "image", MIMEType: "image/png", Size: 48213},
		{Kind: "resource", URI: "file:///notes/todo.txt", MIMEType: "text/plain", Size: 9},
		{Kind: "resource_link", URI: "file:///notes/plans.md", Name: "Plans", Size: 900},
	}
	if res.Content != "Here it is." || !reflect.DeepEqual(res.Parts, wantParts) {
		t.Errorf("stored result = %q %+v, want the text and %+v", res.Content, res.Parts, wantParts)
	}
}

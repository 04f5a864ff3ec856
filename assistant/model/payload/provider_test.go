package payload_test

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/assistant/model/payload"
)

// brokenRequest is a history a strict server refuses: an unanswered call
// in the middle, a result whose call is gone, a repeated id, an image.
func brokenRequest() model.Request {
	return model.Request{Messages: []model.Message{
		sys("Be brief."),
		result("gone", "old"),
		user("hi"),
		calls("Checking.", call("call_0", "notes_list", `{}`)),
		user("hello?"),
		calls("", call("call_0", "notes_list", `{"all": true}`)),
		{Role: model.RoleTool, ToolCallID: "call_0", Content: "[]", Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte("PNG")}}},
		sys(payload.SummaryMarker + "\nEarlier: nothing."),
	}, Tools: []model.Tool{{Name: "notes_list"}}}
}

// TestProviderOpenAI sends a broken history to the scripted
// OpenAI-compatible server, which checks the conversation as OpenAI does:
// sent as it is, it is refused; through the OpenAI-compatible profile it
// is taken, as the repaired payload, and the request is left as it was.
func TestProviderOpenAI(t *testing.T) {
	srv := modeltest.NewServer(t)
	openai, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: srv.URL(), Model: "test-model"})
	if err != nil {
		t.Fatal(err)
	}

	req := brokenRequest()
	req.Messages[6].Parts = nil // OpenAI itself refuses parts before sending anything
	srv.Reply("unused")
	_, err = openai.Complete(t.Context(), req, nil)
	if me := (*model.Error)(nil); !errors.As(err, &me) || me.StatusCode != http.StatusBadRequest {
		t.Fatalf("sent as it is: err = %v, want the server's 400", err)
	}

	req = brokenRequest()
	before := brokenRequest()
	resp, err := payload.NewProvider(openai, payload.OpenAICompatible).Complete(t.Context(), req, nil)
	if err != nil {
		t.Fatalf("prepared: %v", err)
	}
	if resp.Message.Content != "unused" {
		t.Errorf("reply = %q", resp.Message.Content)
	}
	if !reflect.DeepEqual(req, before) {
		t.Errorf("the request was modified: %s", dump(req.Messages))
	}
	reqs := srv.Requests()
	got := reqs[len(reqs)-1].Messages
	want := []modeltest.RecordedMessage{
		{Role: "system", Content: "Be brief.\n\nEarlier: nothing."},
		{Role: "user", Content: "Tool result (call gone):\nold\n\nhi"},
		{Role: "assistant", Content: "Checking."},
		{Role: "user", Content: "hello?"},
		{Role: "assistant", ContentAbsent: true, ToolCalls: []modeltest.RecordedToolCall{{ID: "call_0", Type: "function", Name: "notes_list", Arguments: `{"all": true}`}}},
		{Role: "tool", Content: "[]\n[image: image/png, 3 bytes]", ToolCallID: "call_0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sent:\n got %+v\nwant %+v", got, want)
	}
}

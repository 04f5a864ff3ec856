package main

import (
	"testing"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// TestAssistantSendsRepairedPayloads checks that the OpenAI-compatible
// provider is sent a payload repaired for it, and the log keeps what was
// said: a turn that failed leaves two user messages in a row, which the
// strict profile merges into one.
func TestAssistantSendsRepairedPayloads(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id

	ms.ReplyError(401)
	if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"hi"}`); code != 200 || body["status"] != "failed" {
		t.Fatalf("turn with a refused model = %d %v", code, body)
	}
	ms.Reply("here")
	if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"still there?"}`); code != 200 || body["reply"] != "here" {
		t.Fatalf("second turn = %d %v", code, body)
	}

	reqs := ms.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" || msgs[1].Content != "hi\n\nstill there?" {
		t.Errorf("the model was sent %+v, want the system prompt and the two user messages merged", msgs)
	}
	var said []any
	for _, e := range apitest.Events(t, s.url, alice, id) {
		if e["type"] == "message.user" {
			said = append(said, data(e)["content"])
		}
	}
	if len(said) != 2 || said[0] != "hi" || said[1] != "still there?" {
		t.Errorf("the log's user messages = %v, want both, as sent", said)
	}
}

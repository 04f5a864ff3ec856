package modeltest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
)

const userBody = `{"model":"m","messages":[{"role":"user","content":"hi there"}]}`

func post(t *testing.T, ctx context.Context, srv *modeltest.Server, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func withStream(body string, includeUsage bool) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m)
	m["stream"] = true
	if includeUsage {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// chunk is the part of a chat.completion.chunk the tests read.
type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// readSSE reads a whole event stream, checking its framing: every event is
// one "data: " line followed by a blank line, and the last is [DONE].
func readSSE(t *testing.T, resp *http.Response) (chunks []chunk, done bool) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		if !sc.Scan() || sc.Text() != "" {
			t.Fatalf("event %q is not followed by a blank line", line)
		}
		if done {
			t.Fatalf("event %q after [DONE]", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("object = %q", c.Object)
		}
		chunks = append(chunks, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return chunks, done
}

func TestStreamText(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.Reply("one two three")
	chunks, done := readSSE(t, post(t, t.Context(), srv, withStream(userBody, true)))
	if !done {
		t.Fatal("no [DONE]")
	}
	var text strings.Builder
	var finish string
	for i, c := range chunks[:len(chunks)-1] {
		if c.Usage != nil {
			t.Errorf("chunk %d has usage before the last", i)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Error("first chunk does not carry the role")
	}
	if text.String() != "one two three" || finish != "stop" {
		t.Errorf("text %q finish %q", text.String(), finish)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.PromptTokens != 2 || last.Usage.CompletionTokens != 3 || last.Usage.TotalTokens != 5 {
		t.Errorf("usage chunk = %+v", last)
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	srv := modeltest.NewServer(t)
	chunks, done := readSSE(t, post(t, t.Context(), srv, withStream(userBody, false)))
	if !done {
		t.Fatal("no [DONE]")
	}
	var text strings.Builder
	for _, c := range chunks {
		if c.Usage != nil || len(c.Choices) != 1 {
			t.Errorf("chunk %+v: usage without include_usage, or no choice", c)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if text.String() != modeltest.DefaultReply {
		t.Errorf("empty script answered %q, want the default", text.String())
	}
}

func TestStreamToolCalls(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyToolCalls(
		model.ToolCall{ID: "a", Name: "notes_write", Arguments: json.RawMessage(`{"title":"long enough to split"}`)},
		model.ToolCall{ID: "b", Name: "notes_list"},
	)
	chunks, _ := readSSE(t, post(t, t.Context(), srv, withStream(userBody, false)))
	type call struct{ id, typ, name, args string }
	calls := map[int]*call{}
	fragments := map[int]int{}
	var finish string
	for _, c := range chunks {
		ch := c.Choices[0]
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
		for _, tc := range ch.Delta.ToolCalls {
			cl := calls[tc.Index]
			if cl == nil {
				cl = &call{}
				calls[tc.Index] = cl
			}
			if tc.ID != "" {
				cl.id, cl.typ, cl.name = tc.ID, tc.Type, tc.Function.Name
			}
			if tc.Function.Arguments != "" {
				fragments[tc.Index]++
			}
			cl.args += tc.Function.Arguments
		}
	}
	if finish != "tool_calls" {
		t.Errorf("finish = %q", finish)
	}
	if a := calls[0]; a == nil || *a != (call{"a", "function", "notes_write", `{"title":"long enough to split"}`}) {
		t.Errorf("call 0 = %+v", a)
	}
	if b := calls[1]; b == nil || *b != (call{"b", "function", "notes_list", `{}`}) {
		t.Errorf("call 1 = %+v", b)
	}
	if fragments[0] < 2 {
		t.Errorf("call 0's arguments came in %d fragments, want them split", fragments[0])
	}
}

func TestNonStream(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.Reply("plain answer")
	srv.ReplyToolCalls(model.ToolCall{ID: "c", Name: "notes_list", Arguments: json.RawMessage(`{"a":1}`)})

	var got struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	decode := func() {
		t.Helper()
		resp := post(t, t.Context(), srv, userBody)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		got.Choices = nil
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
	}

	decode()
	if m := got.Choices[0].Message; got.Object != "chat.completion" || m.Role != "assistant" || m.Content == nil || *m.Content != "plain answer" || got.Choices[0].FinishReason != "stop" || got.Usage.PromptTokens != 2 {
		t.Errorf("text answer = %+v", got)
	}
	decode()
	m := got.Choices[0].Message
	if m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "c" || m.ToolCalls[0].Function.Arguments != `{"a":1}` || got.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool answer = %+v", got)
	}
	if srv.Pending() != 0 {
		t.Errorf("%d scripted replies left", srv.Pending())
	}
}

func TestErrorReply(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyError(http.StatusTooManyRequests)
	resp := post(t, t.Context(), srv, withStream(userBody, true))
	var body struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != "rate_limit_exceeded" || body.Error.Message == "" {
		t.Errorf("status %d, body %+v", resp.StatusCode, body)
	}
	// The script moves on.
	if resp := post(t, t.Context(), srv, userBody); resp.StatusCode != http.StatusOK {
		t.Errorf("next request: status %d", resp.StatusCode)
	}
}

func TestRequireAPIKey(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.RequireAPIKey("sk-good")
	srv.Reply("for the right key")
	for _, auth := range []string{"", "Bearer sk-bad", "sk-good", "Basic sk-good"} {
		if resp := post(t, t.Context(), srv, userBody, "Authorization", auth); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	if srv.Pending() != 1 {
		t.Error("a refused request used the scripted reply")
	}
	if resp := post(t, t.Context(), srv, userBody, "Authorization", "Bearer sk-good"); resp.StatusCode != http.StatusOK {
		t.Errorf("right key: status %d", resp.StatusCode)
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("recorded %d requests, want all 5", n)
	}
}

func TestBadRequests(t *testing.T) {
	srv := modeltest.NewServer(t)
	tests := map[string]struct {
		path, body string
		status     int
	}{
		"unknown path":      {"/embeddings", userBody, 404},
		"not JSON":          {"/chat/completions", "{", 400},
		"no model":          {"/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400},
		"no messages":       {"/chat/completions", `{"model":"m","messages":[]}`, 400},
		"unknown role":      {"/chat/completions", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, 400},
		"orphan tool":       {"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c","content":"r"}]}`, 400},
		"unanswered call":   {"/chat/completions", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{}"}}]},{"role":"user","content":"x"}]}`, 400},
		"unanswered at end": {"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{}"}}]}]}`, 400},
		"schema not object": {"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"t","parameters":[1]}}]}`, 400},
		"answered calls":    {"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"t","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"t","arguments":"{}"}}]},{"role":"tool","tool_call_id":"b","content":"1"},{"role":"tool","tool_call_id":"a","content":"2"}]}`, 200},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
		})
	}
	if n := len(srv.Requests()); n != len(tests) {
		t.Errorf("recorded %d requests, want %d", n, len(tests))
	}
}

func TestRecordsRequests(t *testing.T) {
	srv := modeltest.NewServer(t)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,"temperature":0.5,
		"messages":[{"role":"system","content":[{"type":"text","text":"sys"},{"type":"text","text":"tem"}]},
			{"role":"user","content":"q"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{\"x\":1}"}}]},
			{"role":"tool","tool_call_id":"c","content":"r"}],
		"tools":[{"type":"function","function":{"name":"t","description":"d","parameters":{"type":"object"}}}]}`
	readSSE(t, post(t, t.Context(), srv, body, "Authorization", "Bearer k"))
	r := srv.Requests()[0]
	if r.Method != "POST" || r.Path != "/v1/chat/completions" || r.Model != "m" || !r.Stream || !r.IncludeUsage ||
		r.Header.Get("Authorization") != "Bearer k" || *r.MaxCompletionTokens != 7 || *r.Temperature != 0.5 || r.MaxTokens != nil {
		t.Errorf("request = %+v", r)
	}
	if !bytes.Equal(r.Body, []byte(body)) {
		t.Error("raw body not recorded as sent")
	}
	m := r.Messages
	if len(m) != 4 {
		t.Fatalf("recorded %d messages, want 4", len(m))
	}
	// Text parts are joined; a null content is recorded as absent.
	if m[0].Content != "system" || !m[2].ContentAbsent || m[2].ToolCalls[0] != (modeltest.RecordedToolCall{ID: "c", Type: "function", Name: "t", Arguments: `{"x":1}`}) ||
		m[3].ToolCallID != "c" || m[3].Content != "r" {
		t.Errorf("messages = %+v", m)
	}
	if tl := r.Tools[0]; tl.Type != "function" || tl.Name != "t" || tl.Description != "d" || string(tl.Parameters) != `{"type":"object"}` {
		t.Errorf("tool = %+v", tl)
	}
}

func TestHoldRelease(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.Reply("held answer")
	release := srv.Hold()

	got := make(chan string, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(userBody))
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		var body struct {
			Choices []struct{ Message struct{ Content string } }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		got <- body.Choices[0].Message.Content
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := srv.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		t.Fatalf("answered %q while held", s)
	default:
	}
	release()
	release() // idempotent
	if s := <-got; s != "held answer" {
		t.Errorf("answer = %q", s)
	}
	if err := srv.WaitHeld(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHeldClientGone is the crash test's shape: the client holding the
// first request dies, a second client retries, and gets the scripted reply.
func TestHeldClientGone(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.Reply("the one reply")
	release := srv.Hold()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	first, killFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(first, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(userBody))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		firstDone <- err
	}()
	if err := srv.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	killFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("first client: %v", err)
	}
	if err := srv.WaitHeld(ctx, 0); err != nil { // the server noticed
		t.Fatal(err)
	}

	second := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(userBody))
		if err != nil {
			second <- nil
			return
		}
		second <- resp
	}()
	if err := srv.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	release()
	resp := <-second
	if resp == nil {
		t.Fatal("second request failed")
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "the one reply") {
		t.Errorf("second client got %s", b)
	}
	if reqs, err := srv.WaitRequests(ctx, 2); err != nil || len(reqs) != 2 {
		t.Errorf("requests: %d, %v", len(reqs), err)
	}
}

func TestCloseEndsPartialReply(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyPartial("never finishes")
	resp := post(t, t.Context(), srv, withStream(userBody, false))
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatal("no first chunk")
	}
	srv.Close() // returns: the held handler ends
	srv.Close()
}

package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
)

// newOpenAI returns a provider for srv, with opts adjusted by edit.
func newOpenAI(t *testing.T, srv *modeltest.Server, edit func(*model.OpenAIOptions)) *model.OpenAI {
	t.Helper()
	opts := &model.OpenAIOptions{BaseURL: srv.URL(), Model: "test-model"}
	if edit != nil {
		edit(opts)
	}
	p, err := model.NewOpenAI(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func userRequest(text string) model.Request {
	return model.Request{Messages: []model.Message{
		{Role: model.RoleSystem, Content: "You are a test."},
		{Role: model.RoleUser, Content: text},
	}}
}

// complete runs one step, failing the test if it does not return within a
// generous bound (a hang is a bug, not a slow machine).
func complete(t *testing.T, ctx context.Context, p model.Provider, req model.Request, onDelta func(string)) (model.Response, error) {
	t.Helper()
	type result struct {
		resp model.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := p.Complete(ctx, req, onDelta)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Complete did not return")
		return model.Response{}, nil
	}
}

func asModelError(t *testing.T, err error) *model.Error {
	t.Helper()
	var me *model.Error
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *model.Error", err, err)
	}
	return me
}

func TestOpenAIStreamsText(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.RequireAPIKey("sk-test-key")
	const text = "Hello there, the notes are ready for you."
	srv.Reply(text)
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.APIKey = "sk-test-key" })

	var deltas []string
	resp, err := complete(t, t.Context(), p, userRequest("say hello"), func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Role != model.RoleAssistant || resp.Message.Content != text {
		t.Errorf("message = %+v, want assistant %q", resp.Message, text)
	}
	if got := strings.Join(deltas, ""); got != text {
		t.Errorf("deltas concatenate to %q, want %q", got, text)
	}
	if len(deltas) < 2 {
		t.Errorf("got %d deltas, want the text streamed in several", len(deltas))
	}
	if resp.FinishReason != "stop" || len(resp.Message.ToolCalls) != 0 {
		t.Errorf("finish %q, tool calls %v", resp.FinishReason, resp.Message.ToolCalls)
	}
	// The scripted server counts words: "You are a test." + "say hello".
	if want := (model.Usage{PromptTokens: 6, CompletionTokens: 8}); resp.Usage != want {
		t.Errorf("usage = %+v, want %+v", resp.Usage, want)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Model != "test-model" || !r.Stream || !r.IncludeUsage {
		t.Errorf("request path %q model %q stream %v include_usage %v", r.Path, r.Model, r.Stream, r.IncludeUsage)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-test-key" {
		t.Errorf("Authorization = %q", got)
	}
	if r.MaxCompletionTokens != nil || r.MaxTokens != nil || r.Temperature != nil {
		t.Errorf("unset options were sent: %s", r.Body)
	}
}

func TestOpenAINoAPIKeyNoAuthorization(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	if _, err := complete(t, t.Context(), p, userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none without an API key", got)
	}
}

// TestOpenAIIgnoresEnvironment checks that the SDK's OPENAI_* variables do
// not reach the request: the provider is configured by its options only.
func TestOpenAIIgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-env")
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	if _, err := complete(t, t.Context(), p, userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	for _, name := range []string{"Authorization", "OpenAI-Organization", "OpenAI-Project"} {
		if v := h.Get(name); v != "" {
			t.Errorf("%s = %q came from the environment", name, v)
		}
	}
}

func TestOpenAIParallelToolCalls(t *testing.T) {
	srv := modeltest.NewServer(t)
	calls := []model.ToolCall{
		{ID: "call_a", Name: "notes_write", Arguments: json.RawMessage(`{"title":"Grüße","body":"a longer body, split across chunks","tags":["x","y"]}`)},
		{ID: "call_b", Name: "notes_list", Arguments: json.RawMessage(`{}`)},
		{ID: "call_c", Name: "weather", Arguments: json.RawMessage(`{"city":"Zürich","days":3}`)},
	}
	srv.ReplyToolCalls(calls...)
	p := newOpenAI(t, srv, nil)

	var deltas []string
	resp, err := complete(t, t.Context(), p, userRequest("do three things"), func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.FinishReason != "tool_calls" || resp.Message.Content != "" || len(deltas) != 0 {
		t.Errorf("finish %q, content %q, deltas %q", resp.FinishReason, resp.Message.Content, deltas)
	}
	if !reflect.DeepEqual(resp.Message.ToolCalls, calls) {
		t.Errorf("tool calls =\n%s\nwant\n%s", dump(resp.Message.ToolCalls), dump(calls))
	}
}

// TestOpenAIRepeatedToolCallIDs has a server give two calls of one
// response the same id, and omit another's: each call gets an id of its
// own (the first keeps the server's), so each tool message answers one.
func TestOpenAIRepeatedToolCallIDs(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyToolCalls(
		model.ToolCall{ID: "call_a", Name: "notes_list", Arguments: json.RawMessage(`{}`)},
		model.ToolCall{ID: "call_a", Name: "notes_read", Arguments: json.RawMessage(`{"name":"x"}`)},
		model.ToolCall{Name: "notes_list", Arguments: json.RawMessage(`{}`)},
	)
	resp, err := complete(t, t.Context(), newOpenAI(t, srv, nil), userRequest("do three things"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, c := range resp.Message.ToolCalls {
		if c.ID == "" || ids[c.ID] {
			t.Errorf("tool calls %s: an id missing or used twice", dump(resp.Message.ToolCalls))
		}
		ids[c.ID] = true
	}
	if len(resp.Message.ToolCalls) != 3 || resp.Message.ToolCalls[0].ID != "call_a" || resp.Message.ToolCalls[1].Name != "notes_read" {
		t.Errorf("tool calls %s", dump(resp.Message.ToolCalls))
	}
}

func TestOpenAIMalformedToolArguments(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyToolCalls(
		model.ToolCall{ID: "c1", Name: "notes_write", Arguments: json.RawMessage(`{"title": "unterminated`)},
		model.ToolCall{ID: "c2", Name: "notes_write", Arguments: json.RawMessage(`["not", "an", "object"]`)},
		model.ToolCall{ID: "c3", Name: "notes_list", Arguments: json.RawMessage(` `)},
		model.ToolCall{ID: "c4", Name: "notes_list", Arguments: json.RawMessage(`{"ok":true}`)},
	)
	srv.Reply("noted")
	p := newOpenAI(t, srv, nil)
	req := userRequest("write")
	resp, err := complete(t, t.Context(), p, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Message.ToolCalls
	if len(got) != 4 {
		t.Fatalf("got %d tool calls, want 4 (malformed ones kept)", len(got))
	}
	for _, i := range []int{0, 1} {
		if got[i].Arguments != nil || got[i].ArgumentsError == "" {
			t.Errorf("call %s: arguments %s, error %q; want nil arguments and an error", got[i].ID, got[i].Arguments, got[i].ArgumentsError)
		}
	}
	if !strings.Contains(got[1].ArgumentsError, "JSON object") {
		t.Errorf("call c2: error %q should ask for a JSON object", got[1].ArgumentsError)
	}
	if string(got[2].Arguments) != "{}" || got[2].ArgumentsError != "" {
		t.Errorf("call c3 (blank arguments): %s %q, want {}", got[2].Arguments, got[2].ArgumentsError)
	}
	if string(got[3].Arguments) != `{"ok":true}` || got[3].ArgumentsError != "" {
		t.Errorf("call c4: %s %q", got[3].Arguments, got[3].ArgumentsError)
	}

	// The calls go back as history: a malformed call's arguments as {}.
	req.Messages = append(req.Messages, resp.Message)
	for _, tc := range got {
		content := "ok"
		if tc.ArgumentsError != "" {
			content = "error: " + tc.ArgumentsError
		}
		req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: tc.ID, Content: content})
	}
	if _, err := complete(t, t.Context(), p, req, nil); err != nil {
		t.Fatal(err)
	}
	sent := srv.Requests()[1].Messages[2].ToolCalls
	wantArgs := []string{"{}", "{}", "{}", `{"ok":true}`}
	for i, tc := range sent {
		if tc.Arguments != wantArgs[i] {
			t.Errorf("history call %s sent arguments %q, want %q", tc.ID, tc.Arguments, wantArgs[i])
		}
	}
}

func TestOpenAIRequestMapping(t *testing.T) {
	srv := modeltest.NewServer(t)
	temp := 0.25
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) {
		o.MaxTokens = 512
		o.Temperature = &temp
	})
	// A big integer and nested key order must survive as MCP gave them.
	writeSchema := json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":12345678901234567890},"body":{"type":"string"}},"required":["title"]}`)
	req := model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "You are Usher."},
			{Role: model.RoleUser, Content: "List and write notes."},
			{Role: model.RoleAssistant, Content: "On it.", ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "notes_list", Arguments: json.RawMessage(`{}`)},
				{ID: "call_2", Name: "notes_write", Arguments: json.RawMessage(`{"title":"t","body":"b"}`)},
			}},
			{Role: model.RoleTool, ToolCallID: "call_1", Content: `["a","b"]`},
			{Role: model.RoleTool, ToolCallID: "call_2", Content: "approval required"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
				{ID: "call_3", Name: "notes_list", Arguments: json.RawMessage(`{"limit":2}`)},
			}},
			{Role: model.RoleTool, ToolCallID: "call_3", Content: ""},
			{Role: model.RoleAssistant, Content: "Done."},
			{Role: model.RoleUser, Content: "Thanks!"},
		},
		Tools: []model.Tool{
			{Name: "notes_list", Description: "List notes."},
			{Name: "notes_write", Description: "Write a note.", InputSchema: writeSchema},
		},
	}
	before := deepCopy(t, req)
	if _, err := complete(t, t.Context(), p, req, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req, before) {
		t.Error("Complete modified the request")
	}

	r := srv.Requests()[0]
	want := []modeltest.RecordedMessage{
		{Role: "system", Content: "You are Usher."},
		{Role: "user", Content: "List and write notes."},
		{Role: "assistant", Content: "On it.", ToolCalls: []modeltest.RecordedToolCall{
			{ID: "call_1", Type: "function", Name: "notes_list", Arguments: `{}`},
			{ID: "call_2", Type: "function", Name: "notes_write", Arguments: `{"title":"t","body":"b"}`},
		}},
		{Role: "tool", ToolCallID: "call_1", Content: `["a","b"]`},
		{Role: "tool", ToolCallID: "call_2", Content: "approval required"},
		{Role: "assistant", ContentAbsent: true, ToolCalls: []modeltest.RecordedToolCall{
			{ID: "call_3", Type: "function", Name: "notes_list", Arguments: `{"limit":2}`},
		}},
		{Role: "tool", ToolCallID: "call_3", Content: ""},
		{Role: "assistant", Content: "Done."},
		{Role: "user", Content: "Thanks!"},
	}
	if !reflect.DeepEqual(r.Messages, want) {
		t.Errorf("messages =\n%s\nwant\n%s", dump(r.Messages), dump(want))
	}

	if len(r.Tools) != 2 {
		t.Fatalf("got %d tools, want 2", len(r.Tools))
	}
	if tl := r.Tools[0]; tl.Type != "function" || tl.Name != "notes_list" || tl.Description != "List notes." {
		t.Errorf("tool 0 = %+v", tl)
	}
	assertJSONEqual(t, "schema of a tool without one", r.Tools[0].Parameters, `{"type":"object","properties":{}}`)
	if tl := r.Tools[1]; tl.Type != "function" || tl.Name != "notes_write" || tl.Description != "Write a note." {
		t.Errorf("tool 1 = %+v", tl)
	}
	assertJSONEqual(t, "notes_write schema", r.Tools[1].Parameters, string(writeSchema))
	if !bytes.Contains(r.Tools[1].Parameters, []byte(`{"type":"string","maxLength":12345678901234567890}`)) {
		t.Errorf("nested schema not sent verbatim: %s", r.Tools[1].Parameters)
	}
	if r.MaxCompletionTokens == nil || *r.MaxCompletionTokens != 512 {
		t.Errorf("max_completion_tokens = %v, want 512", r.MaxCompletionTokens)
	}
	if r.Temperature == nil || *r.Temperature != 0.25 {
		t.Errorf("temperature = %v, want 0.25", r.Temperature)
	}
}

func TestOpenAITemperatureZeroIsSent(t *testing.T) {
	srv := modeltest.NewServer(t)
	zero := 0.0
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.Temperature = &zero })
	if _, err := complete(t, t.Context(), p, userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Temperature; got == nil || *got != 0 {
		t.Errorf("temperature = %v, want an explicit 0", got)
	}
}

func TestOpenAIInvalidRequest(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	for name, req := range map[string]model.Request{
		"no messages":        {},
		"unknown role":       {Messages: []model.Message{{Role: "narrator", Content: "x"}}},
		"tool without id":    {Messages: []model.Message{{Role: model.RoleTool, Content: "x"}}},
		"non-text parts":     {Messages: []model.Message{{Role: model.RoleUser, Content: "x", Parts: []model.Part{{Kind: "image", MIMEType: "image/png"}}}}},
		"an assistant image": {Messages: []model.Message{{Role: model.RoleAssistant, Content: "x", Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte{1}}}}}},
		"a file part":        {Messages: []model.Message{{Role: model.RoleUser, Content: "x", Parts: []model.Part{{Kind: "file", MIMEType: "text/plain", Data: []byte{1}}}}}},
		"schema not object":  {Messages: userRequest("x").Messages, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`[1]`)}}},
		"schema not JSON":    {Messages: userRequest("x").Messages, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`{`)}}},
		"schema JSON string": {Messages: userRequest("x").Messages, Tools: []model.Tool{{Name: "t", InputSchema: json.RawMessage(`"object"`)}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := complete(t, t.Context(), p, req, nil)
			me := asModelError(t, err)
			if me.Retryable || me.StatusCode != 0 || !strings.HasPrefix(me.Message, "invalid model request") {
				t.Errorf("error = %+v", me)
			}
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("invalid requests reached the server %d times", n)
	}
}

func TestOpenAIErrorStatuses(t *testing.T) {
	tests := []struct {
		status    int
		retryable bool
		contains  string
	}{
		{http.StatusBadRequest, false, "rejected the request"},
		{http.StatusUnauthorized, false, "API key"},
		{http.StatusForbidden, false, "refused access"},
		{http.StatusNotFound, false, "no such model"},
		{http.StatusRequestTimeout, true, "in time"},
		{http.StatusTooManyRequests, true, "rate limiting"},
		{http.StatusInternalServerError, true, "failed"},
		{http.StatusBadGateway, true, "failed"},
		{http.StatusServiceUnavailable, true, "failed"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			srv := modeltest.NewServer(t)
			srv.ReplyError(tt.status)
			const key = "sk-secret-key-that-must-not-leak"
			p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.APIKey = key })
			_, err := complete(t, t.Context(), p, userRequest("hi"), nil)
			me := asModelError(t, err)
			if me.Provider != "openai" || me.StatusCode != tt.status || me.Retryable != tt.retryable {
				t.Errorf("error = %+v, want status %d retryable %v", me, tt.status, tt.retryable)
			}
			if !strings.Contains(me.Message, tt.contains) {
				t.Errorf("message %q should say %q", me.Message, tt.contains)
			}
			assertSafe(t, err, key)
			// The SDK's own retries are off: exactly one request.
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server got %d requests, want 1 (no SDK retries)", n)
			}
		})
	}
}

func TestOpenAIWrongKey(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.RequireAPIKey("sk-the-right-key")
	const wrong = "sk-the-wrong-key-1234567890"
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.APIKey = wrong })
	_, err := complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if me.StatusCode != http.StatusUnauthorized || me.Retryable {
		t.Errorf("error = %+v, want a non-retryable 401", me)
	}
	// The server's 401 body quotes the key; the error must not.
	assertSafe(t, err, wrong)
	if strings.Contains(me.Message, "Incorrect") {
		t.Errorf("message %q repeats the provider's text", me.Message)
	}
}

func TestOpenAIQuotaExhaustedNotRetryable(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = writeString(w, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
	}))
	t.Cleanup(proxy.Close)
	p, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: proxy.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if me.StatusCode != 429 || me.Retryable || !strings.Contains(me.Message, "quota") {
		t.Errorf("error = %+v, want a non-retryable quota error", me)
	}
}

// TestOpenAIErrorBodyNotJSON covers a proxy in front of the model answering
// with its own HTML page.
func TestOpenAIErrorBodyNotJSON(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = writeString(w, "<html><body>502 Bad Gateway</body></html>")
	}))
	t.Cleanup(proxy.Close)
	p, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: proxy.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if me.StatusCode != http.StatusBadGateway || !me.Retryable {
		t.Errorf("error = %+v, want a retryable 502", me)
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.APIKey = "sk-unreachable-secret" })
	srv.Close()
	_, err := complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if me.StatusCode != 0 || !me.Retryable || !strings.Contains(me.Message, "127.0.0.1") {
		t.Errorf("error = %+v, want a retryable network error naming the host", me)
	}
	assertSafe(t, err, "sk-unreachable-secret")
}

func TestOpenAICancelMidStream(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyPartial("the first words of an answer that never ends")
	p := newOpenAI(t, srv, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	_, err := complete(t, ctx, p, userRequest("hi"), func(d string) {
		deltas = append(deltas, d)
		cancel() // the run was cancelled while the answer streamed
	})
	me := asModelError(t, err)
	if !errors.Is(err, context.Canceled) || me.Retryable {
		t.Errorf("error = %+v (%v), want a non-retryable cancellation unwrapping to context.Canceled", me, err)
	}
	if len(deltas) == 0 {
		t.Error("no delta arrived before the cancel")
	}
}

func TestOpenAITimeout(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyPartial("stalls")
	p := newOpenAI(t, srv, func(o *model.OpenAIOptions) { o.Timeout = 200 * time.Millisecond })
	_, err := complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if !me.Retryable || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(me.Message, "200ms") {
		t.Errorf("error = %+v, want a retryable timeout", me)
	}
}

func TestOpenAITruncatedStream(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyTruncated("half an")
	p := newOpenAI(t, srv, nil)
	_, err := complete(t, t.Context(), p, userRequest("hi"), nil)
	me := asModelError(t, err)
	if !me.Retryable || !strings.Contains(me.Message, "ended before") {
		t.Errorf("error = %+v, want a retryable truncation", me)
	}
}

// TestOpenAIBrokenStream: a connection dropped in the middle of the
// answer is said to have broken off, not that the provider could not be
// reached, and may be retried.
func TestOpenAIBrokenStream(t *testing.T) {
	srv := modeltest.NewServer(t)
	srv.ReplyBroken("half an")
	p := newOpenAI(t, srv, nil)
	var deltas []string
	_, err := complete(t, t.Context(), p, userRequest("hi"), func(s string) { deltas = append(deltas, s) })
	me := asModelError(t, err)
	if !me.Retryable || !strings.Contains(me.Message, "broke off during its answer") || len(deltas) == 0 {
		t.Errorf("error = %+v after %d deltas, want a retryable break after some text", me, len(deltas))
	}
}

// TestOpenAIHistoryRejected shows the scripted server refusing history
// whose tool call has no answer, as OpenAI does, and the provider reporting
// it as a non-retryable 400.
func TestOpenAIHistoryRejected(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	req := userRequest("hi")
	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_x", Name: "t", Arguments: json.RawMessage(`{}`)}}},
		model.Message{Role: model.RoleUser, Content: "and?"})
	_, err := complete(t, t.Context(), p, req, nil)
	me := asModelError(t, err)
	if me.StatusCode != http.StatusBadRequest || me.Retryable {
		t.Errorf("error = %+v, want a non-retryable 400", me)
	}
}

func TestNewOpenAIValidation(t *testing.T) {
	bad := 3.0
	_, err := model.NewOpenAI(&model.OpenAIOptions{
		BaseURL:     "ftp://example.com/v1",
		Timeout:     -time.Second,
		MaxTokens:   -1,
		Temperature: &bad,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"BaseURL", "Model", "Timeout", "MaxTokens", "Temperature"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("combined error %q does not mention %s", err, want)
		}
	}

	for name, opts := range map[string]*model.OpenAIOptions{
		"nil options":           nil,
		"default URL needs key": {Model: "gpt"},
		"credentials in URL":    {BaseURL: "https://user:sk-in-url@example.com/v1", Model: "m"},
		"query in URL":          {BaseURL: "https://example.com/v1?api-version=1", Model: "m"},
		"no host":               {BaseURL: "http:///v1", Model: "m"},
		"key with newline":      {BaseURL: "http://localhost/v1", Model: "m", APIKey: "sk\r\nX-Evil: 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := model.NewOpenAI(opts)
			if err == nil {
				t.Fatal("no error")
			}
			assertSafe(t, err, "sk-in-url")
		})
	}

	if _, err := model.NewOpenAI(&model.OpenAIOptions{Model: "gpt", APIKey: "sk"}); err != nil {
		t.Errorf("default base URL with a key: %v", err)
	}
}

func TestOpenAIOptionsRedactKey(t *testing.T) {
	const key = "sk-very-secret"
	temp := 0.5
	opts := model.OpenAIOptions{BaseURL: "http://localhost/v1", APIKey: key, Model: "m", Temperature: &temp}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "model", opts, "ptr", &opts)
	for _, s := range []string{
		fmt.Sprintf("%v", opts), fmt.Sprintf("%+v", opts), fmt.Sprintf("%#v", opts),
		fmt.Sprintf("%v", &opts), fmt.Sprint(opts), logged.String(),
	} {
		if strings.Contains(s, key) {
			t.Errorf("key shown in %q", s)
		}
		if !strings.Contains(s, "redacted") {
			t.Errorf("%q does not say the key is redacted", s)
		}
	}
}

// assertSafe checks that an error's text holds no secret.
func assertSafe(t *testing.T, err error, secret string) {
	t.Helper()
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
		if strings.Contains(s, secret) {
			t.Errorf("error text %q contains the secret", s)
		}
	}
}

func assertJSONEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

// deepCopy copies req down to the bytes, keeping nil as nil.
func deepCopy(t *testing.T, req model.Request) model.Request {
	t.Helper()
	raw := func(b json.RawMessage) json.RawMessage {
		if b == nil {
			return nil
		}
		return append(json.RawMessage{}, b...)
	}
	var c model.Request
	for _, m := range req.Messages {
		cm := m
		cm.ToolCalls = nil
		for _, tc := range m.ToolCalls {
			tc.Arguments = raw(tc.Arguments)
			cm.ToolCalls = append(cm.ToolCalls, tc)
		}
		c.Messages = append(c.Messages, cm)
	}
	for _, tl := range req.Tools {
		tl.InputSchema = raw(tl.InputSchema)
		c.Tools = append(c.Tools, tl)
	}
	return c
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func writeString(w http.ResponseWriter, s string) (int, error) { return w.Write([]byte(s)) }

// A request that names a model is sent to that model; one that names
// none, to the configured one.
func TestOpenAIRequestModel(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	srv.Reply("one")
	srv.Reply("two")
	if _, err := p.Complete(t.Context(), userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	req := userRequest("hi")
	req.Model = "other-model"
	if _, err := p.Complete(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	got := srv.Requests()
	if len(got) != 2 || got[0].Model != "test-model" || got[1].Model != "other-model" {
		t.Errorf("models requested: %+v", got)
	}
}

// TestOpenAIImageParts: a user message's images (with their data) go as
// image_url parts holding data URLs, after its text.
func TestOpenAIImageParts(t *testing.T) {
	srv := modeltest.NewServer(t)
	p := newOpenAI(t, srv, nil)
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "what is it?",
		Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte("png bytes")}}}}}
	if _, err := complete(t, t.Context(), p, req, nil); err != nil {
		t.Fatal(err)
	}
	body := string(srv.Requests()[0].Body)
	want := `[{"text":"what is it?","type":"text"},{"image_url":{"url":"data:image/png;base64,cG5nIGJ5dGVz"},"type":"image_url"}]`
	if !strings.Contains(body, want) {
		t.Errorf("the request's content is not %s: %s", want, body)
	}
}

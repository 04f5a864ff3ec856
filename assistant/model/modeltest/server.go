package modeltest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/usherhq/usher/assistant/model"
)

// DefaultReply is the text the server answers with when its script is
// empty, until [Server.SetDefaultReply] changes it.
const DefaultReply = "This is the scripted model's default reply."

// maxBody bounds a request body; larger requests get 413.
const maxBody = 16 << 20

// created is the fixed "created" time of every answer, so answers are
// deterministic.
const created = 1700000000

// Server is a scripted OpenAI-compatible Chat Completions server. Its
// methods are safe for concurrent use.
type Server struct {
	srv       *httptest.Server
	closing   chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	script   []reply
	def      string
	apiKey   string
	requests []RecordedRequest
	forget   bool
	seen     int // requests received
	respond  func(RecordedRequest) (Answer, bool)
	changed  chan struct{} // closed and replaced when requests or held change
	holds    int
	gate     chan struct{} // closed when the last hold is released
	held     int           // requests waiting at the gate now
}

type replyKind int

const (
	replyText replyKind = iota
	replyToolCalls
	replyError
	replyPartial
	replyTruncated
	replyBroken
)

// reply is one scripted answer.
type reply struct {
	kind   replyKind
	text   string
	calls  []model.ToolCall
	status int
}

// RecordedRequest is one request as the server received it.
type RecordedRequest struct {
	// Method and Path are the HTTP method and URL path.
	Method, Path string
	// Header is a copy of the request's headers (Authorization included).
	Header http.Header
	// Body is the raw request body.
	Body []byte
	// Model is the requested model.
	Model string
	// Stream reports whether the client asked for a stream.
	Stream bool
	// IncludeUsage reports stream_options.include_usage.
	IncludeUsage bool
	// MaxCompletionTokens and MaxTokens are the token caps sent, if any.
	MaxCompletionTokens, MaxTokens *int64
	// Temperature is the temperature sent, if any.
	Temperature *float64
	// Messages are the conversation's messages, in order.
	Messages []RecordedMessage
	// Tools are the tools offered.
	Tools []RecordedTool
}

// RecordedMessage is one message of a recorded request.
type RecordedMessage struct {
	// Role is the message's role.
	Role string
	// Content is the message text: the string, or the text parts joined.
	Content string
	// ContentAbsent reports that content was missing or null.
	ContentAbsent bool
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []RecordedToolCall
	// ToolCallID is a tool message's tool_call_id.
	ToolCallID string
}

// RecordedToolCall is one tool call of a recorded assistant message.
type RecordedToolCall struct {
	// ID, Type and Name are as sent.
	ID, Type, Name string
	// Arguments is the arguments string exactly as sent.
	Arguments string
}

// RecordedTool is one tool of a recorded request.
type RecordedTool struct {
	// Type is the tool's type ("function").
	Type string
	// Name and Description are the function's.
	Name, Description string
	// Parameters is the function's JSON Schema, as sent.
	Parameters json.RawMessage
}

// NewServer starts a server on loopback and closes it when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		closing: make(chan struct{}),
		def:     DefaultReply,
		changed: make(chan struct{}),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// URL returns the base URL to configure a client with; it ends in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// UsherEnv is the environment that points usher serve at this server as
// its model (an OpenAI-compatible provider, model "scripted"), with the
// extra name, value pairs.
func (s *Server) UsherEnv(extra ...string) map[string]string {
	env := map[string]string{
		"USHER_MODEL_PROVIDER": "openai", "USHER_MODEL_BASE_URL": s.URL(), "USHER_MODEL_NAME": "scripted",
		"USHER_MODEL_API_KEY": "test-key",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// Close stops the server: held and partial replies end at once. It is
// idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// RequireAPIKey makes the server answer 401 to requests without
// "Authorization: Bearer KEY". The 401 body quotes the key presented, as
// some providers do, so tests can check that a client never shows it.
func (s *Server) RequireAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// Reply scripts a text answer. Streamed, it arrives one word at a time.
func (s *Server) Reply(text string) { s.push(reply{kind: replyText, text: text}) }

// ReplyToolCalls scripts an answer that calls tools (parallel calls when
// more than one). Arguments are sent as they are, even when they are not
// valid JSON; nil Arguments are sent as {}. Streamed, each call's arguments
// arrive split into fragments, interleaved with the other calls'.
func (s *Server) ReplyToolCalls(calls ...model.ToolCall) {
	s.push(reply{kind: replyToolCalls, calls: append([]model.ToolCall(nil), calls...)})
}

// ReplyError scripts an error status with an OpenAI-style error body.
func (s *Server) ReplyError(status int) { s.push(reply{kind: replyError, status: status}) }

// ReplyPartial scripts an answer that streams text and then neither
// finishes nor ends until the client goes away or the server closes: for
// tests that cancel a step mid-stream. Not streamed, it just never answers.
func (s *Server) ReplyPartial(text string) { s.push(reply{kind: replyPartial, text: text}) }

// ReplyTruncated scripts an answer that streams text and then ends the
// response cleanly without a finish reason or [DONE], as a failing proxy
// would. Not streamed, it is an empty 200 response.
func (s *Server) ReplyTruncated(text string) { s.push(reply{kind: replyTruncated, text: text}) }

// ReplyBroken scripts an answer that streams text and then drops the
// connection in the middle of the response, as a provider that crashes or
// a network cut does.
func (s *Server) ReplyBroken(text string) { s.push(reply{kind: replyBroken, text: text}) }

// SetDefaultReply sets the text answered when the script is empty.
func (s *Server) SetDefaultReply(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = text
}

// Answer is the reply a responder chooses for one request: Text, or,
// when Status is not 0, an error status with an OpenAI-style error body.
type Answer struct {
	Text   string
	Status int
}

// Respond makes fn choose the answer to every request it reports true for,
// ahead of the script: for tests whose requests are of kinds a script
// cannot order, such as a summariser's and a turn's. Requests fn declines
// take the script's next reply. nil removes fn.
func (s *Server) Respond(fn func(RecordedRequest) (Answer, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = fn
}

// Forget makes the server keep no requests: Requests and WaitRequests
// see none from then on (responders still do). For benchmarks whose
// memory the records would cloud.
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget, s.requests = true, nil
}

// Pending returns how many scripted replies have not been used yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

func (s *Server) push(r reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r)
}

// Hold makes the server hold every valid request (after recording it) until
// release is called, then answer it. A held request whose client goes away
// uses no scripted reply, so the reply goes to the next request (a retry by
// another replica, say). Holds nest: requests wait until every hold is
// released. release is idempotent.
func (s *Server) Hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds == 0 {
		s.gate = make(chan struct{})
	}
	s.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.holds--
			if s.holds == 0 {
				close(s.gate)
				s.gate = nil
			}
		})
	}
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedRequest(nil), s.requests...)
}

// WaitRequests waits until at least n requests have been received and
// returns them all, or returns ctx's error.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]RecordedRequest, error) {
	var reqs []RecordedRequest
	err := s.waitFor(ctx, func() bool {
		if len(s.requests) < n {
			return false
		}
		reqs = append([]RecordedRequest(nil), s.requests...)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("modeltest: waiting for %d requests: %w", n, err)
	}
	return reqs, nil
}

// WaitHeld waits until exactly n requests are being held by [Server.Hold]
// (arrived and not yet released, nor gone), or returns ctx's error. A test
// uses it to know that a step is in flight, or that a client that went away
// was noticed.
func (s *Server) WaitHeld(ctx context.Context, n int) error {
	if err := s.waitFor(ctx, func() bool { return s.held == n }); err != nil {
		return fmt.Errorf("modeltest: waiting for %d held requests: %w", n, err)
	}
	return nil
}

// waitFor waits until cond, called with s.mu held, reports true.
func (s *Server) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		if cond() {
			s.mu.Unlock()
			return nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notify wakes the waiters of waitFor; s.mu must be held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// record keeps rec and returns its number, counting from 1.
func (s *Server) record(rec RecordedRequest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if !s.forget {
		s.requests = append(s.requests, rec)
	}
	s.notify()
	return s.seen
}

// wireRequest is the part of a Chat Completions request the server reads.
type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxCompletionTokens *int64   `json:"max_completion_tokens"`
	MaxTokens           *int64   `json:"max_tokens"`
	Temperature         *float64 `json:"temperature"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	rec := RecordedRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	var req wireRequest
	decodeErr := json.Unmarshal(body, &req)
	if decodeErr == nil {
		fill(&rec, &req)
	}
	n := s.record(rec)

	switch {
	case err != nil:
		writeError(w, http.StatusRequestEntityTooLarge, "request body too large", "invalid_request_error", "")
		return
	case r.URL.Path != "/v1/chat/completions":
		writeError(w, http.StatusNotFound, "unknown path "+r.URL.Path, "invalid_request_error", "unknown_url")
		return
	case r.Method != http.MethodPost:
		writeError(w, http.StatusMethodNotAllowed, "use POST", "invalid_request_error", "")
		return
	}
	s.mu.Lock()
	key := s.apiKey
	s.mu.Unlock()
	presented, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key != "" && (!hasBearer || subtle.ConstantTimeCompare([]byte(presented), []byte(key)) != 1) {
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided: "+presented+".", "invalid_request_error", "invalid_api_key")
		return
	}
	if decodeErr != nil {
		writeError(w, http.StatusBadRequest, "the body is not a JSON object of a chat completion request", "invalid_request_error", "")
		return
	}
	if msg := validate(&req); msg != "" {
		writeError(w, http.StatusBadRequest, msg, "invalid_request_error", "")
		return
	}

	if !s.wait(r.Context()) {
		return // the client went away, or the server is closing
	}
	rep := s.next(rec)
	switch rep.kind {
	case replyError:
		msg := fmt.Sprintf("scripted error %d", rep.status)
		if rep.status == http.StatusUnauthorized {
			msg = "Incorrect API key provided: " + presented + "."
		}
		writeError(w, rep.status, msg, errorType(rep.status), errorCode(rep.status))
	case replyPartial:
		if req.Stream {
			s.stream(w, &req, rep, n)
		}
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
	case replyBroken:
		if req.Stream {
			s.stream(w, &req, rep, n)
		}
		panic(http.ErrAbortHandler) // net/http drops the connection mid-response
	default:
		if req.Stream {
			s.stream(w, &req, rep, n)
		} else if rep.kind != replyTruncated {
			s.complete(w, &req, rep, n)
		}
	}
}

// wait blocks while the server is held; it reports false if the request
// ended first.
func (s *Server) wait(ctx context.Context) bool {
	s.mu.Lock()
	gate := s.gate
	if gate == nil {
		s.mu.Unlock()
		return true
	}
	s.held++
	s.notify()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.held--
		s.notify()
		s.mu.Unlock()
	}()
	select {
	case <-gate:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

// next takes the responder's answer to rec, or the next scripted reply,
// or the default.
func (s *Server) next(rec RecordedRequest) reply {
	s.mu.Lock()
	respond := s.respond
	s.mu.Unlock()
	if respond != nil {
		if a, ok := respond(rec); ok {
			if a.Status != 0 {
				return reply{kind: replyError, status: a.Status}
			}
			return reply{kind: replyText, text: a.Text}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.script) == 0 {
		return reply{kind: replyText, text: s.def}
	}
	r := s.script[0]
	s.script = s.script[1:]
	return r
}

func fill(rec *RecordedRequest, req *wireRequest) {
	rec.Model = req.Model
	rec.Stream = req.Stream
	rec.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	rec.MaxCompletionTokens = req.MaxCompletionTokens
	rec.MaxTokens = req.MaxTokens
	rec.Temperature = req.Temperature
	for _, m := range req.Messages {
		text, absent := contentText(m.Content)
		rm := RecordedMessage{Role: m.Role, Content: text, ContentAbsent: absent, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			rm.ToolCalls = append(rm.ToolCalls, RecordedToolCall{
				ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
			})
		}
		rec.Messages = append(rec.Messages, rm)
	}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, RecordedTool{
			Type: t.Type, Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters,
		})
	}
}

// contentText reads a message's content: a string, or an array of parts
// whose text parts are joined.
func contentText(raw json.RawMessage) (text string, absent bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, false
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), false
	}
	return string(raw), false
}

// validate checks what OpenAI checks about a conversation's shape and
// returns its complaint, or "".
func validate(req *wireRequest) string {
	if req.Model == "" {
		return "you must provide a model parameter"
	}
	if len(req.Messages) == 0 {
		return "'messages' must contain at least one message"
	}
	var open []string // tool calls of the last assistant message not yet answered
	for i, m := range req.Messages {
		if m.Role != "tool" && len(open) > 0 {
			return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", ")
		}
		switch m.Role {
		case "system", "developer", "user":
		case "assistant":
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Function.Name == "" {
					return fmt.Sprintf("messages[%d].tool_calls: each tool call needs an id and a function name", i)
				}
				open = append(open, tc.ID)
			}
		case "tool":
			j := indexOf(open, m.ToolCallID)
			if j < 0 {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[%d], tool_call_id %q).", i, m.ToolCallID)
			}
			open = append(open[:j], open[j+1:]...)
		default:
			return fmt.Sprintf("messages[%d].role: unknown role %q", i, m.Role)
		}
	}
	if len(open) > 0 {
		return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", ")
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return fmt.Sprintf("tools[%d]: a tool needs type function and a function name", i)
		}
		if len(t.Function.Parameters) > 0 {
			var obj map[string]json.RawMessage
			if json.Unmarshal(t.Function.Parameters, &obj) != nil || obj == nil {
				return fmt.Sprintf("tools[%d].function.parameters: must be a JSON Schema object", i)
			}
		}
	}
	return ""
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func errorCode(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_api_key"
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 500:
		return "server_error"
	default:
		return "scripted_error"
	}
}

func writeError(w http.ResponseWriter, status int, message, typ, code string) {
	body := map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": nilIfEmpty(code),
	}}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// usage computes deterministic token counts: the words of the request's
// message contents, and the words of the answer plus one per tool call.
func usage(req *wireRequest, rep reply) map[string]int {
	prompt := 0
	for _, m := range req.Messages {
		text, _ := contentText(m.Content)
		prompt += len(strings.Fields(text))
	}
	completion := len(strings.Fields(rep.text)) + len(rep.calls)
	return map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
}

func finishReason(rep reply) string {
	if rep.kind == replyToolCalls {
		return "tool_calls"
	}
	return "stop"
}

func arguments(tc model.ToolCall) string {
	if tc.Arguments == nil {
		return "{}"
	}
	return string(tc.Arguments)
}

// complete writes a non-streamed chat.completion object.
func (s *Server) complete(w http.ResponseWriter, req *wireRequest, rep reply, n int) {
	msg := map[string]any{"role": "assistant", "content": rep.text, "refusal": nil}
	if rep.kind == replyToolCalls {
		msg["content"] = nil
		var calls []map[string]any
		for _, tc := range rep.calls {
			calls = append(calls, map[string]any{
				"id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": arguments(tc)},
			})
		}
		msg["tool_calls"] = calls
	}
	body := map[string]any{
		"id": fmt.Sprintf("chatcmpl-modeltest-%d", n), "object": "chat.completion",
		"created": created, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(rep), "logprobs": nil}},
		"usage":   usage(req, rep),
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// stream writes the answer as server-sent events: a role chunk, content or
// tool-call delta chunks, a finish chunk, a usage chunk when asked for, and
// [DONE]. Partial and truncated replies stop after the content.
func (s *Server) stream(w http.ResponseWriter, req *wireRequest, rep reply, n int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	id := fmt.Sprintf("chatcmpl-modeltest-%d", n)
	send := func(delta map[string]any, finish any, extra map[string]any) {
		chunk := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if includeUsage {
			chunk["usage"] = nil
		}
		for k, v := range extra {
			chunk[k] = v
		}
		writeEvent(w, chunk)
		if flusher != nil {
			flusher.Flush()
		}
	}

	send(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for _, word := range wordChunks(rep.text) {
		send(map[string]any{"content": word}, nil, nil)
	}
	if rep.kind == replyToolCalls {
		for i, tc := range rep.calls {
			send(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": ""},
			}}}, nil, nil)
		}
		// Arguments in three fragments per call, interleaved across calls.
		const fragments = 3
		for f := 0; f < fragments; f++ {
			for i, tc := range rep.calls {
				if part := fragment(arguments(tc), f, fragments); part != "" {
					send(map[string]any{"tool_calls": []any{map[string]any{
						"index": i, "function": map[string]any{"arguments": part},
					}}}, nil, nil)
				}
			}
		}
	}
	if rep.kind == replyPartial || rep.kind == replyTruncated || rep.kind == replyBroken {
		return
	}
	send(map[string]any{}, finishReason(rep), nil)
	if includeUsage {
		writeEvent(w, map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{}, "usage": usage(req, rep),
		})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func writeEvent(w io.Writer, v any) {
	b, _ := json.Marshal(v) // maps of plain values always marshal
	_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
}

// fragment returns the f-th of n nearly equal pieces of s, cut on rune
// boundaries (a JSON string value cannot hold half a UTF-8 sequence).
func fragment(s string, f, n int) string {
	runes := []rune(s)
	size := (len(runes) + n - 1) / n
	lo, hi := f*size, (f+1)*size
	if lo > len(runes) {
		lo = len(runes)
	}
	if hi > len(runes) {
		hi = len(runes)
	}
	return string(runes[lo:hi])
}

// wordChunks splits text into words, each with the whitespace after it.
func wordChunks(text string) []string {
	var chunks []string
	for text != "" {
		i := strings.IndexFunc(text, unicode.IsSpace)
		if i < 0 {
			return append(chunks, text)
		}
		j := strings.IndexFunc(text[i:], func(r rune) bool { return !unicode.IsSpace(r) })
		if j < 0 {
			return append(chunks, text)
		}
		chunks = append(chunks, text[:i+j])
		text = text[i+j:]
	}
	return chunks
}

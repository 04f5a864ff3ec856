package model

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultOpenAIBaseURL is the base URL [NewOpenAI] uses when
// OpenAIOptions.BaseURL is empty.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// DefaultOpenAITimeout bounds one model step when OpenAIOptions.Timeout is 0.
const DefaultOpenAITimeout = 5 * time.Minute

const providerOpenAI = "openai"

// OpenAIOptions configures [NewOpenAI].
type OpenAIOptions struct {
	// BaseURL is the endpoint's base URL, the part before
	// /chat/completions: https://api.openai.com/v1 (the default),
	// https://RESOURCE.openai.azure.com/openai/v1 (Azure OpenAI),
	// http://localhost:11434/v1 (Ollama), http://HOST:8000/v1 (vLLM) or a
	// LiteLLM proxy's URL. http or https, without credentials, query or
	// fragment.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer KEY". Empty sends no
	// Authorization header (a local Ollama or vLLM); it is required with the
	// default BaseURL. The key is never logged and never appears in an error.
	APIKey string
	// Model is the model (or Azure deployment) name. Required.
	Model string
	// HTTPClient sends the requests. Default: a new http.Client using
	// http.DefaultTransport. Its Timeout, if any, also bounds streaming, so
	// prefer Timeout below.
	HTTPClient *http.Client
	// Timeout bounds one Complete call, the whole stream included. Default
	// (0): DefaultOpenAITimeout. Must not be negative.
	Timeout time.Duration
	// MaxTokens caps the answer's tokens, sent as max_completion_tokens (the
	// field OpenAI, Azure OpenAI, vLLM and LiteLLM read; servers that only
	// know max_tokens ignore it). Default (0): not sent, the server decides.
	// Must not be negative.
	MaxTokens int
	// Temperature is the sampling temperature, 0 to 2. Default (nil): not
	// sent, the server decides.
	Temperature *float64
}

// String describes the options with the API key redacted, so that
// printing or logging a configuration never shows the key.
func (o OpenAIOptions) String() string {
	temp := "default"
	if o.Temperature != nil {
		temp = fmt.Sprint(*o.Temperature)
	}
	return fmt.Sprintf("{BaseURL:%s APIKey:%s Model:%s Timeout:%s MaxTokens:%d Temperature:%s}",
		o.BaseURL, redact(o.APIKey), o.Model, o.Timeout, o.MaxTokens, temp)
}

// GoString is String, so that %#v does not show the API key either.
func (o OpenAIOptions) GoString() string { return o.String() }

// LogValue logs the options with the API key redacted.
func (o OpenAIOptions) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("base_url", o.BaseURL),
		slog.String("api_key", redact(o.APIKey)),
		slog.String("model", o.Model),
		slog.Duration("timeout", o.Timeout),
		slog.Int("max_tokens", o.MaxTokens),
	}
	if o.Temperature != nil {
		attrs = append(attrs, slog.Float64("temperature", *o.Temperature))
	}
	return slog.GroupValue(attrs...)
}

func redact(secret string) string {
	if secret == "" {
		return "(none)"
	}
	return "(redacted)"
}

// OpenAI is a [Provider] for any OpenAI-compatible Chat Completions endpoint
// (OpenAI, Azure OpenAI's /openai/v1, Ollama, vLLM, LiteLLM). It always
// streams, asking for usage in the stream (stream_options.include_usage).
//
// It never retries: the SDK's retries are switched off, and a failed step
// returns an *[Error] whose Retryable tells the runtime whether to try again.
// The runtime holds a lease while a turn runs and must stay in charge of how
// long a step may take; hidden retries with backoff (the SDK honours
// Retry-After up to two minutes) would hold the lease without it knowing, and
// a streamed step cannot be replayed once text has reached the user anyway.
//
// It sends the request's messages as they are. A server checks the
// conversation's shape (every tool call answered right after it, and so
// on), and so does [OpenAI] for what it cannot send (a message with
// [Message.Parts]): wrap it in the payload package's provider with its
// OpenAICompatible profile, as Usher does, to have each request repaired
// into a payload such a server takes.
//
// It reads its configuration only from [OpenAIOptions], never from OPENAI_*
// environment variables. An OpenAI is safe for concurrent use.
type OpenAI struct {
	chat    openai.ChatCompletionService
	model   string
	host    string
	timeout time.Duration
	maxTok  int
	temp    *float64
}

// NewOpenAI returns an OpenAI provider. It validates opts up front and
// reports every problem in one error. opts must not be nil: Model is
// required.
func NewOpenAI(opts *OpenAIOptions) (*OpenAI, error) {
	if opts == nil {
		return nil, errors.New("model: openai: options are required (at least Model)")
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("model: openai: "+format, args...))
	}

	base := strings.TrimSpace(opts.BaseURL)
	if base == "" {
		base = DefaultOpenAIBaseURL
		if opts.APIKey == "" {
			bad("APIKey is required with the default base URL %s", DefaultOpenAIBaseURL)
		}
	}
	u, err := url.Parse(base)
	switch {
	case err != nil:
		bad("BaseURL is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		bad("BaseURL must be an http or https URL")
	case u.Host == "":
		bad("BaseURL has no host")
	case u.User != nil:
		bad("BaseURL must not contain credentials; use APIKey")
	case u.RawQuery != "" || u.Fragment != "":
		bad("BaseURL must not have a query or fragment")
	}
	if strings.TrimSpace(opts.Model) == "" {
		bad("Model is required")
	}
	if strings.ContainsAny(opts.APIKey, "\r\n") {
		bad("APIKey must not contain line breaks")
	}
	if opts.Timeout < 0 {
		bad("Timeout must not be negative")
	}
	if opts.MaxTokens < 0 {
		bad("MaxTokens must not be negative")
	}
	if t := opts.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		bad("Temperature must be between 0 and 2")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	reqOpts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(client),
		option.WithMaxRetries(0),
	}
	if opts.APIKey != "" {
		reqOpts = append(reqOpts, option.WithAPIKey(opts.APIKey))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultOpenAITimeout
	}
	var temp *float64
	if opts.Temperature != nil {
		t := *opts.Temperature
		temp = &t
	}
	return &OpenAI{
		// The service, not openai.NewClient: NewClient would add options from
		// OPENAI_* environment variables (organization, project, headers).
		chat:    openai.NewChatCompletionService(reqOpts...),
		model:   opts.Model,
		host:    u.Hostname(),
		timeout: timeout,
		maxTok:  opts.MaxTokens,
		temp:    temp,
	}, nil
}

// errTimeout is the cause of a step that outlived OpenAIOptions.Timeout.
var errTimeout = errors.New("model step timed out")

// Complete sends req as one streamed Chat Completions request and
// accumulates the answer. See [Provider].
func (p *OpenAI) Complete(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	params, err := p.params(req)
	if err != nil {
		return Response{}, err
	}
	if err := ctx.Err(); err != nil {
		return Response{}, cancelledError(providerOpenAI, err)
	}
	stepCtx, cancel := context.WithTimeoutCause(ctx, p.timeout, errTimeout)
	defer cancel()

	var httpResp *http.Response
	stream := p.chat.NewStreaming(stepCtx, params, option.WithResponseInto(&httpResp))
	defer stream.Close()

	var acc streamAccumulator
	for stream.Next() {
		if text := acc.add(stream.Current()); text != "" && onDelta != nil {
			onDelta(text)
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, p.toError(ctx, stepCtx, err, httpResp)
	}
	if acc.finishReason == "" {
		if err := stepCtx.Err(); err != nil {
			return Response{}, p.toError(ctx, stepCtx, err, httpResp)
		}
		// The stream ended cleanly but without a finish reason: the server
		// or a proxy cut it short. What arrived is incomplete.
		return Response{}, &Error{Provider: providerOpenAI, Retryable: true,
			Message: "the model's answer ended before it was complete"}
	}
	return acc.response(), nil
}

// params maps a Request to the SDK's parameters. It copies what it needs
// and never modifies req.
func (p *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	params := openai.ChatCompletionNewParams{
		Model: cmp.Or(req.Model, p.model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{
			IncludeUsage: param.NewOpt(true),
		},
	}
	if p.maxTok > 0 {
		params.MaxCompletionTokens = param.NewOpt(int64(p.maxTok))
	}
	if p.temp != nil {
		params.Temperature = param.NewOpt(*p.temp)
	}
	invalid := func(format string, args ...any) (openai.ChatCompletionNewParams, error) {
		return openai.ChatCompletionNewParams{}, &Error{Provider: providerOpenAI,
			Message: "invalid model request: " + fmt.Sprintf(format, args...)}
	}
	if len(req.Messages) == 0 {
		return invalid("no messages")
	}
	params.Messages = make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages))
	for i, m := range req.Messages {
		if len(m.Parts) > 0 && (m.Role != RoleUser || slices.ContainsFunc(m.Parts, notImage)) {
			return invalid("message %d carries non-text parts; the provider sends text, and images a user message carries", i)
		}
		switch m.Role {
		case RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			if len(m.Parts) > 0 {
				params.Messages = append(params.Messages, openai.UserMessage(imageContent(m)))
				continue
			}
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case RoleTool:
			if m.ToolCallID == "" {
				return invalid("tool message %d answers no tool call", i)
			}
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for _, tc := range m.ToolCalls {
				args := "{}"
				if tc.ArgumentsError == "" && len(tc.Arguments) > 0 {
					args = string(tc.Arguments)
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: args,
						},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return invalid("message %d has unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaParameters(t.InputSchema)
		if err != nil {
			return invalid("tool %q: %v", t.Name, err)
		}
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			def.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(def))
	}
	return params, nil
}

// schemaParameters turns a tool's JSON Schema into the SDK's parameters map,
// keeping every member's JSON exactly as MCP gave it (json.RawMessage values
// are written verbatim, so large numbers and nested key order survive).
func schemaParameters(schema json.RawMessage) (shared.FunctionParameters, error) {
	if len(strings.TrimSpace(string(schema))) == 0 || string(schema) == "null" {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(schema, &members); err != nil || members == nil {
		return nil, errors.New("input schema is not a JSON object")
	}
	params := make(shared.FunctionParameters, len(members))
	for k, v := range members {
		params[k] = v
	}
	return params, nil
}

// streamAccumulator builds a Response from stream chunks. Tool calls are
// keyed by their index, so that calls streamed one after another and calls
// whose fragments are interleaved are both put together correctly.
type streamAccumulator struct {
	content      strings.Builder
	calls        map[int64]*partialCall
	finishReason string
	usage        Usage
}

type partialCall struct {
	id, name string
	args     strings.Builder
}

// add folds one chunk in and returns the text it added.
func (a *streamAccumulator) add(chunk openai.ChatCompletionChunk) string {
	if u := chunk.Usage; u.PromptTokens != 0 || u.CompletionTokens != 0 {
		a.usage = Usage{PromptTokens: int(u.PromptTokens), CompletionTokens: int(u.CompletionTokens)}
	}
	var text strings.Builder
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue // only one choice is asked for
		}
		d := choice.Delta
		// A refusal is the model's answer to the user, so it is text.
		text.WriteString(d.Content)
		text.WriteString(d.Refusal)
		for _, tc := range d.ToolCalls {
			if a.calls == nil {
				a.calls = make(map[int64]*partialCall)
			}
			c := a.calls[tc.Index]
			if c == nil {
				c = &partialCall{}
				a.calls[tc.Index] = c
			}
			if c.id == "" {
				c.id = tc.ID
			}
			// Servers send the name once; some repeat it on every fragment.
			if n := tc.Function.Name; n != "" && n != c.name {
				c.name += n
			}
			c.args.WriteString(tc.Function.Arguments)
		}
		if choice.FinishReason != "" {
			a.finishReason = choice.FinishReason
		}
	}
	a.content.WriteString(text.String())
	return text.String()
}

func (a *streamAccumulator) response() Response {
	msg := Message{Role: RoleAssistant, Content: a.content.String()}
	indexes := make([]int64, 0, len(a.calls))
	for i := range a.calls {
		indexes = append(indexes, i)
	}
	sort.Slice(indexes, func(i, j int) bool { return indexes[i] < indexes[j] })
	seen := map[string]bool{}
	for _, i := range indexes {
		c := a.calls[i]
		tc := ToolCall{ID: c.id, Name: c.name}
		if tc.ID == "" || seen[tc.ID] {
			// Some servers omit ids, or give two calls of one response
			// the same: each tool message must answer one call.
			tc.ID = newCallID()
		}
		seen[tc.ID] = true
		tc.Arguments, tc.ArgumentsError = parseArguments(c.args.String())
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	return Response{Message: msg, FinishReason: a.finishReason, Usage: a.usage}
}

// parseArguments checks that a model's tool-call arguments are a JSON
// object. Empty arguments mean {} (some servers send nothing for a call
// without arguments).
func parseArguments(s string) (json.RawMessage, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}"), ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, "the arguments are not valid JSON (" + err.Error() + "); send a JSON object"
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, "the arguments must be a JSON object, not " + jsonKind(v)
	}
	return json.RawMessage(s), ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return "null"
	}
}

func newCallID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return "call_" + hex.EncodeToString(b)
}

// toError turns anything the SDK returned into an *Error whose message is
// safe to show. The SDK's error is not kept: its request may carry the
// Authorization header, and a provider's message may quote the key (OpenAI's
// 401 does, partly masked) or the request.
func (p *OpenAI) toError(parent, step context.Context, err error, resp *http.Response) *Error {
	if perr := parent.Err(); perr != nil {
		return cancelledError(providerOpenAI, perr)
	}
	if errors.Is(context.Cause(step), errTimeout) {
		return &Error{Provider: providerOpenAI, Retryable: true, cause: context.DeadlineExceeded,
			Message: fmt.Sprintf("the model did not finish within %s", p.timeout)}
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		code := apiErr.Code
		if code == "" {
			code = apiErr.Type
		}
		return statusError(apiErr.StatusCode, code)
	}
	if resp != nil && resp.StatusCode >= 400 {
		// An error body that is not OpenAI's shape (a proxy's HTML page).
		return statusError(resp.StatusCode, "")
	}
	var streamErr *ssestream.StreamError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	var netErr net.Error
	switch {
	case errors.As(err, &streamErr):
		return &Error{Provider: providerOpenAI, Retryable: true,
			Message: "the model provider reported an error while streaming its answer"}
	case errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		return &Error{Provider: providerOpenAI,
			Message: "the model provider sent an answer that is not OpenAI Chat Completions JSON; check the base URL"}
	case resp != nil && (errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		// The provider answered, then the connection broke.
		return &Error{Provider: providerOpenAI, Retryable: true,
			Message: fmt.Sprintf("the connection to the model provider at %s broke off during its answer", p.host)}
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &Error{Provider: providerOpenAI, Retryable: true,
			Message: fmt.Sprintf("could not reach the model provider at %s", p.host)}
	default:
		return &Error{Provider: providerOpenAI, Retryable: true,
			Message: fmt.Sprintf("the request to the model provider at %s failed", p.host)}
	}
}

// safeCode matches the provider error codes worth showing
// ("context_length_exceeded", "rate_limit_exceeded"): identifiers, not text.
var safeCode = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// statusError describes an HTTP error status. Only 401 and 403 (fix the
// configuration), other 4xx (fix the request) and an exhausted quota are
// not retryable; 408, 409, 429 and 5xx are.
func statusError(status int, code string) *Error {
	e := &Error{Provider: providerOpenAI, StatusCode: status}
	switch {
	case status == http.StatusUnauthorized:
		e.Message = "the model provider rejected the API key"
	case status == http.StatusForbidden:
		e.Message = "the model provider refused access with this API key"
	case status == http.StatusNotFound:
		e.Message = "the model provider has no such model or endpoint; check the model name and base URL"
	case status == http.StatusTooManyRequests && code == "insufficient_quota":
		e.Message = "the model provider's account has no quota left"
	case status == http.StatusTooManyRequests:
		e.Message, e.Retryable = "the model provider is rate limiting requests; try again later", true
	case status == http.StatusRequestTimeout || status == http.StatusConflict:
		e.Message, e.Retryable = "the model provider could not answer in time; try again", true
	case status >= 500:
		e.Message, e.Retryable = "the model provider failed; try again later", true
	default:
		e.Message = "the model provider rejected the request"
	}
	e.Message = fmt.Sprintf("HTTP %d: %s", status, e.Message)
	if code != "" && safeCode.MatchString(code) {
		e.Message += " (" + code + ")"
	}
	return e
}

// notImage reports a part [OpenAI] cannot send: anything but an image
// with its data.
func notImage(p Part) bool {
	return p.Kind != "image" || p.Data == nil || !strings.HasPrefix(p.MIMEType, "image/")
}

// imageContent is a user message with images as Chat Completions content
// parts: its text, then each image as an image_url part holding a data
// URL.
func imageContent(m Message) []openai.ChatCompletionContentPartUnionParam {
	parts := make([]openai.ChatCompletionContentPartUnionParam, 0, 1+len(m.Parts))
	if m.Content != "" {
		parts = append(parts, openai.TextContentPart(m.Content))
	}
	for _, p := range m.Parts {
		parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
			URL: "data:" + p.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(p.Data),
		}))
	}
	return parts
}

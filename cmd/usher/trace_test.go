package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/telemetry/otlptest"
	"github.com/usherhq/usher/internal/testenv"
)

// The secrets of TestTraceOfAMessage's turn: none may be exported.
const (
	traceMessage  = "message-text-7f3a"
	traceArgument = "argument-value-91c2"
	traceResult   = "result-text-5d0e"
	traceReply    = "reply-text-c48b"
)

// traceUpstream is an upstream MCP server (the Go SDK's) with one tool,
// lookup, that records the headers of each request it receives.
type traceUpstream struct {
	url string

	mu            sync.Mutex
	traceparents  []string // of every request
	authorization []string
	calls         int
}

func startTraceUpstream(t *testing.T) *traceUpstream {
	u := &traceUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	type args struct {
		Query string `json:"query"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Description: "Looks a word up."}, func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		u.mu.Lock()
		u.calls++
		u.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: traceResult + " for " + a.Query}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.traceparents = append(u.traceparents, r.Header.Get("traceparent"))
		u.authorization = append(u.authorization, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	// Closed after usher stops (cleanups run last first).
	t.Cleanup(ts.Close)
	u.url = ts.URL
	return u
}

// seen returns the traceparent and bearer token of each request the
// upstream received, and how many tool calls it ran.
func (u *traceUpstream) seen() (traceparents, authorization []string, calls int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.traceparents), slices.Clone(u.authorization), u.calls
}

// startTraced starts `usher serve` as a process of its own with the
// upstream up (broker tokens, the test policy, its tool locked), the
// scripted model ms and the extra environment, and mints alice's token.
func startTraced(t *testing.T, up *traceUpstream, ms *modeltest.Server, extra ...string) (*process, string) {
	t.Helper()
	bin := testenv.Usher(t)
	policy, err := filepath.Abs(filepath.Join("testdata", "trace", "policy.cedar"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "usher.yaml")
	// tools lock mints no broker tokens: it lists the upstream without
	// one (the upstream asks for none), and the lock holds the same
	// definitions.
	lockCfg := filepath.Join(dir, "lock.yaml")
	for file, auth := range map[string]string{cfg: "\n      broker_token: true", lockCfg: ""} {
		yaml := fmt.Sprintf("mcp:\n  upstreams:\n    - name: up\n      url: %q%s\npolicy:\n  file: %q\n  lock_file: %q\n",
			up.url, auth, policy, filepath.Join(dir, "tools.lock"))
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for k, v := range ms.UsherEnv() {
		env = append(env, k+"="+v)
	}
	env = append(env, extra...)
	cli := func(cfg string, args ...string) string {
		cmd := exec.Command(bin, append(args, "--config", cfg)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("usher %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	cli(lockCfg, "tools", "lock", "--data-dir", filepath.Join(dir, "lock-data"))
	p := startProcess(t, bin, env, testenv.FreeAddr(t), "--config", cfg)
	return p, cli(cfg, "token", "user", "--sub", "alice", "--data-dir", p.dataDir, "--addr", strings.TrimPrefix(p.url, "http://"))
}

// traceTurn sends one message whose turn calls the upstream's tool and
// answers, and waits for the turn's end.
func traceTurn(t *testing.T, p *process, ms *modeltest.Server, alice string) {
	t.Helper()
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "up__lookup", Arguments: json.RawMessage(`{"query":"` + traceArgument + `"}`)})
	ms.Reply(traceReply)
	code, run := apitest.Call(t, "POST", p.url+"/api/assistant/runs", alice, `{"title":"traced"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	code, body := apitest.Call(t, "POST", p.url+"/api/assistant/runs/"+run["runId"].(string)+"/messages?wait=60s", alice, `{"content":"`+traceMessage+`"}`)
	if code != 200 || !strings.Contains(fmt.Sprint(body), traceReply) {
		t.Fatalf("message = %d %v, want the turn's answer", code, body)
	}
}

// TestTraceOfAMessage sends one message through `usher serve` (a process
// of its own, exporting to a real OTLP/HTTP receiver) whose turn calls an
// upstream tool through /mcp, and reads the trace: the turn, its model
// requests, the HTTP request at /mcp, the MCP request, the policy
// decision, the audit writes and the upstream call are one trace, whose
// traceparent the upstream received; the message's own request has its
// span; no attribute carries a token, the arguments, the result or any
// message's text; and a log line of a refused request carries the trace
// id of that request's span.
func TestTraceOfAMessage(t *testing.T) {
	t.Parallel()
	rcv := otlptest.NewReceiver(t)
	up := startTraceUpstream(t)
	ms := modeltest.NewServer(t)
	p, alice := startTraced(t, up, ms,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_TRACES_SAMPLER=always_on")
	traceTurn(t, p, ms, alice)
	// A refused listing logs one info line, in the request's span.
	if code, _ := apitest.Call(t, "GET", p.url+"/api/approvals?cursor=", alice, ""); code != 400 {
		t.Fatalf("listing with an empty cursor = %d, want 400", code)
	}

	byName := func(spans []otlptest.Span, name string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range spans {
			if s.GetName() == name {
				out = append(out, s)
			}
		}
		return out
	}
	want := []string{"POST /api/assistant/runs/{id}/messages", "GET /api/approvals", "invoke_agent usher", "chat scripted", "POST /mcp",
		"tools/call up__lookup", "policy decision", "audit write"}
	var spans []otlptest.Span
	testenv.WaitFor(t, 30*time.Second, func() bool {
		spans = rcv.Spans()
		for _, n := range want {
			if len(byName(spans, n)) == 0 {
				return false
			}
		}
		// The MCP request's server span and the upstream call's client span.
		return len(byName(spans, "tools/call up__lookup")) == 2
	})

	str := func(s otlptest.Span, key string) string {
		v, ok := s.Attr(key)
		if !ok {
			return "<none>"
		}
		if a := v.GetArrayValue(); a != nil {
			var parts []string
			for _, e := range a.GetValues() {
				parts = append(parts, e.GetStringValue())
			}
			return strings.Join(parts, ",")
		}
		return v.GetStringValue()
	}
	const server, client = 2, 3 // OTLP span kinds
	turn := byName(spans, "invoke_agent usher")[0]
	inTurn := func(name string, kind int32) otlptest.Span {
		t.Helper()
		for _, s := range byName(spans, name) {
			if s.TraceID() == turn.TraceID() && (kind == 0 || int32(s.GetKind()) == kind) {
				return s
			}
		}
		t.Fatalf("no span %q (kind %d) in the turn's trace", name, kind)
		return otlptest.Span{}
	}
	if got := str(turn, "gen_ai.conversation.id"); !strings.HasPrefix(got, "run_") {
		t.Errorf("turn: gen_ai.conversation.id = %q, want the run's id", got)
	}
	chat := inTurn("chat scripted", client)
	if chat.ParentSpanID() != turn.SpanID() || str(chat, "gen_ai.request.model") != "scripted" || str(chat, "gen_ai.operation.name") != "chat" {
		t.Errorf("model request: parent %s (turn %s), attributes %v", chat.ParentSpanID(), turn.SpanID(), chat.GetAttributes())
	}
	if _, ok := chat.Attr("gen_ai.usage.input_tokens"); !ok || str(chat, "gen_ai.response.finish_reasons") == "<none>" {
		t.Errorf("model request without usage or finish reasons: %v", chat.GetAttributes())
	}
	mcpCall := inTurn("tools/call up__lookup", server)
	if str(mcpCall, "mcp.method.name") != "tools/call" || str(mcpCall, "gen_ai.tool.name") != "up__lookup" || str(mcpCall, "mcp.protocol.version") == "<none>" {
		t.Errorf("MCP request: attributes %v", mcpCall.GetAttributes())
	}
	// The turn's session makes several requests at /mcp; the call's is
	// the MCP request's parent.
	var httpMCP otlptest.Span
	for _, s := range byName(spans, "POST /mcp") {
		if s.SpanID() == mcpCall.ParentSpanID() {
			httpMCP = s
		}
	}
	if httpMCP.Span == nil || httpMCP.TraceID() != turn.TraceID() || int32(httpMCP.GetKind()) != server {
		t.Errorf("MCP request's parent %s is not an HTTP request at /mcp in the turn's trace", mcpCall.ParentSpanID())
	}
	decision := inTurn("policy decision", 0)
	if decision.ParentSpanID() != mcpCall.SpanID() || str(decision, "usher.policy.decision") != "allow" || str(decision, "usher.policy.ids") != "allow-trace-lookup" {
		t.Errorf("policy decision: parent %s (MCP %s), attributes %v", decision.ParentSpanID(), mcpCall.SpanID(), decision.GetAttributes())
	}
	audit := inTurn("audit write", 0)
	if str(audit, "usher.audit.kind") == "<none>" {
		t.Errorf("audit write: attributes %v", audit.GetAttributes())
	}
	upCall := inTurn("tools/call up__lookup", client)
	if upCall.ParentSpanID() != mcpCall.SpanID() || str(upCall, "usher.upstream") != "up" {
		t.Errorf("upstream call: parent %s (MCP %s), attributes %v", upCall.ParentSpanID(), mcpCall.SpanID(), upCall.GetAttributes())
	}
	traceparents, tokens, calls := up.seen()
	if calls != 1 || !slices.Contains(traceparents, "00-"+turn.TraceID()+"-"+upCall.SpanID()+"-01") {
		t.Errorf("the upstream ran %d calls and received traceparents %q, want the upstream call's span %s", calls, traceparents, upCall.SpanID())
	}

	// Nothing secret in any span: not a token, the arguments, the
	// result, the message, the reply or the model's API key.
	secrets := []string{traceMessage, traceArgument, traceResult, traceReply, alice, "test-key"}
	for _, tok := range tokens {
		if tok != "" {
			secrets = append(secrets, tok)
		}
	}
	if len(secrets) < 7 {
		t.Fatalf("the upstream received no broker token: %q", tokens)
	}
	for _, s := range spans {
		for key, values := range s.Strings() {
			for _, v := range values {
				for _, secret := range secrets {
					if strings.Contains(v, secret) {
						t.Errorf("span %q: %s carries a secret (%.12s...)", s.GetName(), key, secret)
					}
				}
			}
		}
	}

	// The refused listing's log line carries its span's trace id.
	listing := byName(spans, "GET /api/approvals")[0]
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(log)) {
		if strings.Contains(l, "approvals: listing refused") {
			line = l
		}
	}
	if m := regexp.MustCompile(`trace_id=([0-9a-f]{32}) span_id=([0-9a-f]{16})`).FindStringSubmatch(line); m == nil || m[1] != listing.TraceID() {
		t.Errorf("log line %q, want trace_id=%s", line, listing.TraceID())
	}
}

// TestNoTraceWithoutOTEL: with no OTLP endpoint in the environment the
// same turn passes no trace context to the upstream and logs no trace id.
func TestNoTraceWithoutOTEL(t *testing.T) {
	t.Parallel()
	up := startTraceUpstream(t)
	ms := modeltest.NewServer(t)
	p, alice := startTraced(t, up, ms, "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SERVICE_NAME=usher-off")
	traceTurn(t, p, ms, alice)
	if code, _ := apitest.Call(t, "GET", p.url+"/api/approvals?cursor=", alice, ""); code != 400 {
		t.Fatalf("listing with an empty cursor = %d, want 400", code)
	}
	traceparents, _, calls := up.seen()
	if calls != 1 || len(traceparents) == 0 {
		t.Fatalf("the upstream ran %d calls in %d requests, want 1", calls, len(traceparents))
	}
	for _, tp := range traceparents {
		if tp != "" {
			t.Errorf("the upstream received traceparent %q with tracing off", tp)
		}
	}
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "approvals: listing refused") || strings.Contains(string(log), "trace_id=") {
		t.Errorf("log with tracing off:\n%s", log)
	}
}

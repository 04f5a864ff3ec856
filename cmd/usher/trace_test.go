package main

import (
	"context"
	"encoding/hex"
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
	"github.com/usherhq/usher/store/storetest"
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
	u := newTracedUsher(t, up, ms, extra...)
	p := startProcess(t, u.bin, u.env, testenv.FreeAddr(t), "--config", u.cfg)
	return p, u.cli("token", "user", "--sub", "alice", "--data-dir", p.dataDir, "--addr", strings.TrimPrefix(p.url, "http://"))
}

// tracedUsher is the configuration of `usher serve` with a traced
// upstream: the program, its environment and its configuration file.
type tracedUsher struct {
	t        *testing.T
	bin, cfg string
	env      []string
}

// newTracedUsher writes the configuration of startTraced and locks the
// upstream's tools.
func newTracedUsher(t *testing.T, up *traceUpstream, ms *modeltest.Server, extra ...string) *tracedUsher {
	t.Helper()
	u := &tracedUsher{t: t, bin: testenv.Usher(t)}
	policy, err := filepath.Abs(filepath.Join("testdata", "trace", "policy.cedar"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	u.cfg = filepath.Join(dir, "usher.yaml")
	// tools lock mints no broker tokens: it lists the upstream without
	// one (the upstream asks for none), and the lock holds the same
	// definitions.
	lockCfg := filepath.Join(dir, "lock.yaml")
	for file, auth := range map[string]string{u.cfg: "\n      broker_token: true", lockCfg: ""} {
		yaml := fmt.Sprintf("mcp:\n  upstreams:\n    - name: up\n      url: %q%s\npolicy:\n  file: %q\n  lock_file: %q\n",
			up.url, auth, policy, filepath.Join(dir, "tools.lock"))
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range ms.UsherEnv() {
		u.env = append(u.env, k+"="+v)
	}
	u.env = append(u.env, extra...)
	u.cliWith(lockCfg, "tools", "lock", "--data-dir", filepath.Join(dir, "lock-data"))
	return u
}

// cli runs an usher command with the configuration and returns its
// output.
func (u *tracedUsher) cli(args ...string) string { return u.cliWith(u.cfg, args...) }

func (u *tracedUsher) cliWith(cfg string, args ...string) string {
	u.t.Helper()
	cmd := exec.Command(u.bin, append(args, "--config", cfg)...)
	cmd.Env = append(os.Environ(), u.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("usher %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
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

	want := []string{"POST /api/assistant/runs/{id}/messages", "enqueue turn", "GET /api/approvals", "invoke_agent usher", "chat scripted", "POST /mcp",
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
	// The message's request queued the turn: its enqueue is a producer
	// span in the request's trace, and the turn, in a trace of its own,
	// links to it.
	post := byName(spans, "POST /api/assistant/runs/{id}/messages")[0]
	enqueue := byName(spans, "enqueue turn")[0]
	if enqueue.TraceID() != post.TraceID() || enqueue.ParentSpanID() != post.SpanID() || int32(enqueue.GetKind()) != kindProducer ||
		str(enqueue, "gen_ai.conversation.id") != str(turn, "gen_ai.conversation.id") || str(enqueue, "usher.message.seq") != "1" {
		t.Errorf("enqueue: trace %s parent %s kind %d attributes %v; want a producer span under the POST %s/%s",
			enqueue.TraceID(), enqueue.ParentSpanID(), enqueue.GetKind(), enqueue.GetAttributes(), post.TraceID(), post.SpanID())
	}
	if !linksTo(turn, enqueue) {
		t.Errorf("the turn's links %v do not name the enqueue %s/%s", turn.GetLinks(), enqueue.TraceID(), enqueue.SpanID())
	}
	chat := inTurn("chat scripted", kindClient)
	if chat.ParentSpanID() != turn.SpanID() || str(chat, "gen_ai.request.model") != "scripted" || str(chat, "gen_ai.operation.name") != "chat" {
		t.Errorf("model request: parent %s (turn %s), attributes %v", chat.ParentSpanID(), turn.SpanID(), chat.GetAttributes())
	}
	if _, ok := chat.Attr("gen_ai.usage.input_tokens"); !ok || str(chat, "gen_ai.response.finish_reasons") == "<none>" {
		t.Errorf("model request without usage or finish reasons: %v", chat.GetAttributes())
	}
	mcpCall := inTurn("tools/call up__lookup", kindServer)
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
	if httpMCP.Span == nil || httpMCP.TraceID() != turn.TraceID() || int32(httpMCP.GetKind()) != kindServer {
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
	upCall := inTurn("tools/call up__lookup", kindClient)
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
	checkNoSecrets(t, spans, secrets)

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

// TestTraceOfATakenOverTurn: two replicas on PostgreSQL export to one
// receiver. Replica A takes a message and starts its turn, and is killed
// (SIGKILL) while the model holds its reply; B takes the run over when
// A's lease expires and works the turn, which calls the upstream's tool.
// B's slice of the turn links to the message's enqueue, a span of A's
// trace of the POST, whose context B read from the database; the
// statements of the post and of B's turn are spans of those traces, with
// none of their arguments; and no span of either replica carries a
// token, the arguments, the result or any message's text.
func TestTraceOfATakenOverTurn(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	rcv := otlptest.NewReceiver(t)
	up := startTraceUpstream(t)
	ms := modeltest.NewServer(t)
	lb := newBalancer(t)
	u := newTracedUsher(t, up, ms,
		"USHER_DATABASE_URL="+dbURL,
		"USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL="+lb.url,
		"USHER_ASSISTANT_LEASE=3s",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_TRACES_SAMPLER=always_on")
	service := func(name string) []string { return append(slices.Clone(u.env), "OTEL_SERVICE_NAME="+name) }
	a := startProcess(t, u.bin, service("usher-a"), testenv.FreeAddr(t), "--config", u.cfg)
	lb.set(a.url)
	alice := u.cli("token", "user", "--sub", "alice", "--data-dir", t.TempDir())

	// A takes the message; its turn waits for the model.
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "up__lookup", Arguments: json.RawMessage(`{"query":"` + traceArgument + `"}`)})
	ms.Reply(traceReply)
	release := ms.Hold()
	defer release()
	code, run := apitest.Call(t, "POST", lb.url+"/api/assistant/runs", alice, `{"title":"taken over"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	runID := run["runId"].(string)
	if code, body := apitest.Call(t, "POST", lb.url+"/api/assistant/runs/"+runID+"/messages", alice, `{"content":"`+traceMessage+`"}`); code != 202 {
		t.Fatalf("message = %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A exported the enqueue (its batch goes out every 50 ms) before it
	// dies: what B links to is in the receiver, not in A's memory.
	testenv.WaitFor(t, 30*time.Second, func() bool { return len(byName(rcv.Spans(), "enqueue turn")) == 1 })

	// B starts; A dies mid-turn.
	b := startProcess(t, u.bin, service("usher-b"), testenv.FreeAddr(t), "--config", u.cfg)
	lb.set(b.url)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if err := ms.WaitHeld(ctx, 0); err != nil {
		t.Fatal(err)
	}
	release()

	// B takes the run over when A's lease expires and ends the turn.
	serviceOf := func(s otlptest.Span) string {
		for _, kv := range s.Resource.GetAttributes() {
			if kv.GetKey() == "service.name" {
				return kv.GetValue().GetStringValue()
			}
		}
		return ""
	}
	var spans []otlptest.Span
	var turn otlptest.Span
	testenv.WaitFor(t, 60*time.Second, func() bool {
		spans = rcv.Spans()
		for _, s := range byName(spans, "invoke_agent usher") {
			if serviceOf(s) == "usher-b" {
				turn = s
			}
		}
		return turn.Span != nil
	})
	if _, _, calls := up.seen(); calls != 1 {
		t.Errorf("the upstream ran %d calls, want 1", calls)
	}

	enqueue := byName(spans, "enqueue turn")[0]
	var post otlptest.Span
	for _, s := range byName(spans, "POST /api/assistant/runs/{id}/messages") {
		if s.SpanID() == enqueue.ParentSpanID() {
			post = s
		}
	}
	if post.Span == nil || serviceOf(post) != "usher-a" || serviceOf(enqueue) != "usher-a" || post.TraceID() != enqueue.TraceID() {
		t.Fatalf("the enqueue (%s, parent %s) is not a span of A's POST", serviceOf(enqueue), enqueue.ParentSpanID())
	}
	if !linksTo(turn, enqueue) {
		t.Errorf("B's turn links to %v, not to the enqueue %s/%s in A's trace", turn.GetLinks(), enqueue.TraceID(), enqueue.SpanID())
	}
	if str(turn, "gen_ai.conversation.id") != runID {
		t.Errorf("B's turn: gen_ai.conversation.id = %q, want %s", str(turn, "gen_ai.conversation.id"), runID)
	}
	// B's turn is whole in its trace: the model request and the tool call
	// through /mcp to the upstream.
	inTurn := map[string]bool{}
	for _, s := range spans {
		if s.TraceID() == turn.TraceID() {
			inTurn[s.GetName()] = true
		}
	}
	for _, name := range []string{"chat scripted", "POST /mcp", "tools/call up__lookup", "policy decision", "audit write"} {
		if !inTurn[name] {
			t.Errorf("B's turn's trace has no span %q", name)
		}
	}

	// The statements: the post's under the enqueue, and B's turn's, as
	// PostgreSQL client spans with their text and no arguments.
	var postStatements, turnStatements int
	for _, s := range spans {
		if _, ok := s.Attr("pgx.query.parameters"); ok {
			t.Errorf("statement span %q carries its arguments", s.GetName())
		}
		if str(s, "db.system.name") != "postgresql" || str(s, "db.query.text") == "<none>" {
			continue
		}
		switch {
		case s.ParentSpanID() == enqueue.SpanID():
			postStatements++
		case s.TraceID() == turn.TraceID():
			turnStatements++
		}
	}
	if postStatements == 0 || turnStatements == 0 {
		t.Errorf("statement spans: %d under the enqueue, %d in B's turn; want some of each", postStatements, turnStatements)
	}

	traceparents, tokens, _ := up.seen()
	var sawTurn bool
	for _, tp := range traceparents {
		sawTurn = sawTurn || strings.HasPrefix(tp, "00-"+turn.TraceID()+"-")
	}
	if !sawTurn {
		t.Errorf("the upstream received traceparents %q, none of B's turn's trace %s", traceparents, turn.TraceID())
	}
	secrets := []string{traceMessage, traceArgument, traceResult, traceReply, alice, "test-key"}
	for _, tok := range tokens {
		if tok != "" {
			secrets = append(secrets, tok)
		}
	}
	checkNoSecrets(t, spans, secrets)
}

// OTLP span kinds.
const kindServer, kindClient, kindProducer = 2, 3, 4

// byName returns the spans named name.
func byName(spans []otlptest.Span, name string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// str is the span's attribute key as text (a list's values joined by
// commas), or "<none>".
func str(s otlptest.Span, key string) string {
	v, ok := s.Attr(key)
	switch {
	case !ok:
		return "<none>"
	case v.GetArrayValue() != nil:
		var parts []string
		for _, e := range v.GetArrayValue().GetValues() {
			parts = append(parts, e.GetStringValue())
		}
		return strings.Join(parts, ",")
	case v.GetIntValue() != 0:
		return fmt.Sprint(v.GetIntValue())
	}
	return v.GetStringValue()
}

// linksTo reports whether s links to the span to.
func linksTo(s, to otlptest.Span) bool {
	for _, l := range s.GetLinks() {
		if hex.EncodeToString(l.GetTraceId()) == to.TraceID() && hex.EncodeToString(l.GetSpanId()) == to.SpanID() {
			return true
		}
	}
	return false
}

// checkNoSecrets fails the test for each string any span carries (its
// name, status, attributes, events, links and resource: Span.Strings)
// that contains one of secrets.
func checkNoSecrets(t *testing.T, spans []otlptest.Span, secrets []string) {
	t.Helper()
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

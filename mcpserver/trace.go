package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/store"
)

// The endpoint's spans (see package telemetry): each MCP request, each
// policy decision about a call, each audit write and each call to an
// upstream tool. Their attributes name methods, tools, decisions and
// policies, never a token, an argument, a result or a message's text.
// With telemetry off no span is started and no attribute is built (see
// startSpan).
var tracer = otel.Tracer("github.com/usherhq/usher/mcpserver")

// The attributes of Usher's own that no semantic convention names.
const (
	attrDecision   = attribute.Key("usher.policy.decision")
	attrPolicyIDs  = attribute.Key("usher.policy.ids")
	attrAuditKind  = attribute.Key("usher.audit.kind")
	attrAction     = attribute.Key("usher.policy.action")
	attrUpstream   = attribute.Key("usher.upstream")
	attrToolServer = attribute.Key("usher.tool.server")
)

// The kinds of the endpoint's spans, as start options made once: a
// variadic argument built at each call would be allocated at each call.
var (
	serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// startSpan starts a span named name under the one ctx carries, only
// when that one is recording: with tracing off (or a trace not sampled)
// it returns ctx and the parent as they are, without allocating, so that
// the no-op path costs nothing. Every span of the endpoint has a
// recording parent when tracing is on: the server span of its HTTP
// request (see package telemetry).
func startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return tracer.Start(ctx, name, opts...)
}

// traceRequests is the SDK middleware that makes a span of each MCP
// request, named and described by the MCP semantic conventions:
// mcp.method.name, gen_ai.tool.name for tools/call, mcp.session.id and
// mcp.protocol.version.
func (s *Server) traceRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, method, req)
		}
		name := method
		attrs := make([]attribute.KeyValue, 1, 5)
		attrs[0] = semconv.McpMethodNameKey.String(method)
		if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
			name = method + " " + r.Params.Name
			attrs = append(attrs, semconv.GenAIToolName(r.Params.Name), semconv.GenAIOperationNameExecuteTool)
		}
		if ss := req.GetSession(); ss != nil && ss.ID() != "" {
			attrs = append(attrs, semconv.McpSessionID(ss.ID()))
		}
		if v := protocolVersion(req); v != "" {
			attrs = append(attrs, semconv.McpProtocolVersion(v))
		}
		// The attributes are set on the span rather than passed as a start
		// option, which the SDK would copy twice more; no sampler that the
		// OTEL_* variables configure reads them.
		ctx, span := tracer.Start(ctx, name, serverSpan...)
		span.SetAttributes(attrs...)
		defer span.End()
		res, err := next(ctx, method, req)
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(semconv.ErrorTypeOther)
		} else if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
		}
		return res, err
	}
}

// protocolVersion is the request's protocol version: in its _meta
// (protocol 2026-07-28), else in its Mcp-Protocol-Version header.
func protocolVersion(req mcp.Request) string {
	if p, ok := req.GetParams().(interface{ GetMeta() map[string]any }); ok {
		if v, _ := p.GetMeta()[mcp.MetaKeyProtocolVersion].(string); v != "" {
			return v
		}
	}
	if extra := req.GetExtra(); extra != nil {
		return extra.Header.Get("Mcp-Protocol-Version")
	}
	return ""
}

// tracedDecider makes a span of each decision about a call (not about a
// listing, of which a tools/list makes one per tool): the decision and
// the ids of the policies that made it.
type tracedDecider struct{ Decider }

// Decide decides c in a span.
func (d tracedDecider) Decide(ctx context.Context, c Call) (Verdict, error) {
	if c.Listing {
		return d.Decider.Decide(ctx, c)
	}
	ctx, span := startSpan(ctx, "policy decision")
	if !span.IsRecording() {
		return d.Decider.Decide(ctx, c)
	}
	defer span.End()
	v, err := d.Decider.Decide(ctx, c)
	decision := v.Decision
	if err != nil || (decision != Allow && decision != Approve) {
		decision = Deny
	}
	attrs := [5]attribute.KeyValue{attrDecision.String(string(decision)), attrPolicyIDs.StringSlice(v.PolicyIDs),
		attrAction.String(string(cmp.Or(c.Action, ActionCallTool))), attrToolServer.String(c.Server)}
	n := 4
	if c.Action == "" || c.Action == ActionCallTool {
		attrs[n] = semconv.GenAIToolName(c.Tool)
		n++
	}
	span.SetAttributes(attrs[:n]...)
	if err != nil {
		span.SetStatus(codes.Error, "")
	}
	return v, err
}

// tracedAuditor makes a span of each audit record written on its own.
type tracedAuditor struct{ Auditor }

// Record records e in a span.
func (a tracedAuditor) Record(ctx context.Context, e Event) error {
	ctx, span := startAudit(ctx, e)
	defer span.End()
	return endAudit(span, a.Auditor.Record(ctx, e))
}

// tracedExecutions makes a span of each execution's change, written with
// its audit record.
type tracedExecutions struct{ Executions }

// BeginExecution starts e in a span.
func (x tracedExecutions) BeginExecution(ctx context.Context, e store.Execution, ev Event) (store.Execution, bool, error) {
	ctx, span := startAudit(ctx, ev)
	defer span.End()
	out, started, err := x.Executions.BeginExecution(ctx, e, ev)
	return out, started, endAudit(span, err)
}

// FinishExecution finishes the execution of key in a span.
func (x tracedExecutions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error) {
	ctx, span := startAudit(ctx, ev)
	defer span.End()
	out, err := x.Executions.FinishExecution(ctx, key, status, result, now, ev)
	return out, endAudit(span, err)
}

// AwaitInput records a round's end in a span.
func (x tracedExecutions) AwaitInput(ctx context.Context, key, approvalID string, now time.Time, ev Event) error {
	ctx, span := startAudit(ctx, ev)
	defer span.End()
	return endAudit(span, x.Executions.AwaitInput(ctx, key, approvalID, now, ev))
}

// startAudit starts the span of an audit write of e.
func startAudit(ctx context.Context, e Event) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := tracer.Start(ctx, "audit write")
	span.SetAttributes(attrAuditKind.String(e.Kind))
	return ctx, span
}

// endAudit marks span failed when err is not nil, and returns err.
func endAudit(span trace.Span, err error) error {
	if err != nil {
		span.SetStatus(codes.Error, "")
	}
	return err
}

// startUpstreamCall starts the client span of a call to u's tool name
// (its own name, without the prefix).
func startUpstreamCall(ctx context.Context, u *upstream, name string) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	tool := u.cfg.prefix() + name
	ctx, span := tracer.Start(ctx, "tools/call "+tool, clientSpan...)
	span.SetAttributes(semconv.McpMethodNameKey.String("tools/call"), semconv.GenAIToolName(tool),
		semconv.GenAIOperationNameExecuteTool, attrUpstream.String(u.cfg.Name))
	return ctx, span
}

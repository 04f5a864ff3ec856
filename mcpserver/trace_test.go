package mcpserver

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// recordFunc is an Auditor made of a function.
type recordFunc func(context.Context, Event) error

func (f recordFunc) Record(ctx context.Context, e Event) error { return f(ctx, e) }

// TestSpansCostNothingWithTracingOff: with no recording span in the
// context (tracing off, or a trace not sampled), the spans of a tools/call
// — the MCP request's, the policy decision's, the audit write's and the
// upstream call's — allocate nothing: the no-op path is free.
// Not parallel: testing.AllocsPerRun counts the whole process's
// allocations.
func TestSpansCostNothingWithTracingOff(t *testing.T) {
	decider := tracedDecider{DeciderFunc(func(context.Context, Call) (Verdict, error) {
		return Verdict{Decision: Allow}, nil
	})}
	auditor := tracedAuditor{recordFunc(func(context.Context, Event) error { return nil })}
	requests := (&Server{}).traceRequests(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil })
	up := &upstream{cfg: Upstream{Name: "up"}}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "up__echo"}}
	call := Call{Tool: "up__echo", Server: "up"}
	event := Event{Kind: "tool_call"}
	notSampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
	}))
	for name, ctx := range map[string]context.Context{"no span": context.Background(), "a trace not sampled": notSampled} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := requests(ctx, "tools/call", req); err != nil {
				t.Fatal(err)
			}
			if _, err := decider.Decide(ctx, call); err != nil {
				t.Fatal(err)
			}
			if err := auditor.Record(ctx, event); err != nil {
				t.Fatal(err)
			}
			_, span := startUpstreamCall(ctx, up, "echo")
			span.End()
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per tools/call's spans, want none", name, allocs)
		}
	}
}

package assistant

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// The runtime's spans (see package telemetry): a message's enqueue, each
// slice of a turn a replica works, and each model request in it, by the
// generative-AI semantic conventions. Their attributes name the run, the
// model, the token counts and why the model stopped, never the prompt,
// the history or the reply. With telemetry off the tracer is the no-op
// and no attribute is built.
//
// The queue is the database: the enqueue's trace context is stored with
// the run (store.Run.QueuedTrace), and each slice of the turns that
// follow, on whichever replica claims the run, starts a trace of its own
// with a link to it, as OpenTelemetry's messaging conventions link a
// message's processing to its send.
var tracer = otel.Tracer("github.com/usherhq/usher/assistant")

// startEnqueue starts the span of posting a message that queues run for a
// turn, a producer span in the request's trace.
func startEnqueue(ctx context.Context, runID string) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, "enqueue turn", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIConversationID(runID))
	}
	return ctx, span
}

// endEnqueue ends the span of an enqueue that stored the message seq, or
// failed with err.
func endEnqueue(span trace.Span, seq int64, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, "")
		} else {
			span.SetAttributes(attribute.Int64("usher.message.seq", seq))
		}
	}
	span.End()
}

// queuedTrace is the trace context of ctx's span as the store keeps it
// with the queued run: empty with tracing off. A tracestate longer than
// the store keeps is left out (W3C trace context lets a participant drop
// entries beyond 512 bytes).
func queuedTrace(ctx context.Context) store.TraceContext {
	var tc store.TraceContext
	otel.GetTextMapPropagator().Inject(ctx, traceCarrier{&tc})
	if len(tc.State) > store.MaxTraceState {
		tc.State = ""
	}
	if len(tc.Parent) > store.MaxTraceParent {
		return store.TraceContext{}
	}
	return tc
}

// traceCarrier carries a stored trace context through the propagator.
type traceCarrier struct{ tc *store.TraceContext }

// Get returns the header key's value.
func (c traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.tc.Parent
	case "tracestate":
		return c.tc.State
	}
	return ""
}

// Set keeps the header key's value; other headers are dropped.
func (c traceCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.tc.Parent = value
	case "tracestate":
		c.tc.State = value
	}
}

// Keys lists the headers a stored trace context holds.
func (c traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// startTurn starts the span of a slice of the run r's turn, linked to the
// enqueue of the message that queued it, when that was traced.
func startTurn(ctx context.Context, r store.Run) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if r.QueuedTrace.Parent != "" {
		tc := r.QueuedTrace
		if sc := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(ctx, traceCarrier{&tc})); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := tracer.Start(ctx, "invoke_agent usher", opts...)
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameInvokeAgent, semconv.GenAIAgentName("usher"),
			semconv.GenAIConversationID(r.ID))
	}
	return ctx, span
}

// endTurn ends the span of a slice, failed when err is not nil.
func endTurn(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// startModel starts the span of one model request to modelName.
func startModel(ctx context.Context, modelName string) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, "chat", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameChat)
		if modelName != "" {
			span.SetName("chat " + modelName)
			span.SetAttributes(semconv.GenAIRequestModel(modelName))
		}
	}
	return ctx, span
}

// endModel ends the span of a model request with what it cost and why
// the model stopped.
func endModel(span trace.Span, resp model.Response, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(semconv.ErrorTypeOther)
		} else {
			span.SetAttributes(semconv.GenAIUsageInputTokens(resp.Usage.PromptTokens),
				semconv.GenAIUsageOutputTokens(resp.Usage.CompletionTokens))
			if resp.FinishReason != "" {
				span.SetAttributes(semconv.GenAIResponseFinishReasons(resp.FinishReason))
			}
		}
	}
	span.End()
}

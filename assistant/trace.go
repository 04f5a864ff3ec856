package assistant

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/assistant/model"
)

// The runtime's spans (see package telemetry): each slice of a turn a
// replica works, and each model request in it, by the generative-AI
// semantic conventions. Their attributes name the run, the model, the
// token counts and why the model stopped, never the prompt, the history
// or the reply. With telemetry off the tracer is the no-op and no
// attribute is built.
var tracer = otel.Tracer("github.com/usherhq/usher/assistant")

// startTurn starts the span of a slice of run's turn.
func startTurn(ctx context.Context, runID string) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, "invoke_agent usher", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameInvokeAgent, semconv.GenAIAgentName("usher"),
			semconv.GenAIConversationID(runID))
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

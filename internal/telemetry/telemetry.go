package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the process's service.name unless OTEL_SERVICE_NAME says
// otherwise.
const ServiceName = "usher"

// Telemetry is what Setup installed: the tracer provider when tracing is
// on, nil when it is off.
type Telemetry struct {
	tp *sdktrace.TracerProvider
}

// On reports whether spans are exported.
func (t *Telemetry) On() bool { return t.tp != nil }

// TracerProvider is the provider that exports spans, for the
// instrumentation that takes one (the store's statement spans); nil when
// tracing is off, so that it adds nothing.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.tp == nil {
		return nil
	}
	return t.tp
}

// Shutdown flushes the spans still batched and stops exporting; with
// tracing off it does nothing.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Setup turns tracing on when getenv names an OTLP endpoint
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT
// with /v1/traces appended), unless OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none. It installs a tracer provider that
// batches spans to that endpoint over OTLP/HTTP, with the resource
// service.name (OTEL_SERVICE_NAME, default "usher") and service.version
// (version), and the W3C trace-context propagator (no baggage: what a
// caller puts there is not passed on to upstreams). The exporter reads
// the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression,
// certificates) and the provider OTEL_TRACES_SAMPLER and
// OTEL_RESOURCE_ATTRIBUTES from the process environment, as the
// OpenTelemetry SDK does.
//
// Otherwise it installs nothing: the global provider stays the no-op, and
// Handler and Transport add nothing. The Telemetry is never nil. Export
// errors are logged to log.
func Setup(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Telemetry, error) {
	none := &Telemetry{}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); endpoint == "" && base != "" {
		endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if endpoint == "" || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return none, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return none, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(
			semconv.ServiceName(cmp.Or(getenv("OTEL_SERVICE_NAME"), ServiceName)),
			semconv.ServiceVersion(version),
		),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return none, fmt.Errorf("telemetry: the resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry: exporting spans failed", "err", err)
	}))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info("telemetry: exporting traces", "endpoint", endpoint)
	return &Telemetry{tp: tp}, nil
}

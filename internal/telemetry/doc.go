// Package telemetry owns the process's OpenTelemetry set-up: the tracer
// provider that exports spans over OTLP/HTTP when the standard OTEL_*
// variables name an endpoint (and the global no-op otherwise), the W3C
// trace-context propagator, and the log handler that stamps log lines with
// the active span's trace and span ids.
//
// The packages that make spans take their tracers from the global
// provider (otel.Tracer): with telemetry off, starting a span costs a
// no-op.
package telemetry

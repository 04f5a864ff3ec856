// Package otlptest owns a real OTLP/HTTP trace receiver for tests: an
// endpoint on loopback that decodes each export (protobuf, as the
// OpenTelemetry SDK's exporter sends it) with the OTLP protocol's own
// types and keeps the spans, with their resources, for the test to read.
package otlptest

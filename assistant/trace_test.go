package assistant

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/store"
)

// TestQueuedTraceBounds: the trace context stored with a queued run is
// the enqueue's traceparent and tracestate, without a tracestate longer
// than the store keeps (a caller's header can make one), which would
// otherwise make the store refuse the message; with no span there is
// none. It sets the global propagator, as telemetry does, so it does not
// run in parallel.
func TestQueuedTraceBounds(t *testing.T) {
	before := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(before) })

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	span := func(state string) store.TraceContext {
		t.Helper()
		ts, err := trace.ParseTraceState(state)
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: [16]byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
			SpanID:  [8]byte{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31}, TraceFlags: trace.FlagsSampled, TraceState: ts,
		})
		return queuedTrace(trace.ContextWithSpanContext(t.Context(), sc))
	}
	if got := span("usher=1,other=t61rcWkgMzE"); got != (store.TraceContext{Parent: parent, State: "usher=1,other=t61rcWkgMzE"}) {
		t.Errorf("queuedTrace = %+v, want the span's traceparent and tracestate", got)
	}
	long := "a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250) + ",c=" + strings.Repeat("z", 250)
	if got := span(long); got != (store.TraceContext{Parent: parent}) {
		t.Errorf("queuedTrace with a tracestate of %d bytes = %q / %d bytes, want the traceparent alone", len(long), got.Parent, len(got.State))
	}
	if got := queuedTrace(t.Context()); got != (store.TraceContext{}) {
		t.Errorf("queuedTrace without a span = %+v, want none", got)
	}
}

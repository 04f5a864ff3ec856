package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// Handler makes a server span of each request h serves, joining the
// caller's trace when the request carries a traceparent. It must wrap the
// *http.ServeMux itself, or a handler that passes it the request it was
// given: the span is named by the route pattern the mux matched (such as
// "POST /api/assistant/runs/{id}/messages"), never by the raw path. With
// tracing off it returns h itself: nothing is added to a request's path.
func (t *Telemetry) Handler(h http.Handler) http.Handler {
	if t.tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "", otelhttp.WithSpanNameFormatter(routeName), otelhttp.WithTracerProvider(t.tp))
}

// routeName is a request's span name: its method and route pattern, or
// its method alone before the mux has matched one (or when none matched).
func routeName(_ string, r *http.Request) string {
	switch {
	case r.Pattern == "":
		return r.Method
	case strings.Contains(r.Pattern, " "):
		return r.Pattern // "POST /api/...": the pattern names the method
	}
	return r.Method + " " + r.Pattern
}

// Transport makes a client span of each request rt sends and passes the
// trace context on with it (traceparent). With tracing off it returns rt
// itself.
func (t *Telemetry) Transport(rt http.RoundTripper) http.RoundTripper {
	if t.tp == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.tp))
}

package telemetry

import (
	"context"
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
	traced := otelhttp.NewHandler(h, "", otelhttp.WithSpanNameFormatter(routeName), otelhttp.WithTracerProvider(t.tp))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traced.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, &route{})))
	})
}

// Routed names the spans of the requests h serves by the route pattern h
// matched, where h is a mux mounted under a prefix of the server's mux
// (which otherwise names them by the prefix, such as "/api/assistant/").
// It must wrap that mux itself. With tracing off it returns h itself.
func (t *Telemetry) Routed(h http.Handler) http.Handler {
	if t.tp == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if rt, ok := r.Context().Value(routeKey{}).(*route); ok && r.Pattern != "" {
			rt.pattern = r.Pattern
		}
	})
}

// routeKey is the context key of a request's route, which Routed sets.
type routeKey struct{}

// route is the pattern a mounted mux matched.
type route struct{ pattern string }

// routeName is a request's span name: its method and route pattern (the
// innermost one, see Routed), or its method alone before the mux has
// matched one (or when none matched).
func routeName(_ string, r *http.Request) string {
	pattern := r.Pattern
	if rt, ok := r.Context().Value(routeKey{}).(*route); ok && rt.pattern != "" {
		pattern = rt.pattern
	}
	switch {
	case pattern == "":
		return r.Method
	case strings.Contains(pattern, " "):
		return pattern // "POST /api/...": the pattern names the method
	}
	return r.Method + " " + pattern
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

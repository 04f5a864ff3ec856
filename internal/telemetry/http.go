package telemetry

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the server spans Handler makes.
const scope = "github.com/usherhq/usher/internal/telemetry"

// Handler makes a server span of each request h serves, joining the
// caller's trace when the request carries a traceparent. It must wrap the
// *http.ServeMux itself, or a handler that passes it the request it was
// given: the span is named by the route pattern the mux matched (such as
// "POST /api/assistant/runs/{id}/messages"), never by the raw path. With
// tracing off it returns h itself: nothing is added to a request's path.
//
// The span carries what the HTTP semantic conventions require of a server
// span and what an operator reads: http.request.method, url.scheme,
// url.path, server.address and server.port (from the Host header),
// network.protocol.version, http.route, http.response.status_code, and
// error.type with an error status when the answer is a 5xx. It is made
// with the trace API directly rather than otelhttp's middleware, whose
// attribute building, body and writer wrapping and metrics cost a
// noticeable share of a tools/call.
func (t *Telemetry) Handler(h http.Handler) http.Handler {
	if t.tp == nil {
		return h
	}
	tracer := t.tp.Tracer(scope)
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method := spanMethod(r.Method)
		ctx, span := tracer.Start(ctx, method, serverSpan...)
		defer span.End()
		sw := &spanWriter{ResponseWriter: w, status: http.StatusOK}
		rc := r.WithContext(context.WithValue(ctx, routeKey{}, sw))
		h.ServeHTTP(sw, rc)
		if !span.IsRecording() {
			return // a trace not sampled: no attribute is built
		}
		// Every attribute is set once, when the answer is known: a span
		// given some at its start and more at its end copies them twice,
		// and no sampler that the OTEL_* variables configure reads them.
		attrs := requestAttrs(r)
		pattern := routePattern(rc, sw)
		if pattern != "" {
			span.SetName(routeName(method, pattern))
			attrs = append(attrs, semconv.HTTPRoute(routePath(pattern)))
		}
		attrs = append(attrs, semconv.HTTPResponseStatusCode(sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, "")
			attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(sw.status)))
		}
		span.SetAttributes(attrs...)
	})
}

// serverSpan is the start option of a server span, made once.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// requestAttrs are the attributes of a request's server span that the
// request gives, with room for those of its answer.
func requestAttrs(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10)
	method, known := knownMethod(r.Method)
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method))
	if !known {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(r.Method))
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs = append(attrs, semconv.URLScheme(scheme), semconv.URLPath(r.URL.Path))
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		host, port = h, p
	}
	if host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
	}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	if v := protocolVersion(r); v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	return attrs
}

// knownMethod is method as http.request.method carries it: itself when
// it is one the HTTP specifications define, else "_OTHER" (and false),
// so that a client cannot make the attribute's values unbounded.
func knownMethod(method string) (string, bool) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method, true
	}
	return "_OTHER", false
}

// spanMethod is the method that names a request's span: its own when
// the specifications define it, else "HTTP", as the semantic conventions
// name a span of an "_OTHER" method.
func spanMethod(method string) string {
	if _, known := knownMethod(method); known {
		return method
	}
	return "HTTP"
}

// protocolVersion is the request's network.protocol.version: "1.1", "2"
// or "3", without building a string.
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0"
	case r.ProtoMajor == 2:
		return "2"
	case r.ProtoMajor == 3:
		return "3"
	}
	return ""
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
		if sw, ok := r.Context().Value(routeKey{}).(*spanWriter); ok && r.Pattern != "" {
			sw.pattern = r.Pattern
		}
	})
}

// routeKey is the context key of a request's spanWriter, on which Routed
// sets the pattern a mounted mux matched.
type routeKey struct{}

// routePattern is the request's route pattern: the innermost one (see
// Routed), or the one the server's mux matched, or "" when none matched.
func routePattern(r *http.Request, sw *spanWriter) string {
	if sw.pattern != "" {
		return sw.pattern
	}
	return r.Pattern
}

// routeName is a request's span name: its method and route pattern.
func routeName(method, pattern string) string {
	if strings.Contains(pattern, " ") {
		return pattern // "POST /api/...": the pattern names the method
	}
	return method + " " + pattern
}

// routePath is the path of a route pattern (http.route), without the
// method a pattern such as "POST /mcp" names.
func routePath(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// spanWriter records the status code of a response and the route a
// mounted mux matched. It keeps Flush and Unwrap working so streaming
// responses and http.ResponseController pass through.
type spanWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	pattern     string
}

func (w *spanWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *spanWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Flush forwards to the underlying writer when it can flush.
func (w *spanWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *spanWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport makes a client span of each request rt sends and passes the
// trace context on with it (traceparent). With tracing off it returns rt
// itself.
func (t *Telemetry) Transport(rt http.RoundTripper) http.RoundTripper {
	if t.tp == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.tp))
}

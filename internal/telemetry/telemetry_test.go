package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/usherhq/usher/internal/telemetry"
	"github.com/usherhq/usher/internal/telemetry/otlptest"
)

// These tests change the process's global tracer provider: none runs in
// parallel.

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var discard = slog.New(slog.DiscardHandler)

// middlewareKey is the context key of a value a middleware adds.
type middlewareKey struct{}

// reset puts back the globals a test's Setup installed.
func reset() {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
}

// TestOffWithoutAnEndpoint: with no OTLP endpoint, Setup installs nothing:
// spans are the no-op's, no traceparent is passed on, and nothing reaches
// a receiver, even with the other OTEL_* variables set.
func TestOffWithoutAnEndpoint(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	for name, vars := range map[string]map[string]string{
		"unset":         {},
		"no endpoint":   {"OTEL_SERVICE_NAME": "usher-test", "OTEL_TRACES_SAMPLER": "always_on"},
		"sdk disabled":  {"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL, "OTEL_SDK_DISABLED": "true"},
		"exporter none": {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL + "/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := telemetry.Setup(t.Context(), env(vars), "v1.2.3", discard)
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			if tel.On() || tel.Handler(mux) != http.Handler(mux) || tel.Transport(http.DefaultTransport) != http.DefaultTransport {
				t.Error("telemetry off wraps handlers or transports")
			}
			ctx, span := otel.Tracer("test").Start(t.Context(), "work")
			if span.IsRecording() || span.SpanContext().IsValid() {
				t.Errorf("a span is recorded with telemetry off: %+v", span.SpanContext())
			}
			span.End()
			h := http.Header{}
			otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
			if len(h) != 0 {
				t.Errorf("headers passed on with telemetry off: %v", h)
			}
			if err := tel.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
	if n := rcv.Requests(); n != 0 {
		t.Errorf("the receiver got %d exports with telemetry off", n)
	}
}

// TestExportsToTheEndpoint: with OTEL_EXPORTER_OTLP_ENDPOINT, spans reach
// the receiver with the process's resource, and the propagator writes a
// traceparent of the span's trace.
func TestExportsToTheEndpoint(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	t.Cleanup(reset)
	for _, tc := range []struct {
		name    string
		vars    map[string]string
		service string
	}{
		{"base endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL + "/"}, "usher"},
		{"traces endpoint and name", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL + "/v1/traces", "OTEL_SERVICE_NAME": "usher-eu"}, "usher-eu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rcv.Spans())
			tel, err := telemetry.Setup(t.Context(), env(tc.vars), "v1.2.3", discard)
			if err != nil {
				t.Fatal(err)
			}
			ctx, span := otel.Tracer("test").Start(t.Context(), "work "+tc.name)
			h := http.Header{}
			otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
			span.End()
			if err := tel.Shutdown(t.Context()); err != nil { // flushes the batch
				t.Fatal(err)
			}
			spans := rcv.Spans()[before:]
			if len(spans) != 1 || spans[0].GetName() != "work "+tc.name {
				t.Fatalf("received %d spans: %v", len(spans), spans)
			}
			got := spans[0]
			if want := "00-" + got.TraceID() + "-" + got.SpanID() + "-01"; h.Get("traceparent") != want {
				t.Errorf("traceparent = %q, want %q", h.Get("traceparent"), want)
			}
			res := map[string]string{}
			for _, kv := range got.Resource.GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			if res["service.name"] != tc.service || res["service.version"] != "v1.2.3" {
				t.Errorf("resource = %v, want service %s at v1.2.3", res, tc.service)
			}
		})
	}
}

// TestLogLinesCarryTheTrace: a line logged with a context that holds a
// span carries its trace_id and span_id; one without does not.
func TestLogLinesCarryTheTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background()) //nolint:errcheck // nothing to flush
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	ctx, span := tp.Tracer("test").Start(t.Context(), "request")
	log.InfoContext(ctx, "refused", "reason", "r")
	span.End()
	log.Info("no span")

	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	sc := span.SpanContext()
	if len(lines) != 2 || lines[0]["trace_id"] != sc.TraceID().String() || lines[0]["span_id"] != sc.SpanID().String() || lines[0]["component"] != "test" {
		t.Fatalf("the line with a span = %v, want trace_id %s span_id %s", lines, sc.TraceID(), sc.SpanID())
	}
	if _, ok := lines[1]["trace_id"]; ok {
		t.Errorf("the line without a span has a trace_id: %v", lines[1])
	}
}

// TestHandlerNamesSpansByRoute: the server span of a request is named by
// the route pattern the mux matched, never by the raw path, and joins
// the trace of the traceparent the request carries.
func TestHandlerNamesSpansByRoute(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	t.Cleanup(reset)
	tel, err := telemetry.Setup(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}), "v1", discard)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/files/", func(http.ResponseWriter, *http.Request) {})
	// A mux mounted under a prefix names its requests by its own routes.
	api := http.NewServeMux()
	api.HandleFunc("POST /api/runs/{id}/messages", func(http.ResponseWriter, *http.Request) {})
	mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tel.Routed(api).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middlewareKey{}, "as a middleware does")))
	}))
	srv := httptest.NewServer(tel.Handler(mux))
	defer srv.Close()
	client := &http.Client{Transport: tel.Transport(http.DefaultTransport)}
	ctx, parent := otel.Tracer("test").Start(t.Context(), "client")
	for _, path := range []string{"GET /runs/run_secret1", "GET /files/a/b", "GET /nowhere", "POST /api/runs/run_2/messages"} {
		method, path, _ := strings.Cut(path, " ")
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	parent.End()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range rcv.Spans() {
		if s.GetKind() == 2 { // SPAN_KIND_SERVER
			names[s.GetName()] = true
			if s.TraceID() != parent.SpanContext().TraceID().String() {
				t.Errorf("server span %q is not in the client's trace", s.GetName())
			}
		}
	}
	// "/nowhere" matched no route: its span is named by its method.
	for _, want := range []string{"GET /runs/{id}", "GET /files/", "GET", "POST /api/runs/{id}/messages"} {
		if !names[want] {
			t.Errorf("no server span named %q: %v", want, names)
		}
	}
	if len(names) != 4 {
		t.Errorf("server spans = %v, want one per route", names)
	}
}

// TestHandlerSpanAttributes: a request's server span carries the HTTP
// semantic conventions' attributes (method, scheme, path, server address
// and port, protocol version, route, status code); an answer of 5xx marks
// the span failed with its code as error.type, a 4xx does not; a method
// the specifications do not define is "_OTHER", with the original beside
// it; a flushing handler still flushes through the span's writer.
func TestHandlerSpanAttributes(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	t.Cleanup(reset)
	tel, err := telemetry.Setup(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}), "v1", discard)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the span's writer: %v", err)
		}
	})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	mux.HandleFunc("GET /refused", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
	mux.HandleFunc("/any", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(tel.Handler(mux))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for _, path := range []string{"POST /mcp", "GET /broken", "GET /refused", "BREW /any"} {
		method, path, _ := strings.Cut(path, " ")
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// To its end, which the server sends after the handler (and the
		// span) ended, even when the handler flushed the header before.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	type want struct {
		attrs  map[string]string
		failed bool
	}
	wants := map[string]want{
		"POST /mcp": {attrs: map[string]string{"http.request.method": "POST", "url.scheme": "http", "url.path": "/mcp",
			"server.address": "127.0.0.1", "server.port": strconv.Itoa(port), "network.protocol.version": "1.1",
			"http.route": "/mcp", "http.response.status_code": "200", "error.type": ""}},
		"GET /broken":  {attrs: map[string]string{"http.route": "/broken", "http.response.status_code": "502", "error.type": "502"}, failed: true},
		"GET /refused": {attrs: map[string]string{"http.response.status_code": "403", "error.type": ""}},
		"HTTP /any":    {attrs: map[string]string{"http.request.method": "_OTHER", "http.request.method_original": "BREW", "http.route": "/any"}},
	}
	got := map[string]bool{}
	for _, s := range rcv.Spans() {
		w, ok := wants[s.GetName()]
		if !ok {
			t.Errorf("a server span named %q", s.GetName())
			continue
		}
		got[s.GetName()] = true
		for key, v := range w.attrs {
			a, ok := s.Attr(key)
			value := ""
			if ok {
				value = a.GetStringValue()
				if iv, isInt := a.GetValue().(*commonpb.AnyValue_IntValue); isInt {
					value = strconv.FormatInt(iv.IntValue, 10)
				}
			}
			if value != v {
				t.Errorf("span %q: %s = %q, want %q", s.GetName(), key, value, v)
			}
		}
		if failed := s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR; failed != w.failed {
			t.Errorf("span %q: failed %v, want %v", s.GetName(), failed, w.failed)
		}
	}
	if len(got) != len(wants) {
		t.Errorf("server spans %v, want %d", got, len(wants))
	}
}

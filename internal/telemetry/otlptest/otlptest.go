package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span and the resource of the process that sent
// it.
type Span struct {
	*tracepb.Span
	Resource *resourcepb.Resource
}

// TraceID is the span's trace id, in hex as traceparent writes it.
func (s Span) TraceID() string { return hex.EncodeToString(s.Span.GetTraceId()) }

// SpanID is the span's id, in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.Span.GetSpanId()) }

// ParentSpanID is the span's parent's id, in hex; empty for a root.
func (s Span) ParentSpanID() string { return hex.EncodeToString(s.Span.GetParentSpanId()) }

// Attr returns the value of the span's attribute key, and whether it has
// one.
func (s Span) Attr(key string) (*commonpb.AnyValue, bool) {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}

// Receiver is an OTLP/HTTP endpoint (POST /v1/traces) that keeps what it
// receives.
type Receiver struct {
	// URL is the endpoint's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu       sync.Mutex
	spans    []Span
	requests int
}

// NewReceiver starts a receiver, closed when the test ends. A request it
// cannot decode fails the test.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("otlptest: an export that is not OTLP protobuf (%s): %v", req.Header.Get("Content-Type"), err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		for _, rs := range export.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, Span{Span: s, Resource: rs.GetResource()})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out) //nolint:errcheck // the exporter reads it or not
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests counts the exports received so far, empty or not.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Strings returns every string the span carries in an attribute (of the
// span, its events and links, and its resource), each value of a list
// or map too, with its key: what a test scans for what must never be
// exported.
func (s Span) Strings() map[string][]string {
	out := map[string][]string{}
	var add func(key string, v *commonpb.AnyValue)
	add = func(key string, v *commonpb.AnyValue) {
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[key] = append(out[key], x.StringValue)
		case *commonpb.AnyValue_BytesValue:
			out[key] = append(out[key], string(x.BytesValue))
		case *commonpb.AnyValue_ArrayValue:
			for _, e := range x.ArrayValue.GetValues() {
				add(key, e)
			}
		case *commonpb.AnyValue_KvlistValue:
			for _, kv := range x.KvlistValue.GetValues() {
				add(key+"."+kv.GetKey(), kv.GetValue())
			}
		}
	}
	addAll := func(prefix string, kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			add(prefix+kv.GetKey(), kv.GetValue())
		}
	}
	addAll("", s.GetAttributes())
	for _, e := range s.GetEvents() {
		out["event"] = append(out["event"], e.GetName())
		addAll("event.", e.GetAttributes())
	}
	for _, l := range s.GetLinks() {
		addAll("link.", l.GetAttributes())
	}
	addAll("resource.", s.Resource.GetAttributes())
	out["name"] = append(out["name"], s.GetName())
	if st := s.GetStatus(); st != nil {
		out["status"] = append(out["status"], st.GetMessage())
	}
	return out
}

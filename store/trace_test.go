package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/usherhq/usher/internal/telemetry/otlptest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestStatementSpans: on PostgreSQL, a store opened with a tracer
// provider makes a client span of each statement sent on its own, and one
// of each batch (its statements' texts joined, its size), in the trace of
// the context it runs with, carrying the statements' text but none of
// their arguments, named by its operation and naming the server and
// database; a store opened without one makes none.
func TestStatementSpans(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	rcv := otlptest.NewReceiver(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(rcv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background()) //nolint:errcheck // flushed below
	open := func(o *store.Options) store.Store {
		s, err := store.Open(t.Context(), url, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	traced, untraced := open(&store.Options{TracerProvider: tp}), open(nil)
	if err := traced.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}

	const secret, untracedSecret = "statement-argument-3e1f", "untraced-argument-77ab"
	message := func(text string) store.NewEvent {
		p, _ := json.Marshal(map[string]string{"content": text})
		return store.NewEvent{Type: store.EventUserMessage, Payload: p, Preview: text}
	}
	ctx, request := tp.Tracer("test").Start(t.Context(), "request")
	first := message(secret)
	if _, _, err := traced.OpenRun(ctx, store.Run{ID: "run-1", Owner: "owner", IdempotencyKey: secret}, 5, &first); err != nil {
		t.Fatal(err)
	}
	// The post's statement is the only one that wakes an Idle run.
	if _, _, err := untraced.PostMessage(ctx, "run-1", message(untracedSecret)); err != nil {
		t.Fatal(err)
	}
	// An audit record is written in batches: a span of the request's for
	// each, with all its statements.
	if _, err := traced.AppendAudit(ctx, func(head store.AuditHead) (store.AuditRecord, error) {
		return store.AuditRecord{Seq: head.Seq + 1, PrevHash: head.Hash, Hash: "h1", Kind: "decision", At: time.Now().Truncate(time.Microsecond)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	request.End()
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}

	var statements []string
	batches := 0
	for _, s := range rcv.Spans() {
		if name := s.GetName(); name == "batch start" || strings.HasPrefix(name, "prepare") {
			t.Errorf("a span of the driver's own step: %q", name)
		}
		for key, values := range s.Strings() {
			for _, v := range values {
				if strings.Contains(v, secret) || strings.Contains(v, untracedSecret) {
					t.Errorf("span %q: %s carries an argument: %q", s.GetName(), key, v)
				}
			}
		}
		q, ok := s.Attr("db.query.text")
		if !ok {
			continue
		}
		statements = append(statements, q.GetStringValue())
		op, _ := s.Attr("db.operation.name")
		addr, _ := s.Attr("server.address")
		ns, _ := s.Attr("db.namespace")
		if sys, _ := s.Attr("db.system.name"); sys.GetStringValue() != "postgresql" || s.GetKind() != 3 || // SPAN_KIND_CLIENT
			s.TraceID() != request.SpanContext().TraceID().String() ||
			s.GetName() != op.GetStringValue() || addr.GetStringValue() == "" || ns.GetStringValue() == "" {
			t.Errorf("statement span %q: kind %d, trace %s (the request's %s), attributes %v",
				s.GetName(), s.GetKind(), s.TraceID(), request.SpanContext().TraceID(), s.GetAttributes())
		}
		if s.ParentSpanID() != request.SpanContext().SpanID().String() {
			t.Errorf("statement span %q is not a child of the request's span", s.GetName())
		}
		if size, ok := s.Attr("db.operation.batch.size"); ok {
			batches++
			if !strings.HasPrefix(s.GetName(), "BATCH") || size.GetIntValue() < 2 ||
				int64(strings.Count(q.GetStringValue(), "; ")) != size.GetIntValue()-1 {
				t.Errorf("batch span %q of %d statements: %q", s.GetName(), size.GetIntValue(), q.GetStringValue())
			}
		}
		if strings.Contains(q.GetStringValue(), "WHEN status = 'Idle'") {
			t.Errorf("the untraced store's statement has a span: %s", q.GetStringValue())
		}
	}
	inserted, audited := false, false
	for _, q := range statements {
		inserted = inserted || strings.Contains(q, "INSERT INTO runs")
		audited = audited || strings.Contains(q, "INSERT INTO audit_log")
	}
	if batches == 0 { // the audit record's (two round trips when the head is not known)
		t.Error("no span of a batch")
	}
	if !inserted || !audited {
		t.Errorf("no span of the run's INSERT or of the audit record's among %d statement spans: %q", len(statements), statements)
	}
}

package otlptest_test

import (
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/usherhq/usher/internal/telemetry/otlptest"
)

// TestStringsFindsEveryPlace: a string a span carries anywhere an
// exporter puts one (its name, status, attributes and the values inside
// lists, maps and bytes, its events and their attributes, its links'
// attributes, its resource) is among Strings, so that a scan for what
// must never be exported cannot miss it.
func TestStringsFindsEveryPlace(t *testing.T) {
	t.Parallel()
	const secret = "secret-5b7e"
	str := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	kv := func(v *commonpb.AnyValue) []*commonpb.KeyValue { return []*commonpb.KeyValue{{Key: "k", Value: v}} }
	for name, s := range map[string]otlptest.Span{
		"name":      {Span: &tracepb.Span{Name: "call " + secret}},
		"status":    {Span: &tracepb.Span{Status: &tracepb.Status{Message: "failed: " + secret}}},
		"attribute": {Span: &tracepb.Span{Attributes: kv(str(secret))}},
		"bytes":     {Span: &tracepb.Span{Attributes: kv(&commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte(secret)}})}},
		"list": {Span: &tracepb.Span{Attributes: kv(&commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{
			ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{str("a"), str(secret)}}}})}},
		"map": {Span: &tracepb.Span{Attributes: kv(&commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{
			KvlistValue: &commonpb.KeyValueList{Values: kv(str(secret))}}})}},
		"event name":      {Span: &tracepb.Span{Events: []*tracepb.Span_Event{{Name: secret}}}},
		"event attribute": {Span: &tracepb.Span{Events: []*tracepb.Span_Event{{Name: "exception", Attributes: kv(str(secret))}}}},
		"link attribute":  {Span: &tracepb.Span{Links: []*tracepb.Span_Link{{Attributes: kv(str(secret))}}}},
		"resource":        {Span: &tracepb.Span{}, Resource: &resourcepb.Resource{Attributes: kv(str(secret))}},
	} {
		found := false
		for _, values := range s.Strings() {
			for _, v := range values {
				found = found || strings.Contains(v, secret)
			}
		}
		if !found {
			t.Errorf("a secret in the span's %s is not among its Strings: %v", name, s.Strings())
		}
	}
}

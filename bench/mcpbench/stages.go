package main

import (
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// stageNames are the stages Usher times of each tools/call
// (usher_mcp_tool_call_stage_seconds), in the order a call goes through them.
var stageNames = []string{"decide", "record", "upstream"}

// timeSum is a histogram's sum, count and cumulative bucket counts.
type timeSum struct {
	seconds float64
	count   float64
	buckets []bucket
}

// bucket is a histogram bucket: the count of observations at most le
// seconds.
type bucket struct{ le, count float64 }

// timeSumOf reads a histogram.
func timeSumOf(h *dto.Histogram) *timeSum {
	t := &timeSum{seconds: h.GetSampleSum(), count: float64(h.GetSampleCount())}
	for _, b := range h.GetBucket() {
		t.buckets = append(t.buckets, bucket{le: b.GetUpperBound(), count: float64(b.GetCumulativeCount())})
	}
	return t
}

// quantile estimates the q-quantile of the observations of a since b from
// their buckets, as Prometheus's histogram_quantile does: linearly within
// the bucket it falls in. Past the last bound it is that bound; 0 when
// there are none.
func quantile(a, b *timeSum, q float64) time.Duration {
	if a == nil || len(a.buckets) == 0 {
		return 0
	}
	before := func(i int) float64 {
		if b == nil || i >= len(b.buckets) {
			return 0
		}
		return b.buckets[i].count
	}
	n := a.count
	if b != nil {
		n -= b.count
	}
	if n <= 0 {
		return 0
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, bk := range a.buckets {
		c := bk.count - before(i)
		if c >= rank {
			f := 1.0
			if c > below {
				f = (rank - below) / (c - below)
			}
			return time.Duration((lower + (bk.le-lower)*f) * float64(time.Second))
		}
		lower, below = bk.le, c
	}
	return time.Duration(lower * float64(time.Second))
}

// stageSample is what Usher's /metrics says so far of the stages of its
// tool calls and of the endpoint's POST requests (the whole request inside
// Usher's HTTP server, usher_http_request_duration_seconds).
type stageSample struct {
	stages   map[string]*timeSum
	endpoint timeSum
}

// stageMeans are the mean times per call of the stages over a phase, and
// of the endpoint's requests, and their 99th percentiles as the
// histograms' buckets give them.
type stageMeans struct {
	stages      map[string]time.Duration
	endpoint    time.Duration
	p99         map[string]time.Duration
	endpointP99 time.Duration
}

// other is the time of the endpoint's requests outside the stages: the
// authentication, the MCP session layer on the server side, writing the
// response.
func (m stageMeans) other() time.Duration {
	d := m.endpoint
	for _, s := range m.stages {
		d -= s
	}
	return d
}

// sampleStages reads Usher's /metrics.
func sampleStages(ctx context.Context, usherURL string) (stageSample, error) {
	resp, err := get(ctx, usherURL+"/metrics")
	if err != nil {
		return stageSample{}, fmt.Errorf("usher's /metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return stageSample{}, fmt.Errorf("usher's /metrics: %w", err)
	}
	s := stageSample{stages: map[string]*timeSum{}}
	for _, m := range families["usher_mcp_tool_call_stage_seconds"].GetMetric() {
		s.stages[label(m, "stage")] = timeSumOf(m.GetHistogram())
	}
	for _, m := range families["usher_http_request_duration_seconds"].GetMetric() {
		if label(m, "route") == "/mcp" && label(m, "method") == "POST" {
			s.endpoint = *timeSumOf(m.GetHistogram())
		}
	}
	return s, nil
}

// label is the value of m's label name, or empty.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// since is the mean per call of each stage, and of the endpoint's
// requests, from before to s.
func (s stageSample) since(before stageSample) stageMeans {
	mean := func(a, b *timeSum) time.Duration {
		if a == nil {
			return 0
		}
		if b == nil {
			b = &timeSum{}
		}
		n := a.count - b.count
		if n <= 0 {
			return 0
		}
		return time.Duration((a.seconds - b.seconds) / n * float64(time.Second))
	}
	m := stageMeans{stages: map[string]time.Duration{}, endpoint: mean(&s.endpoint, &before.endpoint),
		p99: map[string]time.Duration{}, endpointP99: quantile(&s.endpoint, &before.endpoint, 0.99)}
	for _, name := range stageNames {
		m.stages[name] = mean(s.stages[name], before.stages[name])
		m.p99[name] = quantile(s.stages[name], before.stages[name], 0.99)
	}
	return m
}

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

// timeSum is a histogram's sum and count.
type timeSum struct {
	seconds float64
	count   float64
}

// stageSample is what Usher's /metrics says so far of the stages of its
// tool calls and of the endpoint's POST requests (the whole request inside
// Usher's HTTP server, usher_http_request_duration_seconds).
type stageSample struct {
	stages   map[string]*timeSum
	endpoint timeSum
}

// stageMeans are the mean times per call of the stages over a phase, and
// of the endpoint's requests.
type stageMeans struct {
	stages   map[string]time.Duration
	endpoint time.Duration
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
		s.stages[label(m, "stage")] = &timeSum{seconds: m.GetHistogram().GetSampleSum(), count: float64(m.GetHistogram().GetSampleCount())}
	}
	for _, m := range families["usher_http_request_duration_seconds"].GetMetric() {
		if label(m, "route") == "/mcp" && label(m, "method") == "POST" {
			s.endpoint = timeSum{seconds: m.GetHistogram().GetSampleSum(), count: float64(m.GetHistogram().GetSampleCount())}
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
	m := stageMeans{stages: map[string]time.Duration{}, endpoint: mean(&s.endpoint, &before.endpoint)}
	for _, name := range stageNames {
		m.stages[name] = mean(s.stages[name], before.stages[name])
	}
	return m
}

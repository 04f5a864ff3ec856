package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
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
	s := stageSample{stages: map[string]*timeSum{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, labels, value, ok := metricLine(sc.Text())
		if !ok {
			continue
		}
		var t *timeSum
		switch {
		case strings.HasPrefix(name, "usher_mcp_tool_call_stage_seconds_"):
			stage := labelValue(labels, "stage")
			if s.stages[stage] == nil {
				s.stages[stage] = &timeSum{}
			}
			t = s.stages[stage]
			name = strings.TrimPrefix(name, "usher_mcp_tool_call_stage_seconds_")
		case strings.HasPrefix(name, "usher_http_request_duration_seconds_") &&
			labelValue(labels, "route") == "/mcp" && labelValue(labels, "method") == "POST":
			t = &s.endpoint
			name = strings.TrimPrefix(name, "usher_http_request_duration_seconds_")
		default:
			continue
		}
		switch name {
		case "sum":
			t.seconds = value
		case "count":
			t.count = value
		}
	}
	if err := sc.Err(); err != nil {
		return stageSample{}, fmt.Errorf("usher's /metrics: %w", err)
	}
	return s, nil
}

// metricLine splits a sample line of the Prometheus text format.
func metricLine(line string) (name, labels string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return "", "", 0, false
		}
		name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, v, err == nil
}

// labelValue is the value of label name in a label list (`a="x",b="y"`);
// the values Usher's metrics carry here hold no quotes or commas.
func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
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

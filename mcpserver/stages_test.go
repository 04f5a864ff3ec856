package mcpserver

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestStageMetrics checks that the stages of tool calls are timed on the
// Registerer: every call that reaches a verdict is decided, and only one
// that is allowed is recorded and calls its tool.
func TestStageMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envConfig{server: func(o *Options) { o.Registerer = reg }})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "notes_list", map[string]any{}, nil); res.IsError {
		t.Fatalf("notes_list: %s", text(res))
	}
	if res := call(t, cs, "notes_list", map[string]any{}, mcp.Meta{MetaIdempotencyKey: "stage-1"}); res.IsError {
		t.Fatalf("notes_list with a key: %s", text(res))
	}
	if res := call(t, cs, "notes_delete", map[string]any{"name": "n"}, nil); !res.IsError {
		t.Fatal("notes_delete was not denied")
	}
	call(t, cs, "no_such_tool", map[string]any{}, nil) // never decided

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "usher_mcp_tool_call_stage_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
					if m.GetHistogram().GetSampleSum() <= 0 && m.GetHistogram().GetSampleCount() > 0 {
						t.Errorf("stage %s: %d samples summing to %v", l.GetValue(), m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum())
					}
				}
			}
		}
	}
	want := map[string]uint64{stageDecide: 3, stageRecord: 2, stageUpstream: 2}
	for stage, n := range want {
		if counts[stage] != n {
			t.Errorf("stage %s: %d samples, want %d (all: %v)", stage, counts[stage], n, counts)
		}
	}
}

// TestStageMetricsRegisteredOnce checks that a second Server on the same
// Registerer is refused with a clear error rather than sharing or
// replacing the first one's histogram.
func TestStageMetricsRegisteredOnce(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envConfig{server: func(o *Options) { o.Registerer = reg }})
	opts := e.server.opts
	opts.Registerer = reg
	_, err := New(&opts)
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("New with a Registerer already holding the metrics: %v, want an error about metrics", err)
	}
}

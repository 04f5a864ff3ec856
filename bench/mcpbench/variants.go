package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/bench/child"
)

// variant is a configuration of -usher's binary measured beside the plain
// one (A: no audit sink, tracing off) in the same run, as an operator
// would configure it, against the run's collector (bench/collector).
type variant struct {
	key   string // its name in -variants, and its report keys' prefix
	title string
	setup func(c *collectorRun) usherSetup
	// check waits until the collector has what this Usher must have sent
	// it, and says what it got; records is its audit log's length, calls
	// the calls through it.
	// u is its Usher.
	check func(ctx context.Context, c *collectorRun, u *usherRun, records, calls int64) (string, error)
	// spans says this Usher exports a span of each call to the
	// collector: each reading of its CPU time waits until the collector
	// has them (see spanSettler).
	spans bool
}

// usherSetup is what a variant changes of Usher's process.
type usherSetup struct {
	env   []string // its environment: baseEnv and the variant's
	audit string   // its configuration's audit section (YAML); empty: none
	addr  string   // its listener's address; empty: a free loopback port
	// stateful turns the endpoint stateful (mcp.stateful), whatever
	// -stateful says.
	stateful bool
}

// variants are the variants -variants names.
var variants = []variant{
	{
		key:   "sink",
		title: "an audit webhook sink delivering to a loopback receiver",
		setup: func(c *collectorRun) usherSetup {
			return usherSetup{env: baseEnv(), audit: fmt.Sprintf(`audit:
  sinks:
    - name: bench
      webhook:
        url: %q
        secret_file: %q
`, c.url+"/audit", c.secretFile)}
		},
		check: checkSink,
	},
	{
		key:   "traced",
		title: "tracing on: every trace sampled, exported over OTLP/HTTP to a loopback receiver",
		setup: func(c *collectorRun) usherSetup {
			env := append(baseEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT="+c.url, "OTEL_TRACES_SAMPLER=always_on")
			if c.exportDelay > 0 {
				env = append(env, fmt.Sprintf("OTEL_BSP_SCHEDULE_DELAY=%d", c.exportDelay.Milliseconds()))
			}
			return usherSetup{env: env}
		},
		check: checkSpans,
		spans: true,
	},
	{
		key:   "stateful",
		title: "the stateful endpoint (mcp.stateful: each client's session recorded in the database, its responses kept for resumption)",
		setup: func(*collectorRun) usherSetup {
			return usherSetup{env: baseEnv(), stateful: true}
		},
		check: checkStateful,
	},
}

// parseVariants reads -variants: keys of variants, comma-separated; empty
// for none.
func parseVariants(s string) ([]variant, error) {
	var out []variant
	seen := map[string]bool{}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		i := -1
		for j, v := range variants {
			if v.key == k {
				i = j
			}
		}
		if i < 0 || seen[k] {
			return nil, fmt.Errorf("-variants: %q is not one of sink, traced and stateful, or is named twice", k)
		}
		seen[k] = true
		out = append(out, variants[i])
	}
	return out, nil
}

// baseEnv is this process's environment without the OTEL_* variables, so
// that every Usher of the run has tracing off unless its variant turns it
// on, whatever the caller's environment says.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

var collectorReady = regexp.MustCompile(`^collector at (http://\S+)`)

// collectorRun is the run's receiver of spans and audit batches.
type collectorRun struct {
	proc       *child.Process
	url        string
	secretFile string
	// exportDelay is the traced Ushers' OTEL_BSP_SCHEDULE_DELAY (-export-delay);
	// zero: the SDK's default (5 s).
	exportDelay time.Duration
}

// startCollector starts bin (bench/collector) with a new webhook secret
// written in dir.
func startCollector(bin, dir string, exportDelay time.Duration) (*collectorRun, error) {
	c := &collectorRun{secretFile: filepath.Join(dir, "sink-secret"), exportDelay: exportDelay}
	if err := os.WriteFile(c.secretFile, []byte(rand.Text()+rand.Text()+"\n"), 0o600); err != nil {
		return nil, err
	}
	var err error
	c.proc, c.url, err = child.Start("collector", filepath.Join(dir, "collector.log"), bin, collectorReady, "-secret-file", c.secretFile)
	return c, err
}

// collectorCounts is what the collector answers at GET /counts.
type collectorCounts struct {
	TraceExports    int64            `json:"trace_exports"`
	Spans           int64            `json:"spans"`
	SpanNames       map[string]int64 `json:"span_names"`
	AuditBatches    int64            `json:"audit_batches"`
	AuditRecords    int64            `json:"audit_records"`
	AuditDuplicates int64            `json:"audit_duplicates"`
	AuditMaxSeq     int64            `json:"audit_max_seq"`
	Checkpoints     int64            `json:"checkpoints"`
	Refused         int64            `json:"refused"`
}

func (c *collectorRun) counts(ctx context.Context) (collectorCounts, error) {
	var out collectorCounts
	resp, err := get(ctx, c.url+"/counts")
	if err != nil {
		return out, fmt.Errorf("the collector's counts: %w", err)
	}
	defer resp.Body.Close()
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// waitCounts polls the collector until done says its counts are complete,
// or the deadline passes (the sink delivers every 2 s, the exporter
// every 5 s: in another process, so polled); it returns the last counts.
func (c *collectorRun) waitCounts(ctx context.Context, within time.Duration, done func(collectorCounts) bool) (collectorCounts, bool, error) {
	deadline := time.Now().Add(within)
	for {
		n, err := c.counts(ctx)
		if err != nil || done(n) {
			return n, err == nil, err
		}
		if time.Now().After(deadline) {
			return n, false, nil
		}
		select {
		case <-ctx.Done():
			return n, false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkSink waits until every record of the sink Usher's log reached the
// receiver, signed as it must be; records that do not arrive within a
// minute fail the run.
func checkSink(ctx context.Context, c *collectorRun, _ *usherRun, records, _ int64) (string, error) {
	n, ok, err := c.waitCounts(ctx, time.Minute, func(n collectorCounts) bool { return n.AuditRecords >= records })
	if err != nil {
		return "", err
	}
	if n.Refused > 0 {
		return "", fmt.Errorf("the receiver refused %d requests (a wrong signature or a line that is not a record); its log: %s", n.Refused, c.proc.Log)
	}
	if !ok || n.AuditMaxSeq != records {
		return "", fmt.Errorf("the sink delivered %d records (up to #%d) of %d within a minute", n.AuditRecords, n.AuditMaxSeq, records)
	}
	return fmt.Sprintf("sink: the receiver got all %d records (each signature checked) in %d batches, %d again, and %d checkpoints",
		n.AuditRecords, n.AuditBatches, n.AuditDuplicates, n.Checkpoints), nil
}

// spanCallsName is the span of each tools/call at Usher's endpoint, as
// the collector counts it (kind, and name with the tool).
const spanCallsName = "SERVER tools/call up__echo"

// checkSpans waits until the receiver holds a tools/call span of Usher's
// endpoint for every call through the traced Usher: tracing was on. Spans
// missing after 20 s (the exporter sends every 5 s) are reported, not
// failed: an exporter that drops spans under load is a finding.
func checkSpans(ctx context.Context, c *collectorRun, _ *usherRun, _, calls int64) (string, error) {
	n, _, err := c.waitCounts(ctx, 20*time.Second, func(n collectorCounts) bool { return n.SpanNames[spanCallsName] >= calls })
	if err != nil {
		return "", err
	}
	if n.Refused > 0 {
		return "", fmt.Errorf("the receiver refused %d exports; its log: %s", n.Refused, c.proc.Log)
	}
	if n.SpanNames[spanCallsName] == 0 {
		return "", fmt.Errorf("the traced Usher exported no %q span for %d calls (%d spans in all)", spanCallsName, calls, n.Spans)
	}
	return fmt.Sprintf("traces: the receiver got %d spans in %d exports, %.1f per call; %d %q spans for %d calls; per call: %s",
		n.Spans, n.TraceExports, float64(n.Spans)/float64(max(calls, 1)), n.SpanNames[spanCallsName], spanCallsName, calls, perCall(n.SpanNames, calls)), nil
}

// settleWithin bounds a spanSettler's wait: the batch span processor
// exports what it holds every 5 s (OTEL_BSP_SCHEDULE_DELAY's default,
// unless -export-delay sets it).
const settleWithin = 10 * time.Second

// spanSettler makes each reading of a traced Usher's CPU time count the
// export of every span its calls so far have ended: its settle waits
// until the collector holds the tools/call span of every call through
// the Ushers that export to it. A batch span processor exports up to 5 s
// after a span ends, otherwise often when the phase that made the span is
// over and another Usher's is running, where no reading counts it. The
// tools/call span ends last but for its HTTP request's, and the
// processor exports spans in the order they ended.
type spanSettler struct {
	coll  *collectorRun
	paths []*path // the calls through the Ushers that export to coll

	waits  int           // settles
	waited time.Duration // their time together
	short  int64         // spans missing when a settle gave up, summed
}

// settle waits until the collector holds a tools/call span of every call
// so far, or settleWithin has passed (the exporter dropped spans: that
// is counted, not failed, as checkSpans does).
func (s *spanSettler) settle(ctx context.Context) error {
	var want int64
	for _, p := range s.paths {
		want += p.calls.Load()
	}
	start := time.Now()
	n, ok, err := s.coll.waitCounts(ctx, settleWithin, func(n collectorCounts) bool { return n.SpanNames[spanCallsName] >= want })
	s.waits++
	s.waited += time.Since(start)
	if err == nil && !ok {
		s.short += want - n.SpanNames[spanCallsName]
	}
	return err
}

// String says how the settles went, for the report's note.
func (s *spanSettler) String() string {
	out := fmt.Sprintf("each of the %d readings of a traced Usher's CPU time waited until the receiver had every call's span: %.2f s on average",
		s.waits, s.waited.Seconds()/float64(max(s.waits, 1)))
	if s.short > 0 {
		out += fmt.Sprintf("; %d spans had not arrived when a reading gave up waiting after %s", s.short, settleWithin)
	}
	return out
}

// perCall lists the spans by kind and name, each with its count per call,
// the most frequent first; names of fewer than one span in 100 calls are
// left out.
func perCall(names map[string]int64, calls int64) string {
	keys := slices.Collect(maps.Keys(names))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(names[b], names[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		if per := float64(names[k]) / float64(max(calls, 1)); per >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
		}
	}
	return strings.Join(parts, ", ")
}

// checkStateful checks that every client of the stateful Usher was given
// a session (Mcp-Session-Id), as only the stateful endpoint gives one.
func checkStateful(_ context.Context, _ *collectorRun, u *usherRun, _, _ int64) (string, error) {
	ids := map[string]bool{}
	for _, cs := range u.via.sessions {
		if cs.ID() == "" {
			return "", errors.New("stateful: a client of its Usher was given no session: the endpoint is stateless")
		}
		ids[cs.ID()] = true
	}
	return fmt.Sprintf("stateful: each of its %d clients held a session of its own", len(ids)), nil
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain deletes the programs the test built, if it built them.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Remove()
	os.Exit(code)
}

// TestShortRun builds usher and the echo upstream and runs the whole
// benchmark with small sizes, for each method: three processes, the paired phase, both
// throughput phases, the CPU figures and the audit check, and the report
// with every key; for tools/call with every variant (a sink, tracing on,
// the stateful endpoint)
// and -against as well. On PostgreSQL when TEST_DATABASE_URL is set.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries")
	}
	dir := t.TempDir()
	usher, upstream := testenv.Usher(t), testenv.Path(t, "bench/echoupstream")
	proxy, netdelay := testenv.Path(t, "bench/passproxy"), testenv.Path(t, "bench/netdelay")
	collector := testenv.Path(t, "bench/collector")
	for _, method := range []string{"tools/call", "resources/read", "prompts/get"} {
		t.Run(method, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			o := options{
				usher: usher, upstream: upstream, proxy: proxy, netdelay: netdelay, method: method,
				database: os.Getenv("TEST_DATABASE_URL"), pairs: 30, warmup: 5, concurrency: 2,
				duration: 300 * time.Millisecond, protocol: "2025-11-25", idempotencyKey: true,
			}
			if method == "tools/call" {
				o.profile = filepath.Join(dir, "cpu.pprof")
				o.against = o.usher // a second Usher, beside the first, traced
				o.variants, o.collector, o.againstVariant = variants, collector, "traced"
				// Each CPU reading of a traced Usher waits for its spans:
				// exported every 100 ms instead of every 5 s.
				o.exportDelay = 100 * time.Millisecond
			}
			if method == "prompts/get" {
				o.gap = time.Millisecond
			}
			if method == "resources/read" && o.database != "" {
				o.dbRTT = time.Millisecond // Usher's database behind the relay
			}
			if err := run(t.Context(), o, &out); err != nil {
				t.Fatal(err)
			}
			t.Logf("run took %s\n%s", time.Since(start), out.String())
			if o.dbRTT > 0 {
				if !regexp.MustCompile(`(?m)^db_rtt_ms 1\.000$`).Match(out.Bytes()) {
					t.Error("the report does not say the relay added 1 ms to PostgreSQL's round trips")
				}
				checkPositive(t, out.Bytes(), "db_round_trip_p50_ms")
			}
			for _, key := range []string{"added_p50_ms", "added_p99_ms", "usher_p50_ms", "direct_p99_ms", "c_usher_calls_per_s",
				"c_direct_calls_per_s", "c_cpu_ms_per_call_usher", "c_cpu_ms_per_call_upstream_direct", "c_cpu_ms_per_call_postgres", "load1_start",
				"proxy_added_p50_ms", "added_p50_ratio_to_proxy", "c_proxy_calls_per_s", "c_cpu_ms_per_call_proxy"} {
				if !regexp.MustCompile(`(?m)^` + key + ` \S+$`).Match(out.Bytes()) {
					t.Errorf("no %s in the report", key)
				}
			}
			// On PostgreSQL the floor was measured in the same rounds: a
			// bare commit's p50, and Usher's figures as ratios of it.
			if o.database != "" {
				for _, key := range []string{"floor_commit_p50_ms", "floor_commit_mean_ms", "floor_ms", "added_p50_ratio_to_floor", "record_ratio_to_commit",
					"c_cpu_per_call_with_postgres_ratio_to_proxy"} {
					if method == "tools/call" || key != "record_ratio_to_commit" {
						checkPositive(t, out.Bytes(), key)
					}
				}
			} else if bytes.Contains(out.Bytes(), []byte("\nfloor_ms ")) {
				t.Error("on SQLite, the report gives a floor of a PostgreSQL commit")
			}
			// Without PostgreSQL its CPU is not measured, and the report
			// says so in one word.
			if o.database == "" && !regexp.MustCompile(`(?m)^c_cpu_ms_per_call_postgres not_measured$`).Match(out.Bytes()) {
				t.Error("on SQLite, the report does not say that PostgreSQL's CPU was not measured")
			}
			// Usher's runtime counted the calls' allocations: every call
			// allocates, so none counted means the statistics were not read.
			if m := regexp.MustCompile(`(?m)^seq_allocs_per_call_usher (\d+)$`).FindSubmatch(out.Bytes()); m == nil || string(m[1]) == "0" {
				t.Errorf("seq_allocs_per_call_usher = %q, want a positive count", m)
			}
			// Usher's /metrics timed the stages of each tool call, in
			// both phases, and they leave time of the endpoint's requests
			// outside them; the sequential phase's 99th percentiles are
			// read from the histograms' buckets.
			for _, phase := range []string{"seq", "c"} {
				if method != "tools/call" {
					break
				}
				for _, key := range []string{"endpoint", "stage_decide", "stage_record", "stage_upstream", "stage_rest"} {
					key = phase + "_" + key + "_mean_ms_usher"
					checkPositive(t, out.Bytes(), key)
					if phase == "seq" && key != "seq_stage_rest_mean_ms_usher" {
						checkPositive(t, out.Bytes(), strings.Replace(key, "_mean_", "_p99_", 1))
					}
				}
			}
			if o.against != "" {
				for _, key := range []string{"against_added_p50_ms", "against_seq_cpu_ms_per_call_usher", "against_c_usher_calls_per_s",
					"against_c_cpu_ms_per_call_usher", "against_seq_stage_record_mean_ms_usher", "against_c_stage_record_mean_ms_usher"} {
					checkPositive(t, out.Bytes(), key)
				}
				for _, key := range []string{"usher_less_against_p50_ms", "usher_less_against_ci95_low_ms", "usher_faster_share", "against_seq_allocs_per_call_usher", "against_c_cpu_ratio_phases_median"} {
					if !regexp.MustCompile(`(?m)^` + key + ` \S+$`).Match(out.Bytes()) {
						t.Errorf("no %s in the report", key)
					}
				}
				if o.againstVariant != "" && !bytes.Contains(out.Bytes(), []byte(", configured as traced, in the same rounds")) {
					t.Error("the report does not say that -against's Usher was configured as the traced variant")
				}
				// Each Usher has its own log: -against's calls are its own.
				m := regexp.MustCompile(`(?m)^against_audit_records (\d+)$`).FindSubmatch(out.Bytes())
				calls := regexp.MustCompile(`(?m)^against_usher_calls (\d+)$`).FindSubmatch(out.Bytes())
				if m == nil || calls == nil || string(calls[1]) == "0" {
					t.Errorf("against_audit_records = %q for against_usher_calls = %q, want records of calls", m, calls)
				}
			}
			for _, v := range o.variants {
				for _, key := range []string{"added_p50_ms", "seq_cpu_ms_per_call_usher", "c_usher_calls_per_s", "c_cpu_ms_per_call_usher"} {
					checkPositive(t, out.Bytes(), v.key+"_"+key)
				}
				for _, key := range []string{"less_usher_p50_ms", "less_usher_ci95_low_ms", "less_usher_ci95_high_ms", "faster_share", "seq_cpu_ratio", "c_cpu_ratio_phases_median"} {
					if !regexp.MustCompile(`(?m)^` + v.key + "_" + key + ` \S+$`).Match(out.Bytes()) {
						t.Errorf("no %s_%s in the report", v.key, key)
					}
				}
			}
			// What each variant's receiver got: every record through the
			// sink, a span of every call through the traced Usher.
			if o.variants != nil {
				sink := regexp.MustCompile(`sink: the receiver got all (\d+) records`).FindSubmatch(out.Bytes())
				records := regexp.MustCompile(`(?m)^sink_audit_records (\d+)$`).FindSubmatch(out.Bytes())
				if sink == nil || records == nil || string(sink[1]) != string(records[1]) {
					t.Errorf("the sink's receiver got %q records, want sink_audit_records %q", sink, records)
				}
				if !regexp.MustCompile(`stateful: each of its 2 clients held a session of its own`).Match(out.Bytes()) {
					t.Error("the stateful variant's clients were not each given a session")
				}
				spans := regexp.MustCompile(`(\d+) "SERVER tools/call up__echo" spans for (\d+) calls`).FindSubmatch(out.Bytes())
				if spans == nil || string(spans[1]) != string(spans[2]) {
					t.Errorf("the traced Usher's spans: %q, want one per call", spans)
				}
				// Each reading of the traced Ushers' CPU time (two each
				// around the sequential phase and each c=8 phase) waited
				// for every call's span, and got it.
				settled := regexp.MustCompile(`each of the (\d+) readings of a traced Usher's CPU time waited until the receiver had every call's span`).FindSubmatch(out.Bytes())
				if settled == nil || string(settled[1]) == "0" || bytes.Contains(out.Bytes(), []byte("had not arrived when a reading gave up")) {
					t.Errorf("the readings of the traced Ushers' CPU time did not wait for every span: %q", settled)
				}
			}
			if m := regexp.MustCompile(`(?m)^pairs (\d+)$`).FindSubmatch(out.Bytes()); m == nil || string(m[1]) != "30" {
				t.Errorf("pairs = %q, want 30", m)
			}
			if m := regexp.MustCompile(`(?m)^gap_ms (\S+)$`).FindSubmatch(out.Bytes()); m == nil || (string(m[1]) == "1.000") != (o.gap > 0) {
				t.Errorf("gap_ms = %q, want %s", m, o.gap)
			}
			if !bytes.Contains(out.Bytes(), []byte("method "+method+"\n")) {
				t.Errorf("the report does not name the method %s", method)
			}
			if o.profile == "" {
				return
			}
			if fi, err := os.Stat(o.profile); err != nil || fi.Size() == 0 {
				t.Errorf("no CPU profile: %v", err)
			}
		})
	}
}

// checkPositive checks that the report has key with a positive value.
func checkPositive(t *testing.T, report []byte, key string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + ` (\S+)$`).FindSubmatch(report)
	if m == nil {
		t.Errorf("no %s in the report", key)
	} else if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v <= 0 {
		t.Errorf("%s = %s, want a positive time", key, m[1])
	}
}

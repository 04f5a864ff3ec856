package main

import (
	"fmt"
	"io"
	"time"
)

// report is everything one run measured.
type report struct {
	engine, method     string
	endpoint           string // stateless or stateful
	protocol, sdk      string
	idempotencyKey     bool
	loadStart, loadEnd float64
	gap                time.Duration // the pause after each sequential call
	dbRTT              time.Duration // added to each round trip to PostgreSQL
	// A `SELECT 1` round trip's median, directly and through the relay.
	dbRTTDirect, dbRTTRelayed time.Duration
	seq                       pairedResult
	// Of the transparent proxy, when the run had it: what it adds (C − B
	// per round) and what Usher adds over it (A − C per round, median).
	proxy             bool
	seqProxy          pairedResult
	usherOverProxy    time.Duration
	floor             floorResult // the bare durable commit, on PostgreSQL
	seqCPU            cpuPerCall
	seqMemory         memoryPerCall
	seqStages         stageMeans
	c8Stages          stageMeans // of the throughput phase through Usher
	concurrency       int
	duration          time.Duration
	c8Usher, c8Direct phase
	c8Proxy           phase
	usherCalls        int64
	auditRecords      int64
	profile           string
	profileOf         string        // whose: "A", or a variant's key
	variants          []*sideResult // with -variants, in its order
	against           *sideResult   // with -against
}

// ratio is a / b, or 0 when b is not positive.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func msf(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func (p phase) rate() float64 { return float64(p.calls) / p.elapsed.Seconds() }

// pgCPU is PostgreSQL's CPU per call, or not_measured (on SQLite, or
// where the backends' times cannot be read): one word, as every value of
// the report's key value lines is.
func pgCPU(c cpuPerCall) string {
	if !c.pgMeasured {
		return "not_measured"
	}
	return msf(c.pg)
}

// print writes the report as tables, then as `key value` lines.
func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "\nMCP %s out of process: usher (%s, endpoint %s) and a go-sdk %s echo upstream (stateful, SSE), protocol %s, idempotency key %v\n",
		r.method, r.engine, r.endpoint, r.sdk, r.protocol, r.idempotencyKey)
	fmt.Fprintf(w, "load average (1 min): %.2f at the start, %.2f at the end\n\n", r.loadStart, r.loadEnd)

	if r.gap > 0 {
		fmt.Fprintf(w, "a pause of %s after each sequential call\n", r.gap)
	}
	if r.dbRTT > 0 {
		fmt.Fprintf(w, "%s added to each round trip between Usher and PostgreSQL (bench/netdelay): SELECT 1 takes %s ms at p50 through it, %s ms directly\n",
			r.dbRTT, msf(r.dbRTTRelayed), msf(r.dbRTTDirect))
	}
	if r.proxy {
		fmt.Fprintf(w, "sequential, %d rounds (A through Usher, B direct, C through the proxy)   p50 ms    p99 ms\n", r.seq.Pairs)
	} else {
		fmt.Fprintf(w, "sequential, %d pairs (A through Usher, B direct)   p50 ms    p99 ms\n", r.seq.Pairs)
	}
	fmt.Fprintf(w, "  added by Usher (per-pair differences)         %8s  %8s\n", "+"+msf(r.seq.AddedP50), "+"+msf(r.seq.AddedP99))
	if r.proxy {
		fmt.Fprintf(w, "  added by the proxy (per-pair differences)     %8s  %8s\n", "+"+msf(r.seqProxy.AddedP50), "+"+msf(r.seqProxy.AddedP99))
	}
	fmt.Fprintf(w, "  through Usher                                 %8s  %8s\n", msf(r.seq.GatewayP50), msf(r.seq.GatewayP99))
	if r.proxy {
		fmt.Fprintf(w, "  through the proxy                             %8s  %8s\n", msf(r.seqProxy.GatewayP50), msf(r.seqProxy.GatewayP99))
	}
	fmt.Fprintf(w, "  direct                                        %8s  %8s\n", msf(r.seq.DirectP50), msf(r.seq.DirectP99))
	if r.proxy {
		fmt.Fprintf(w, "  Usher against the proxy: added p50 %.2fx, p99 %.2fx the proxy's; Usher over the proxy (A − C), p50 +%s ms\n",
			ratio(r.seq.AddedP50, r.seqProxy.AddedP50), ratio(r.seq.AddedP99, r.seqProxy.AddedP99), msf(r.usherOverProxy))
	}
	fmt.Fprintf(w, "  Usher's heap per call (its runtime's statistics): %.0f allocations, %.1f KiB, %.1f GC cycles per 1,000 calls\n",
		r.seqMemory.allocs, r.seqMemory.bytes/1024, 1000*r.seqMemory.gcs)
	if r.seqStages.stages["record"] > 0 { // tools/call: the stages Usher times
		fmt.Fprintf(w, "  Inside Usher, mean per request (its /metrics): %s ms at the endpoint =", msf(r.seqStages.endpoint))
		for _, name := range stageNames {
			fmt.Fprintf(w, " %s %s +", name, msf(r.seqStages.stages[name]))
		}
		fmt.Fprintf(w, " the rest %s (authentication, the MCP session layer, the response)\n", msf(r.seqStages.other()))
		fmt.Fprintf(w, "  ... and at p99 (from its histograms' buckets): %s ms at the endpoint;", msf(r.seqStages.endpointP99))
		for _, name := range stageNames {
			fmt.Fprintf(w, " %s %s", name, msf(r.seqStages.p99[name]))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "c=%d, %s each alone   calls/s    p50 ms    p99 ms | CPU ms/call: usher   proxy  upstream  postgres  client\n", r.concurrency, r.duration)
	type named struct {
		name string
		p    phase
	}
	phases := []named{{"through Usher", r.c8Usher}, {"direct       ", r.c8Direct}}
	if r.proxy {
		phases = append(phases, named{"through proxy", r.c8Proxy})
	}
	for _, x := range phases {
		usher, pg, proxy := msf(x.p.cpu.usher), pgCPU(x.p.cpu), "-"
		if x.name != "through Usher" {
			usher, pg = "-", "-"
		}
		if x.name == "through proxy" {
			proxy = msf(x.p.cpu.proxy)
		}
		fmt.Fprintf(w, "  %s      %8.0f  %8s  %8s |              %6s  %6s  %8s  %8s  %6s\n",
			x.name, x.p.rate(), msf(x.p.p50), msf(x.p.p99), usher, proxy, msf(x.p.cpu.upstream), pg, msf(x.p.cpu.client))
	}
	fmt.Fprintf(w, "  added at c=%d (difference of the two phases' percentiles, not paired): p50 +%s ms, p99 +%s ms\n",
		r.concurrency, msf(r.c8Usher.p50-r.c8Direct.p50), msf(r.c8Usher.p99-r.c8Direct.p99))
	if r.c8Stages.stages["record"] > 0 {
		fmt.Fprintf(w, "  Inside Usher at c=%d, mean per request: %s ms at the endpoint =", r.concurrency, msf(r.c8Stages.endpoint))
		for _, name := range stageNames {
			fmt.Fprintf(w, " %s %s +", name, msf(r.c8Stages.stages[name]))
		}
		fmt.Fprintf(w, " the rest %s\n", msf(r.c8Stages.other()))
	}
	if r.c8Usher.cpu.pgNote != "" {
		fmt.Fprintf(w, "  postgres: %s\n", r.c8Usher.cpu.pgNote)
	}
	if r.proxy {
		fmt.Fprintf(w, "  Usher against the proxy at c=%d: %.2fx its calls/s, %.2fx its CPU per call\n",
			r.concurrency, r.c8Usher.rate()/r.c8Proxy.rate(), ratio(r.c8Usher.cpu.usher, r.c8Proxy.cpu.proxy))
	}
	fmt.Fprintf(w, "  audit: %d records for %d calls through Usher, chain intact\n", r.auditRecords, r.usherCalls)
	r.printFloor(w)
	if r.profile != "" && r.profileOf == "A" {
		fmt.Fprintf(w, "  CPU profile of Usher during its c=%d phase: %s (go tool pprof -top %s)\n", r.concurrency, r.profile, r.profile)
	} else if r.profile != "" {
		fmt.Fprintf(w, "  CPU profile of the %s variant's Usher during a c=%d phase of its own after the measured ones: %s (go tool pprof -top %s)\n", r.profileOf, r.concurrency, r.profile, r.profile)
	}
	fmt.Fprintln(w)
	for _, s := range r.variants {
		s.print(w, r)
	}
	if r.against != nil {
		r.against.printAgainst(w, r)
	}

	kv := func(k string, v any) { fmt.Fprintf(w, "%s %v\n", k, v) }
	kv("method", r.method)
	kv("engine", r.engine)
	kv("endpoint", r.endpoint)
	kv("load1_start", fmt.Sprintf("%.2f", r.loadStart))
	kv("load1_end", fmt.Sprintf("%.2f", r.loadEnd))
	kv("pairs", r.seq.Pairs)
	kv("gap_ms", msf(r.gap))
	kv("db_rtt_ms", msf(r.dbRTT))
	kv("db_round_trip_p50_ms", msf(r.dbRTTRelayed))
	kv("added_p50_ms", msf(r.seq.AddedP50))
	kv("added_p99_ms", msf(r.seq.AddedP99))
	kv("usher_p50_ms", msf(r.seq.GatewayP50))
	kv("usher_p99_ms", msf(r.seq.GatewayP99))
	kv("direct_p50_ms", msf(r.seq.DirectP50))
	kv("direct_p99_ms", msf(r.seq.DirectP99))
	kv("seq_cpu_ms_per_call_usher", msf(r.seqCPU.usher))
	kv("seq_cpu_ms_per_call_postgres", pgCPU(r.seqCPU))
	kv("seq_allocs_per_call_usher", fmt.Sprintf("%.0f", r.seqMemory.allocs))
	kv("seq_alloc_kib_per_call_usher", fmt.Sprintf("%.1f", r.seqMemory.bytes/1024))
	kv("seq_gc_cycles_per_1000_calls_usher", fmt.Sprintf("%.1f", 1000*r.seqMemory.gcs))
	kv("seq_endpoint_mean_ms_usher", msf(r.seqStages.endpoint))
	for _, name := range stageNames {
		kv("seq_stage_"+name+"_mean_ms_usher", msf(r.seqStages.stages[name]))
	}
	kv("seq_stage_rest_mean_ms_usher", msf(r.seqStages.other()))
	kv("seq_endpoint_p99_ms_usher", msf(r.seqStages.endpointP99))
	for _, name := range stageNames {
		kv("seq_stage_"+name+"_p99_ms_usher", msf(r.seqStages.p99[name]))
	}
	kv("concurrency", r.concurrency)
	kv("c_usher_calls_per_s", fmt.Sprintf("%.0f", r.c8Usher.rate()))
	kv("c_direct_calls_per_s", fmt.Sprintf("%.0f", r.c8Direct.rate()))
	kv("c_usher_p50_ms", msf(r.c8Usher.p50))
	kv("c_usher_p99_ms", msf(r.c8Usher.p99))
	kv("c_direct_p50_ms", msf(r.c8Direct.p50))
	kv("c_direct_p99_ms", msf(r.c8Direct.p99))
	kv("c_added_p50_ms", msf(r.c8Usher.p50-r.c8Direct.p50))
	kv("c_added_p99_ms", msf(r.c8Usher.p99-r.c8Direct.p99))
	kv("c_cpu_ms_per_call_usher", msf(r.c8Usher.cpu.usher))
	kv("c_endpoint_mean_ms_usher", msf(r.c8Stages.endpoint))
	for _, name := range stageNames {
		kv("c_stage_"+name+"_mean_ms_usher", msf(r.c8Stages.stages[name]))
	}
	kv("c_stage_rest_mean_ms_usher", msf(r.c8Stages.other()))
	kv("c_cpu_ms_per_call_upstream_via_usher", msf(r.c8Usher.cpu.upstream))
	kv("c_cpu_ms_per_call_upstream_direct", msf(r.c8Direct.cpu.upstream))
	kv("c_cpu_ms_per_call_postgres", pgCPU(r.c8Usher.cpu))
	kv("c_cpu_ms_per_call_client_via_usher", msf(r.c8Usher.cpu.client))
	kv("c_cpu_ms_per_call_client_direct", msf(r.c8Direct.cpu.client))
	if r.proxy {
		kv("proxy_added_p50_ms", msf(r.seqProxy.AddedP50))
		kv("proxy_added_p99_ms", msf(r.seqProxy.AddedP99))
		kv("proxy_p50_ms", msf(r.seqProxy.GatewayP50))
		kv("usher_over_proxy_p50_ms", msf(r.usherOverProxy))
		kv("added_p50_ratio_to_proxy", fmt.Sprintf("%.2f", ratio(r.seq.AddedP50, r.seqProxy.AddedP50)))
		kv("added_p99_ratio_to_proxy", fmt.Sprintf("%.2f", ratio(r.seq.AddedP99, r.seqProxy.AddedP99)))
		kv("c_proxy_calls_per_s", fmt.Sprintf("%.0f", r.c8Proxy.rate()))
		kv("c_proxy_p50_ms", msf(r.c8Proxy.p50))
		kv("c_proxy_p99_ms", msf(r.c8Proxy.p99))
		kv("c_cpu_ms_per_call_proxy", msf(r.c8Proxy.cpu.proxy))
		kv("c_calls_per_s_ratio_to_proxy", fmt.Sprintf("%.2f", r.c8Usher.rate()/r.c8Proxy.rate()))
		kv("c_cpu_per_call_ratio_to_proxy", fmt.Sprintf("%.2f", ratio(r.c8Usher.cpu.usher, r.c8Proxy.cpu.proxy)))
	}
	r.printFloorKV(kv)
	kv("audit_records", r.auditRecords)
	kv("usher_calls", r.usherCalls)
	for _, s := range r.variants {
		s.printKV(kv, r)
	}
	if r.against != nil {
		r.against.printAgainstKV(kv)
	}
}

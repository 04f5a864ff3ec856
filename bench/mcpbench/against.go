package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// againstResult is what a run measured of -against's Usher, beside the
// one of -usher.
type againstResult struct {
	bin string
	seq pairedResult // D − B: what it adds over the direct call
	// usherLess is the median of A − D, round by round: what -usher's
	// Usher takes more than -against's (negative: less); usherFaster is
	// the share of the rounds in which -usher's call was the faster.
	usherLess    time.Duration
	usherFaster  float64
	seqCPU       cpuPerCall
	seqMemory    memoryPerCall
	seqStages    stageMeans
	c8           phase
	c8Stages     stageMeans
	usherCalls   int64
	auditRecords int64
}

// usherSample is what is read of one Usher around a phase: its processes'
// CPU time, its runtime's memory statistics and its stages' histograms.
type usherSample struct {
	cpu    cpuSample
	memory memorySample
	stages stageSample
}

// sample reads u's figures, with procs for the CPU time.
func (u *usherRun) sample(ctx context.Context, procs processes) (usherSample, error) {
	var s usherSample
	var err error
	if s.cpu, err = procs.sample(ctx); err != nil {
		return s, err
	}
	if s.memory, err = sampleMemory(ctx, u.debugAddr); err != nil {
		return s, err
	}
	s.stages, err = sampleStages(ctx, u.url)
	return s, err
}

// since is what was measured from before to s, over calls calls.
func (s usherSample) since(before usherSample, calls int) (cpuPerCall, memoryPerCall, stageMeans) {
	return s.cpu.since(before.cpu, calls), s.memory.since(before.memory, calls), s.stages.since(before.stages)
}

// alternation is the order of the c=8 phases with -against: A for
// -usher's Usher, B for -against's, each a quarter of -duration. Each
// half of it (A B B A, then B A A B) cancels a steady drift of the
// machine; the two halves together give each binary the first phase as
// often as the last.
const alternation = "ABBABAAB"

// alternationPart is how long each phase of alternation runs when the
// phases of each side together run d.
func alternationPart(d time.Duration) time.Duration {
	return max(d/time.Duration(len(alternation)/2), time.Millisecond)
}

// alternate runs the c=8 phases of -usher's path a and of -against's Usher
// b in the order of alternation, together d each, and returns each one's
// phases joined, with b's stages over its phases.
func alternate(ctx context.Context, a *path, b *usherRun, d time.Duration, keys *keySource, procs processes) (pa, pb phase, bStages stageMeans, err error) {
	part := alternationPart(d)
	before, err := sampleStages(ctx, b.url)
	if err != nil {
		return
	}
	for _, which := range alternation {
		via, on, joined := a, procs, &pa
		if which == 'B' {
			via, on, joined = b.via, b.procs, &pb
		}
		p, err := throughput(ctx, via, part, keys, on)
		if err != nil {
			return pa, pb, bStages, err
		}
		*joined = joined.join(p)
	}
	after, err := sampleStages(ctx, b.url)
	if err != nil {
		return
	}
	return pa, pb, after.since(before), nil
}

// join is p and q as one phase: their calls, time and latencies together,
// and the CPU per call over both. The zero phase joined with q is q.
func (p phase) join(q phase) phase {
	if p.calls == 0 && p.elapsed == 0 {
		return q
	}
	lat := append(append([]time.Duration(nil), p.lat...), q.lat...)
	return phase{
		calls: p.calls + q.calls, elapsed: p.elapsed + q.elapsed, lat: lat,
		p50: median(lat), p99: percentile(lat, 0.99),
		cpu: p.cpu.join(p.calls, q.cpu, q.calls),
	}
}

// join is the CPU per call over n calls at c and m at d.
func (c cpuPerCall) join(n int, d cpuPerCall, m int) cpuPerCall {
	total := time.Duration(max(n+m, 1))
	mean := func(x, y time.Duration) time.Duration {
		return (x*time.Duration(n) + y*time.Duration(m)) / total
	}
	out := cpuPerCall{
		usher: mean(c.usher, d.usher), upstream: mean(c.upstream, d.upstream),
		client: mean(c.client, d.client), proxy: mean(c.proxy, d.proxy),
		pgMeasured: c.pgMeasured && d.pgMeasured, pgNote: c.pgNote,
	}
	if out.pgNote == "" {
		out.pgNote = d.pgNote
	}
	if out.pgMeasured {
		out.pg = mean(c.pg, d.pg)
	}
	return out
}

// print writes what the run measured of -against's Usher: as a table
// beside -usher's, then as `key value` lines prefixed "against_".
func (a *againstResult) print(w io.Writer, r report) {
	fmt.Fprintf(w, "against %s (D, in the same rounds; at c=%d, "+alternation+")   -usher    -against   -usher less -against (A − D)\n", a.bin, r.concurrency)
	row := func(name, x, y, d string) { fmt.Fprintf(w, "  %-42s %9s  %9s  %9s\n", name, x, y, d) }
	row("added p50, sequential (ms)", msf(r.seq.AddedP50), msf(a.seq.AddedP50), msf(a.usherLess))
	row("added p99, sequential (ms)", msf(r.seq.AddedP99), msf(a.seq.AddedP99), "")
	row("CPU per call, sequential (ms)", msf(r.seqCPU.usher), msf(a.seqCPU.usher), msf(r.seqCPU.usher-a.seqCPU.usher))
	row("heap allocations per call", fmt.Sprintf("%.0f", r.seqMemory.allocs), fmt.Sprintf("%.0f", a.seqMemory.allocs), fmt.Sprintf("%+.0f", r.seqMemory.allocs-a.seqMemory.allocs))
	row("inside, mean per request (ms)", msf(r.seqStages.endpoint), msf(a.seqStages.endpoint), msf(r.seqStages.endpoint-a.seqStages.endpoint))
	for _, name := range stageNames {
		row("— "+name, msf(r.seqStages.stages[name]), msf(a.seqStages.stages[name]), msf(r.seqStages.stages[name]-a.seqStages.stages[name]))
	}
	row("— the rest", msf(r.seqStages.other()), msf(a.seqStages.other()), msf(r.seqStages.other()-a.seqStages.other()))
	row(fmt.Sprintf("calls/s at c=%d", r.concurrency), fmt.Sprintf("%.0f", r.c8Usher.rate()), fmt.Sprintf("%.0f", a.c8.rate()), fmt.Sprintf("%+.0f", r.c8Usher.rate()-a.c8.rate()))
	row(fmt.Sprintf("CPU per call at c=%d (ms)", r.concurrency), msf(r.c8Usher.cpu.usher), msf(a.c8.cpu.usher), msf(r.c8Usher.cpu.usher-a.c8.cpu.usher))
	row(fmt.Sprintf("PostgreSQL's CPU per call at c=%d (ms)", r.concurrency), pgCPU(r.c8Usher.cpu), pgCPU(a.c8.cpu), "")
	fmt.Fprintf(w, "  -usher's call was the faster in %.1f %% of the rounds; audit: %d records for %d calls through -against's Usher, chain intact\n\n",
		100*a.usherFaster, a.auditRecords, a.usherCalls)
}

// printKV writes the "against_" key value lines.
func (a *againstResult) printKV(kv func(string, any)) {
	kv("against_added_p50_ms", msf(a.seq.AddedP50))
	kv("against_added_p99_ms", msf(a.seq.AddedP99))
	kv("usher_less_against_p50_ms", msf(a.usherLess))
	kv("usher_faster_share", fmt.Sprintf("%.3f", a.usherFaster))
	kv("against_seq_cpu_ms_per_call_usher", msf(a.seqCPU.usher))
	kv("against_seq_cpu_ms_per_call_postgres", pgCPU(a.seqCPU))
	kv("against_seq_allocs_per_call_usher", fmt.Sprintf("%.0f", a.seqMemory.allocs))
	kv("against_seq_alloc_kib_per_call_usher", fmt.Sprintf("%.1f", a.seqMemory.bytes/1024))
	kv("against_seq_endpoint_mean_ms_usher", msf(a.seqStages.endpoint))
	for _, name := range stageNames {
		kv("against_seq_stage_"+name+"_mean_ms_usher", msf(a.seqStages.stages[name]))
	}
	kv("against_seq_stage_rest_mean_ms_usher", msf(a.seqStages.other()))
	kv("against_c_usher_calls_per_s", fmt.Sprintf("%.0f", a.c8.rate()))
	kv("against_c_usher_p50_ms", msf(a.c8.p50))
	kv("against_c_usher_p99_ms", msf(a.c8.p99))
	kv("against_c_cpu_ms_per_call_usher", msf(a.c8.cpu.usher))
	kv("against_c_cpu_ms_per_call_postgres", pgCPU(a.c8.cpu))
	kv("against_c_endpoint_mean_ms_usher", msf(a.c8Stages.endpoint))
	for _, name := range stageNames {
		kv("against_c_stage_"+name+"_mean_ms_usher", msf(a.c8Stages.stages[name]))
	}
	kv("against_audit_records", a.auditRecords)
	kv("against_usher_calls", a.usherCalls)
}

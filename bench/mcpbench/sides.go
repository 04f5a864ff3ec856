package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// sideResult is what a run measured of one more Usher beside -usher's
// (A): a variant of its configuration (-variants) or another binary
// (-against), its calls in the same sequential rounds and its c=8 phases
// alternating with A's.
type sideResult struct {
	key   string // its report keys' prefix: the variant's key, or "against"
	title string // what it is, for the table
	bin   string
	seq   pairedResult // X − B: what it adds over the direct call
	// xLessA is the median of X − A, round by round, with its 95 %
	// confidence interval: what this Usher takes more than A (negative:
	// less); xFaster is the share of the rounds in which its call was the
	// faster.
	xLessA       time.Duration
	ciLo, ciHi   time.Duration
	xFaster      float64
	seqCPU       cpuPerCall
	seqMemory    memoryPerCall
	seqStages    stageMeans
	c8           phase
	c8Stages     stageMeans
	c8CPURatios  []float64 // its CPU per call over A's, phase by phase of the alternation
	usherCalls   int64
	auditRecords int64
	note         string // what the variant's receiver got, for the table
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

// alternation is the order of the c=8 phases of n Ushers, each phase
// naming one by its index: every rotation of 0..n-1 followed by its
// reverse. Each Usher runs 2n phases, in every position of a block as
// often as in every other, and each block with its reverse cancels a
// steady drift of the machine; for two it is A B B A B A A B.
func alternation(n int) []int {
	var order []int
	for r := range n {
		rot := make([]int, n)
		for i := range n {
			rot[i] = (r + i) % n
		}
		order = append(order, rot...)
		slices.Reverse(rot)
		order = append(order, rot...)
	}
	return order
}

// roundOrder is the order of the Ushers' calls in sequential round
// round: the blocks of orders (an alternation of n) in turn. Each Usher
// is first in as many rounds as any other, and follows each other one
// (not first) as often as that one follows it.
func roundOrder(orders []int, n, round int) []int {
	b := round % (len(orders) / n)
	return orders[b*n : (b+1)*n]
}

// alternationPart is how long each phase of the alternation of n Ushers
// runs when each one's phases together run d.
func alternationPart(d time.Duration, n int) time.Duration {
	return max(d/time.Duration(2*n), time.Millisecond)
}

// alternate runs the c=8 phases of the Ushers in the order of their
// alternation, together d each, and returns each one's phases joined,
// and each one's phases in the order they ran.
func alternate(ctx context.Context, ushers []*usherRun, d time.Duration, keys *keySource) (joined []phase, parts [][]phase, err error) {
	part := alternationPart(d, len(ushers))
	joined, parts = make([]phase, len(ushers)), make([][]phase, len(ushers))
	for _, i := range alternation(len(ushers)) {
		u := ushers[i]
		p, err := throughput(ctx, u.via, part, keys, u.procs)
		if err != nil {
			return nil, nil, err
		}
		joined[i] = joined[i].join(p)
		parts[i] = append(parts[i], p)
	}
	return joined, parts, nil
}

// cpuRatios is the CPU per call of x's phases over a's, phase by phase.
func cpuRatios(x, a []phase) []float64 {
	var out []float64
	for i := range min(len(x), len(a)) {
		if a[i].cpu.usher > 0 {
			out = append(out, ratio(x[i].cpu.usher, a[i].cpu.usher))
		}
	}
	return out
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

// spread is the median, least and greatest of vs.
func spread(vs []float64) (med, lo, hi float64) {
	if len(vs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// signed writes d in ms with its sign.
func signed(d time.Duration) string {
	return fmt.Sprintf("%+.3f", float64(d)/float64(time.Millisecond))
}

// print writes what the run measured of a variant of -usher's Usher, set
// against A: each figure, the variant's, the difference and the ratio.
func (s *sideResult) print(w io.Writer, r report) {
	fmt.Fprintf(w, "%s (%s; in the same rounds, at c=%d its phases alternating with A's)\n", s.key, s.title, r.concurrency)
	fmt.Fprintf(w, "  %-40s %9s  %9s  %9s  %7s\n", "", "A", s.key, "X − A", "X / A")
	row := func(name string, a, x time.Duration) {
		fmt.Fprintf(w, "  %-40s %9s  %9s  %9s  %6.2fx\n", name, msf(a), msf(x), signed(x-a), ratio(x, a))
	}
	row("added p50, sequential (ms)", r.seq.AddedP50, s.seq.AddedP50)
	row("added p99, sequential (ms)", r.seq.AddedP99, s.seq.AddedP99)
	row("CPU per call, sequential (ms)", r.seqCPU.usher, s.seqCPU.usher)
	row(fmt.Sprintf("CPU per call at c=%d (ms)", r.concurrency), r.c8Usher.cpu.usher, s.c8.cpu.usher)
	row("inside, mean per request (ms)", r.seqStages.endpoint, s.seqStages.endpoint)
	if r.seqStages.stages["record"] > 0 { // tools/call: the stages Usher times
		for _, name := range stageNames {
			row("— "+name, r.seqStages.stages[name], s.seqStages.stages[name])
		}
		row("— the rest", r.seqStages.other(), s.seqStages.other())
	}
	fmt.Fprintf(w, "  %-40s %9.0f  %9.0f  %+9.0f  %6.2fx\n", fmt.Sprintf("calls/s at c=%d", r.concurrency), r.c8Usher.rate(), s.c8.rate(),
		s.c8.rate()-r.c8Usher.rate(), s.c8.rate()/r.c8Usher.rate())
	fmt.Fprintf(w, "  %-40s %9.0f  %9.0f  %+9.0f\n", "heap allocations per call", r.seqMemory.allocs, s.seqMemory.allocs, s.seqMemory.allocs-r.seqMemory.allocs)
	fmt.Fprintf(w, "  X − A round by round: median %s ms, 95 %% confidence interval [%s, %s] ms; X was the faster in %.1f %% of the rounds\n",
		signed(s.xLessA), signed(s.ciLo), signed(s.ciHi), 100*s.xFaster)
	med, lo, hi := spread(s.c8CPURatios)
	fmt.Fprintf(w, "  CPU per call at c=%d, X / A phase by phase (%d phases each): median %.2fx, from %.2fx to %.2fx\n", r.concurrency, len(s.c8CPURatios), med, lo, hi)
	if s.note != "" {
		fmt.Fprintf(w, "  %s\n", s.note)
	}
	fmt.Fprintf(w, "  audit: %d records for %d calls through it, chain intact\n\n", s.auditRecords, s.usherCalls)
}

// printAgainst writes what the run measured of -against's Usher: as a
// table beside -usher's.
func (s *sideResult) printAgainst(w io.Writer, r report) {
	usherLess, usherFaster := -s.xLessA, 1-s.xFaster
	as := ""
	if s.title != "" {
		as = ", configured as " + s.title
	}
	fmt.Fprintf(w, "against %s (D%s, in the same rounds; at c=%d, its phases alternating with A's)   -usher    -against   -usher less -against (A − D)\n", s.bin, as, r.concurrency)
	row := func(name, x, y, d string) { fmt.Fprintf(w, "  %-42s %9s  %9s  %9s\n", name, x, y, d) }
	row("added p50, sequential (ms)", msf(r.seq.AddedP50), msf(s.seq.AddedP50), msf(usherLess))
	row("added p99, sequential (ms)", msf(r.seq.AddedP99), msf(s.seq.AddedP99), "")
	row("CPU per call, sequential (ms)", msf(r.seqCPU.usher), msf(s.seqCPU.usher), msf(r.seqCPU.usher-s.seqCPU.usher))
	row("heap allocations per call", fmt.Sprintf("%.0f", r.seqMemory.allocs), fmt.Sprintf("%.0f", s.seqMemory.allocs), fmt.Sprintf("%+.0f", r.seqMemory.allocs-s.seqMemory.allocs))
	row("inside, mean per request (ms)", msf(r.seqStages.endpoint), msf(s.seqStages.endpoint), msf(r.seqStages.endpoint-s.seqStages.endpoint))
	for _, name := range stageNames {
		row("— "+name, msf(r.seqStages.stages[name]), msf(s.seqStages.stages[name]), msf(r.seqStages.stages[name]-s.seqStages.stages[name]))
	}
	row("— the rest", msf(r.seqStages.other()), msf(s.seqStages.other()), msf(r.seqStages.other()-s.seqStages.other()))
	row(fmt.Sprintf("calls/s at c=%d", r.concurrency), fmt.Sprintf("%.0f", r.c8Usher.rate()), fmt.Sprintf("%.0f", s.c8.rate()), fmt.Sprintf("%+.0f", r.c8Usher.rate()-s.c8.rate()))
	row(fmt.Sprintf("CPU per call at c=%d (ms)", r.concurrency), msf(r.c8Usher.cpu.usher), msf(s.c8.cpu.usher), msf(r.c8Usher.cpu.usher-s.c8.cpu.usher))
	row(fmt.Sprintf("PostgreSQL's CPU per call at c=%d (ms)", r.concurrency), pgCPU(r.c8Usher.cpu), pgCPU(s.c8.cpu), "")
	fmt.Fprintf(w, "  A − D round by round: 95 %% confidence interval of the median [%s, %s] ms\n", signed(-s.ciHi), signed(-s.ciLo))
	med, lo, hi := spread(s.c8CPURatios)
	fmt.Fprintf(w, "  CPU per call at c=%d, D / A phase by phase (%d phases each): median %.2fx, from %.2fx to %.2fx\n", r.concurrency, len(s.c8CPURatios), med, lo, hi)
	fmt.Fprintf(w, "  -usher's call was the faster in %.1f %% of the rounds; audit: %d records for %d calls through -against's Usher, chain intact\n\n",
		100*usherFaster, s.auditRecords, s.usherCalls)
}

// printKV writes a variant's `key value` lines, each key prefixed with
// its key and "_".
func (s *sideResult) printKV(kv func(string, any), r report) {
	p := s.key + "_"
	kv(p+"added_p50_ms", msf(s.seq.AddedP50))
	kv(p+"added_p99_ms", msf(s.seq.AddedP99))
	kv(p+"added_p50_ratio", fmt.Sprintf("%.3f", ratio(s.seq.AddedP50, r.seq.AddedP50)))
	kv(p+"less_usher_p50_ms", msf(s.xLessA))
	kv(p+"less_usher_ci95_low_ms", msf(s.ciLo))
	kv(p+"less_usher_ci95_high_ms", msf(s.ciHi))
	kv(p+"faster_share", fmt.Sprintf("%.3f", s.xFaster))
	kv(p+"seq_cpu_ms_per_call_usher", msf(s.seqCPU.usher))
	kv(p+"seq_cpu_ratio", fmt.Sprintf("%.3f", ratio(s.seqCPU.usher, r.seqCPU.usher)))
	kv(p+"seq_allocs_per_call_usher", fmt.Sprintf("%.0f", s.seqMemory.allocs))
	kv(p+"c_usher_calls_per_s", fmt.Sprintf("%.0f", s.c8.rate()))
	kv(p+"c_cpu_ms_per_call_usher", msf(s.c8.cpu.usher))
	kv(p+"c_cpu_ratio", fmt.Sprintf("%.3f", ratio(s.c8.cpu.usher, r.c8Usher.cpu.usher)))
	med, lo, hi := spread(s.c8CPURatios)
	kv(p+"c_cpu_ratio_phases_median", fmt.Sprintf("%.3f", med))
	kv(p+"c_cpu_ratio_phases_min", fmt.Sprintf("%.3f", lo))
	kv(p+"c_cpu_ratio_phases_max", fmt.Sprintf("%.3f", hi))
	kv(p+"c_cpu_ms_per_call_postgres", pgCPU(s.c8.cpu))
	kv(p+"audit_records", s.auditRecords)
	kv(p+"usher_calls", s.usherCalls)
}

// printAgainstKV writes -against's `key value` lines, prefixed "against_".
func (s *sideResult) printAgainstKV(kv func(string, any)) {
	kv("against_added_p50_ms", msf(s.seq.AddedP50))
	kv("against_added_p99_ms", msf(s.seq.AddedP99))
	kv("usher_less_against_p50_ms", msf(-s.xLessA))
	kv("usher_less_against_ci95_low_ms", msf(-s.ciHi))
	kv("usher_less_against_ci95_high_ms", msf(-s.ciLo))
	kv("usher_faster_share", fmt.Sprintf("%.3f", 1-s.xFaster))
	kv("against_seq_cpu_ms_per_call_usher", msf(s.seqCPU.usher))
	kv("against_seq_cpu_ms_per_call_postgres", pgCPU(s.seqCPU))
	kv("against_seq_allocs_per_call_usher", fmt.Sprintf("%.0f", s.seqMemory.allocs))
	kv("against_seq_alloc_kib_per_call_usher", fmt.Sprintf("%.1f", s.seqMemory.bytes/1024))
	kv("against_seq_endpoint_mean_ms_usher", msf(s.seqStages.endpoint))
	for _, name := range stageNames {
		kv("against_seq_stage_"+name+"_mean_ms_usher", msf(s.seqStages.stages[name]))
	}
	kv("against_seq_stage_rest_mean_ms_usher", msf(s.seqStages.other()))
	kv("against_c_usher_calls_per_s", fmt.Sprintf("%.0f", s.c8.rate()))
	kv("against_c_usher_p50_ms", msf(s.c8.p50))
	kv("against_c_usher_p99_ms", msf(s.c8.p99))
	kv("against_c_cpu_ms_per_call_usher", msf(s.c8.cpu.usher))
	kv("against_c_cpu_ms_per_call_postgres", pgCPU(s.c8.cpu))
	kv("against_c_endpoint_mean_ms_usher", msf(s.c8Stages.endpoint))
	for _, name := range stageNames {
		kv("against_c_stage_"+name+"_mean_ms_usher", msf(s.c8Stages.stages[name]))
	}
	med, lo, hi := spread(s.c8CPURatios)
	kv("against_c_cpu_ratio_phases_median", fmt.Sprintf("%.3f", med))
	kv("against_c_cpu_ratio_phases_min", fmt.Sprintf("%.3f", lo))
	kv("against_c_cpu_ratio_phases_max", fmt.Sprintf("%.3f", hi))
	kv("against_audit_records", s.auditRecords)
	kv("against_usher_calls", s.usherCalls)
}

package main

import (
	"testing"
	"time"
)

func ms(v ...float64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x * float64(time.Millisecond))
	}
	return d
}

func TestPairedDiffs(t *testing.T) {
	got := pairedDiffs(ms(3, 2, 5), ms(1, 2.5, 1))
	want := ms(2, -0.5, 4)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("diffs = %v, want %v", got, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("unequal sides did not panic")
		}
	}()
	pairedDiffs(ms(1, 2), ms(1))
}

func TestPercentileNearestRank(t *testing.T) {
	// 1..100 ms in reverse: the input is not sorted and must stay as it is.
	var v []float64
	for i := 100; i >= 1; i-- {
		v = append(v, float64(i))
	}
	ds := ms(v...)
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0.01, 1}, {0.001, 1}, {0.995, 100}} {
		if got := percentile(ds, tc.q); got != ms(tc.want)[0] {
			t.Errorf("p%g = %v, want %vms", tc.q*100, got, tc.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentile sorted its input")
	}
	if percentile(nil, 0.5) != 0 || percentile(ms(7), 0.99) != 7*time.Millisecond {
		t.Error("empty or single value")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(4), 4 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond},
		{ms(-1, 3), time.Millisecond},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestSummarisePairsCancelsSharedNoise checks that what the gateway adds
// is read from the per-pair differences: a slow stretch that hits both
// calls of a pair leaves the added figure alone, while the difference of
// the two sides' p99s would be off.
func TestSummarisePairsCancelsSharedNoise(t *testing.T) {
	var gw, direct []time.Duration
	for i := range 200 {
		noise := time.Duration(0)
		if i%50 == 0 { // 2 % of the pairs fall in a slow moment
			noise = 20 * time.Millisecond
		}
		extra := time.Millisecond
		if i%50 == 1 { // 2 % of the pairs where the gateway itself is slow
			extra = 3 * time.Millisecond
		}
		direct = append(direct, 500*time.Microsecond+noise)
		gw = append(gw, 500*time.Microsecond+extra+noise)
	}
	r := summarisePairs(gw, direct)
	if r.Pairs != 200 || r.AddedP50 != time.Millisecond || r.AddedP99 != 3*time.Millisecond {
		t.Errorf("added p50 %v p99 %v over %d pairs, want 1ms, 3ms, 200", r.AddedP50, r.AddedP99, r.Pairs)
	}
	if r.DirectP50 != 500*time.Microsecond || r.GatewayP50 != 1500*time.Microsecond {
		t.Errorf("sides' p50 = %v, %v", r.GatewayP50, r.DirectP50)
	}
	if r.GatewayP99 != 21500*time.Microsecond || r.DirectP99 != 20500*time.Microsecond {
		t.Errorf("sides' p99 = %v, %v", r.GatewayP99, r.DirectP99)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as the kernel allows.
	stat := "4242 (post gres) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 31 0 0 20 0 1 0 100 0 0\n"
	got, err := parseStatCPU(stat)
	if err != nil || got != 2810*time.Millisecond {
		t.Errorf("parseStatCPU = %v, %v; want 2.81s (281 ticks)", got, err)
	}
	if _, err := parseStatCPU("4242 (short) S 1 2"); err == nil {
		t.Error("a short line parsed")
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Error("no such process, no error")
	}
}

// TestQuantile checks the percentile read from a histogram's buckets
// over a phase: linear within the bucket it falls in, as Prometheus's
// histogram_quantile, the counts before the phase taken off.
func TestQuantile(t *testing.T) {
	before := &timeSum{count: 10, buckets: []bucket{{0.001, 10}, {0.002, 10}, {0.004, 10}}}
	// Over the phase: 50 at most 1 ms, 40 in (1, 2] ms, 10 in (2, 4] ms.
	after := &timeSum{count: 110, buckets: []bucket{{0.001, 60}, {0.002, 100}, {0.004, 110}}}
	for q, want := range map[float64]time.Duration{
		0.5:  time.Millisecond,        // the 50th of 100 ends the first bucket
		0.7:  1500 * time.Microsecond, // half-way through the second
		0.99: 3800 * time.Microsecond, // 9 of the last 10
		1:    4 * time.Millisecond,
	} {
		if got := quantile(after, before, q); got != want {
			t.Errorf("quantile %.2f = %v, want %v", q, got, want)
		}
	}
	if got := quantile(after, after, 0.99); got != 0 {
		t.Errorf("quantile of no observations = %v, want 0", got)
	}
}

// TestShareLower checks the share of pairs whose first side is lower,
// ties counting half.
func TestShareLower(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b []time.Duration
		want float64
	}{
		{"none", nil, nil, 0},
		{"all lower", ms(1, 2), ms(2, 3), 1},
		{"none lower", ms(3, 4), ms(1, 2), 0},
		{"a tie and a lower of four", ms(1, 2, 5, 5), ms(1, 3, 4, 4), 0.375},
	} {
		if got := shareLower(c.a, c.b); got != c.want {
			t.Errorf("%s: shareLower = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPhaseJoin checks that two phases joined count both's calls and
// time, take their percentiles from both's latencies and their CPU per
// call weighted by their calls.
func TestPhaseJoin(t *testing.T) {
	p := phase{calls: 1, elapsed: time.Second, lat: ms(10), cpu: cpuPerCall{usher: 4 * time.Millisecond, pg: time.Millisecond, pgMeasured: true}}
	q := phase{calls: 3, elapsed: time.Second, lat: ms(1, 2, 3), cpu: cpuPerCall{usher: 2 * time.Millisecond, pg: 3 * time.Millisecond, pgMeasured: true}}
	j := p.join(q)
	if j.calls != 4 || j.elapsed != 2*time.Second || j.rate() != 2 {
		t.Errorf("joined: %d calls in %s, want 4 in 2s", j.calls, j.elapsed)
	}
	if j.p50 != 2500*time.Microsecond || j.p99 != 10*time.Millisecond {
		t.Errorf("joined p50 %s, p99 %s, want 2.5ms and 10ms", j.p50, j.p99)
	}
	if j.cpu.usher != 2500*time.Microsecond || j.cpu.pg != 2500*time.Microsecond || !j.cpu.pgMeasured {
		t.Errorf("joined CPU per call: usher %s, postgres %s (measured %v), want 2.5ms each", j.cpu.usher, j.cpu.pg, j.cpu.pgMeasured)
	}
	if z := (phase{}).join(q); z.calls != q.calls || z.cpu != q.cpu || z.p50 != q.p50 {
		t.Errorf("the zero phase joined with q is %+v, want q", z)
	}
	q.cpu.pgMeasured, q.cpu.pgNote = false, "not here"
	if j := p.join(q); j.cpu.pgMeasured || j.cpu.pgNote != "not here" {
		t.Errorf("joined with an unmeasured phase: PostgreSQL measured %v, note %q", j.cpu.pgMeasured, j.cpu.pgNote)
	}
}

func TestMedianCI(t *testing.T) {
	// 1..100 ms, shuffled by reversal: n/2 ± 1.96·√100/2 = 50 ± 9.8, so
	// ranks 40 and 61.
	var v []float64
	for i := 100; i >= 1; i-- {
		v = append(v, float64(i))
	}
	lo, hi := medianCI(ms(v...))
	if want := ms(40, 61); lo != want[0] || hi != want[1] {
		t.Errorf("medianCI(1..100 ms) = [%v, %v], want [%v, %v]", lo, hi, want[0], want[1])
	}
	// More rounds, a narrower interval around the same median.
	v = v[:0]
	for i := 1; i <= 10000; i++ {
		v = append(v, float64(i)/100)
	}
	lo, hi = medianCI(ms(v...))
	if want := ms(49.02, 50.99); lo != want[0] || hi != want[1] {
		t.Errorf("medianCI(0.01..100 ms by 0.01) = [%v, %v], want [%v, %v]", lo, hi, want[0], want[1])
	}
	// Too few values for an interval narrower than their range.
	if lo, hi := medianCI(ms(3, 1, 2)); lo != ms(1)[0] || hi != ms(3)[0] {
		t.Errorf("medianCI(3 values) = [%v, %v], want their range", lo, hi)
	}
	if lo, hi := medianCI(nil); lo != 0 || hi != 0 {
		t.Errorf("medianCI(nil) = [%v, %v], want zeros", lo, hi)
	}
}

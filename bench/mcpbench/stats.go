package main

import (
	"math"
	"slices"
	"time"
)

// pairedDiffs returns, for each pair i, a[i] − b[i]: the time the call
// through the gateway took more than the direct call made right after it.
// A pair is only complete with both sides: a and b must be of one length.
func pairedDiffs(a, b []time.Duration) []time.Duration {
	if len(a) != len(b) {
		panic("pairedDiffs: unequal sides")
	}
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// percentile returns the q-quantile (0 < q ≤ 1) of ds by the nearest-rank
// method: the smallest value that at least q of the values do not exceed.
// It leaves ds as it is, and returns 0 for no values.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// median returns the middle value of ds, the mean of the two middle ones
// for an even count (so that the median of differences is symmetric), and
// 0 for no values.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

// pairedResult is what a sequential paired run measured.
type pairedResult struct {
	Pairs                  int
	AddedP50, AddedP99     time.Duration // of the per-pair differences
	GatewayP50, GatewayP99 time.Duration // of the calls through the gateway
	DirectP50, DirectP99   time.Duration // of the direct calls
}

// summarisePairs reduces the two sides of a paired run: what the gateway
// adds is read from the distribution of per-pair differences (its median
// and its 99th percentile), not from the difference of each side's
// percentiles, so that a slow moment of the machine, which falls on both
// calls of a pair, cancels out.
func summarisePairs(gateway, direct []time.Duration) pairedResult {
	d := pairedDiffs(gateway, direct)
	return pairedResult{
		Pairs:    len(d),
		AddedP50: median(d), AddedP99: percentile(d, 0.99),
		GatewayP50: median(gateway), GatewayP99: percentile(gateway, 0.99),
		DirectP50: median(direct), DirectP99: percentile(direct, 0.99),
	}
}

// shareLower returns the share of the pairs in which a's side was lower
// than b's (a tie counts half), 0 for none.
func shareLower(a, b []time.Duration) float64 {
	d := pairedDiffs(a, b)
	if len(d) == 0 {
		return 0
	}
	var n float64
	for _, x := range d {
		switch {
		case x < 0:
			n++
		case x == 0:
			n += 0.5
		}
	}
	return n / float64(len(d))
}

// medianCI returns a 95 % confidence interval of the median of the
// distribution ds are drawn from, free of any assumption about its shape:
// the order statistics whose ranks lie 1.96 standard deviations of a
// Binomial(n, ½) either side of n/2. A difference of two sides whose
// interval holds 0 is not measurable with this many rounds. For fewer
// than 6 values the interval is the whole range.
func medianCI(ds []time.Duration) (lo, hi time.Duration) {
	n := len(ds)
	if n == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	half := 1.96 * math.Sqrt(float64(n)) / 2
	// Ranks (1-based) j and k: P(X_(j) ≤ median ≤ X_(k)) ≥ 0.95.
	j := int(math.Floor(float64(n)/2 - half))
	k := int(math.Ceil(float64(n)/2+half)) + 1
	return s[min(max(j, 1), n)-1], s[min(max(k, 1), n)-1]
}

package gcpace

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Pace is a collector target with a floor under the heap goal.
type Pace struct {
	// Percent is the target, as GOGC: the heap may grow by Percent percent
	// of what is live before the next collection; zero or less is Go's
	// default, 100.
	Percent int
	// Floor is the heap size, in bytes, below which no collection starts
	// on account of the target.
	Floor uint64
}

// runtimeHeapMinimum is the Go runtime's least heap goal at GOGC=100; it
// scales the minimum with GOGC.
const runtimeHeapMinimum = 4 << 20

// percentFor returns the least GOGC value, not under p.Percent, that gives
// a heap goal of at least p.Floor after a collection that found live bytes
// live and scan bytes of stacks and globals; and never one at which the
// runtime's own minimum goal would be above the floor.
func (p Pace) percentFor(live, scan uint64) int {
	ceiling := int(min(p.Floor/(runtimeHeapMinimum/100), math.MaxInt32))
	if ceiling <= p.Percent {
		return p.Percent
	}
	if live >= p.Floor {
		return p.Percent
	}
	// The runtime's goal: live + (live + scan) × percent / 100.
	grows := live + scan
	if grows == 0 {
		return ceiling
	}
	need := (p.Floor - live) * 100
	percent := need / grows
	if need%grows != 0 {
		percent++
	}
	return int(min(max(percent, uint64(p.Percent)), uint64(ceiling)))
}

// The process has one collector, so one pace holds at a time: Hold counts
// its holders, the first sets it and the last release restores GOGC.
var (
	mu      sync.Mutex
	holders int
	held    Pace   // the first holder's
	before  int    // GOGC before the first holder
	chain   uint64 // the live chain of cleanups; a stale one ends itself
)

// Hold sets the collector's pace to p until release is called, adjusting
// GOGC after every collection. While another holder holds a pace, Hold
// keeps that one and only counts this holder. release is idempotent.
func Hold(p Pace) (release func()) {
	mu.Lock()
	defer mu.Unlock()
	holders++
	if holders == 1 {
		if p.Percent <= 0 {
			p.Percent = 100
		}
		held = p
		chain++
		before = debug.SetGCPercent(p.Percent)
		adjustLocked()
		arm(chain)
	}
	var once sync.Once
	return func() { once.Do(releaseOne) }
}

func releaseOne() {
	mu.Lock()
	defer mu.Unlock()
	holders--
	if holders == 0 {
		chain++
		debug.SetGCPercent(before)
	}
}

// sentinel is an object that nothing refers to, whose cleanup runs once
// the collection after its allocation has found it unreachable. It holds a
// pointer so that the allocator does not batch it with others.
type sentinel struct{ _ *byte }

// arm has adjust run after the next collection, and arms again from
// there, for as long as the chain is live.
func arm(c uint64) {
	runtime.AddCleanup(new(sentinel), func(c uint64) {
		mu.Lock()
		defer mu.Unlock()
		if c != chain {
			return
		}
		adjustLocked()
		arm(c)
	}, c)
}

var samples = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/gc/scan/stack:bytes"},
	{Name: "/gc/scan/globals:bytes"},
}

// adjustLocked sets GOGC from what the last collection found.
func adjustLocked() {
	metrics.Read(samples)
	var v [3]uint64
	for i, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	debug.SetGCPercent(held.percentFor(v[0], v[1]+v[2]))
}

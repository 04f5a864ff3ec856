package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

const mib = 1 << 20

func TestPercentFor(t *testing.T) {
	p := Pace{Percent: 400, Floor: 64 * mib}
	for _, tc := range []struct {
		name       string
		p          Pace
		live, scan uint64
		want       int
	}{
		// 4 MiB × 1600 / 100 is the floor: the runtime's minimum does it.
		{"nothing live", p, 0, 0, 1600},
		{"little live: the runtime's minimum is the floor", p, 3 * mib, mib / 2, 1600},
		// 6 + 7 × 8.43 ≥ 64: the least such percent.
		{"some live: the goal reaches the floor", p, 6 * mib, mib, 829},
		{"enough live: the target", p, 14 * mib, mib, 400},
		{"more live than the floor: the target", p, 100 * mib, mib, 400},
		{"a floor under the target's own minimum", Pace{Percent: 400, Floor: 8 * mib}, 0, 0, 400},
		{"no floor", Pace{Percent: 100}, 0, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.percentFor(tc.live, tc.scan)
			if got != tc.want {
				t.Fatalf("percentFor(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.scan/mib, got, tc.want)
			}
			// The properties, apart from the table: never under the
			// target, never where the runtime's minimum (4 MiB per 100)
			// passes the floor, the floor reached below that, and no
			// lower value reaching it.
			goal := func(percent int) uint64 {
				return max(tc.live+(tc.live+tc.scan)*uint64(percent)/100, 4*mib*uint64(percent)/100)
			}
			ceiling := max(tc.p.Percent, int(tc.p.Floor/(4*mib/100)))
			if got < tc.p.Percent || got > ceiling {
				t.Errorf("%d is outside [%d, %d]", got, tc.p.Percent, ceiling)
			}
			if got < ceiling && goal(got) < tc.p.Floor {
				t.Errorf("at %d the goal is %d MiB, under the floor", got, goal(got)/mib)
			}
			if got > tc.p.Percent && goal(got-1) >= tc.p.Floor {
				t.Errorf("%d reaches the floor already", got-1)
			}
		})
	}
}

// gcPercent returns the collector's target without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// heapGoal returns the heap size at which the collector aims to have
// finished its next cycle.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of short-lived garbage, 32 KiB at a time.
func churn(n int) {
	for range n / (32 << 10) {
		sink = make([]byte, 32<<10)
	}
	sink = nil
}

// With a small live heap, the target alone aims a collection at 16 MiB
// (the runtime's minimum at GOGC=400); a held pace at its floor; and with
// a live heap large enough, at the target's own goal.
func TestHoldRaisesTheGoalToTheFloor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	runtime.GC()
	alone := heapGoal()
	if alone >= 32*mib {
		t.Fatalf("at GOGC=400 with little live the goal is %d MiB: the test cannot tell a floor", alone/mib)
	}

	release := Hold(Pace{Percent: 400, Floor: 64 * mib})
	defer release()
	churn(128 * mib) // collections on their own, each adjusting
	runtime.GC()
	waitFor(t, func() bool { return heapGoal() >= 64*mib })
	t.Logf("heap goal with little live: %d MiB at GOGC=400, %d MiB with a 64 MiB floor", alone/mib, heapGoal()/mib)
	if got := heapGoal(); got > 72*mib {
		t.Errorf("with a 64 MiB floor the goal is %d MiB, want about 64", got/mib)
	}

	keep := make([]byte, 40*mib)
	runtime.GC()
	waitFor(t, func() bool { return gcPercent() == 400 })
	if got := heapGoal(); got < 200*mib {
		t.Errorf("with 40 MiB live the goal is %d MiB, want the target's five times", got/mib)
	}
	runtime.KeepAlive(keep)
}

// After each collection the target is the one the collection's figures
// give, and the last release puts back the target from before.
func TestHoldAdjustsAndRestores(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	p := Pace{Percent: 400, Floor: 64 * mib}
	release := Hold(p)
	inner := Hold(Pace{Percent: 100, Floor: 8 * mib}) // counted, not applied
	runtime.GC()
	churn(128 * mib) // collections happen, each re-arming the adjustment

	keep := make([]byte, 20*mib) // live: the target's own goal is above the floor
	runtime.GC()
	waitFor(t, func() bool { return gcPercent() == 400 })
	runtime.KeepAlive(keep)

	keep = nil
	runtime.GC()
	waitFor(t, func() bool { return gcPercent() > 400 })

	inner()
	inner() // idempotent
	if got := gcPercent(); got <= 400 {
		t.Errorf("after one of two holders let go, GOGC=%d: the pace should still hold", got)
	}
	release()
	if got := gcPercent(); got != 150 {
		t.Errorf("after the last release GOGC=%d, want 150 back", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gcPercent(); got != 150 {
		t.Errorf("a collection after the release set GOGC=%d, want it left at 150", got)
	}
}

// waitFor waits for cond, which a cleanup run by the runtime makes true,
// collecting again while it is not.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		runtime.GC()
		runtime.Gosched()
	}
	t.Fatalf("GOGC=%d: the adjustment after a collection did not come", gcPercent())
}

// A pace of no target is Go's default, never GOGC=0 (a collection at every
// allocation).
func TestHoldZeroIsTheDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(300))
	release := Hold(Pace{})
	if got := gcPercent(); got != 100 {
		t.Errorf("Hold(Pace{}) set GOGC=%d, want 100", got)
	}
	release()
	if got := gcPercent(); got != 300 {
		t.Errorf("after the release GOGC=%d, want 300 back", got)
	}
}

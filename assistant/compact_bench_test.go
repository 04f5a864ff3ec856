package assistant

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The conversations BenchmarkAssistantRehydration loads from, in events.
const (
	benchHugeLog = 1_000_000
	benchTinyLog = 100
)

// BenchmarkAssistantRehydration measures what a turn of a compacted run
// does to build its model context: read the run's latest context snapshot
// and the latest messages before the user message it answers, and make
// the bounded context (the summary and the messages after its coverage).
// It loads from a conversation of 1,000,000 events and from one of 100,
// each with a snapshot covering all but its last two turns, and reports
// huge/tiny as BenchmarkAssistantHistory does (the median of 21 paired
// rounds). Goal: 1.5 or less. Seeding the million events takes a minute
// or more. Results are in docs/benchmarks.md; `make bench` runs it.
func BenchmarkAssistantRehydration(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchRehydration(b, storetest.NewSQLite(b)) })
	b.Run("postgres", func(b *testing.B) { benchRehydration(b, storetest.NewPostgres(b)) })
}

func benchRehydration(b *testing.B, st store.Store) {
	ctx := context.Background()
	start := time.Now()
	huge := benchSeedRun(b, st, "bench-huge", benchHugeLog)
	tiny := benchSeedRun(b, st, "bench-tiny", benchTinyLog)
	seeded := time.Since(start)
	// want is, per run, the messages its bounded context holds: the
	// summary and those after the snapshot's coverage.
	want := map[string]int{}
	for _, r := range []benchRun{huge, tiny} {
		// Cover up to the answer of the turn before the last two: the
		// events of a turn are eight, its answer the seventh.
		to := (r.last-1)/8*8 - 16 + 7
		first, err := st.ListMessages(ctx, r.id, store.MessageQuery{Limit: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.AppendSnapshot(ctx, store.ContextSnapshot{RunID: r.id, Version: 1, FromSeq: first[0].Seq, ToSeq: to,
			Summary: strings.Repeat("The user asked about the quarterly report; the notes were listed. ", 30), Tokens: 500, Kind: store.SnapshotAutomatic}); err != nil {
			b.Fatal(err)
		}
		after, err := st.ListMessages(ctx, r.id, store.MessageQuery{After: to, Before: r.last, Limit: 100})
		if err != nil {
			b.Fatal(err)
		}
		want[r.id] = 1 + len(after)
	}
	rt := &Runtime{st: st, o: Options{HistoryMessages: DefaultHistoryMessages}}
	load := func(r benchRun) {
		t := &turn{rt: rt, run: store.Run{ID: r.id}, seq: r.last}
		msgs, err := t.history(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) != want[r.id] || t.snap == nil {
			b.Fatalf("run %s: %d model messages, snapshot %v; want the summary and %d", r.id, len(msgs), t.snap != nil, want[r.id]-1)
		}
	}
	var c benchComparison
	for b.Loop() {
		c = benchCompare(func() { load(huge) }, func() { load(tiny) }, 200)
	}
	b.ReportMetric(seeded.Seconds(), "seed-s")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(c.op/1e3, "huge-µs/load")
	b.ReportMetric(c.base/1e3, "tiny-µs/load")
	b.ReportMetric(c.ratio, "huge/tiny")
}

// BenchmarkAssistantCompaction compacts a conversation of about 200,000
// tokens, and one of 400,000, with the scripted model server over
// loopback (through the OpenAI-compatible provider, as in production)
// answering each summary with 2 KB, as a model would, and reports for
// each: the tokens summarised, the model calls and passes, the bound
// ceil(tokens / compactChunkTokens) + passes the calls must stay within,
// the wall time, and the peak of the live heap above where it started
// (sampled every millisecond): memory O(chunk) means the same peak for
// both sizes. Each run is compacted once (version 1): run it
// with -benchtime 1x, as `make bench` does, on SQLite.
func BenchmarkAssistantCompaction(b *testing.B) {
	st := storetest.NewSQLite(b)
	ms := modeltest.NewServer(b)
	ms.Forget()
	ms.Respond(func(rec modeltest.RecordedRequest) (modeltest.Answer, bool) {
		return modeltest.Answer{Text: "Summary: " + strings.Repeat("the user reviewed the notes of the quarterly report. ", 40)}, true
	})
	provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "test-key", Model: "scripted"})
	if err != nil {
		b.Fatal(err)
	}
	rt := &Runtime{st: st, o: Options{Model: provider, ModelName: "scripted"}}
	// A turn of benchTurnEvent is about 200 tokens of messages.
	runs := map[string]benchRun{}
	for _, size := range []int{200_000, 400_000} {
		runs[fmt.Sprint(size)] = benchSeedRun(b, st, fmt.Sprintf("bench-compact-%d", size), size/200*8)
	}
	for _, size := range []int{200_000, 400_000} {
		r := runs[fmt.Sprint(size)]
		b.Run(fmt.Sprintf("tokens=%d", size), func(b *testing.B) {
			var res compactResult
			var wall time.Duration
			var peak uint64
			for b.Loop() {
				runtime.GC()
				stop := samplePeakHeap()
				start := time.Now()
				_, got, err := rt.compact(context.Background(), r.id, nil, r.last, DefaultCompactChunkTokens, store.SnapshotManual)
				wall = time.Since(start)
				peak = stop()
				if err != nil {
					b.Fatal(err)
				}
				res = got
			}
			in := inputTokens(b, st, r.id, r.last)
			bound := (in+DefaultCompactChunkTokens-1)/DefaultCompactChunkTokens + int64(res.Passes)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(in), "tokens")
			b.ReportMetric(float64(res.Calls), "model-calls")
			b.ReportMetric(float64(res.Passes), "passes")
			b.ReportMetric(float64(bound), "call-bound")
			b.ReportMetric(float64(wall.Milliseconds()), "wall-ms")
			b.ReportMetric(float64(peak)/(1<<20), "peak-live-MiB")
			if int64(res.Calls) > bound {
				b.Errorf("%d model calls, over the bound %d", res.Calls, bound)
			}
		})
	}
}

// inputTokens is what the summariser reads of runID's messages up to
// toSeq, in estimated tokens.
func inputTokens(b *testing.B, st store.Store, runID string, toSeq int64) int64 {
	b.Helper()
	var n int64
	var after int64
	for after < toSeq {
		page, err := st.ListMessages(context.Background(), runID, store.MessageQuery{After: after, Before: toSeq + 1, Limit: 500})
		if err != nil {
			b.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			entry, err := renderEntry(e)
			if err != nil {
				b.Fatal(err)
			}
			n += int64((len(entry) + bytesPerToken - 1) / bytesPerToken)
		}
		after = page[len(page)-1].Seq
	}
	return n
}

// samplePeakHeap samples the heap every millisecond until the returned
// function is called, which returns the peak of the live heap (as the
// latest garbage collection marked it) above where it started. Live, not
// allocated: what the garbage collector lets pile up between cycles is
// not what the compaction holds.
func samplePeakHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > base && v-base > peak.Load() {
				peak.Store(v - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

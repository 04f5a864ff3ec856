package assistant

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The two conversations BenchmarkAssistantHistory loads from, in events.
const (
	benchLongLog  = 100_000
	benchShortLog = 100
)

// benchSeedBatch is how many events the seeding appends per transaction.
const benchSeedBatch = 1000

// BenchmarkAssistantHistory measures what a turn does to build its fresh
// model session: load the latest HistoryMessages (24) messages before the
// user message it answers (store.ListMessages with Last) and project them
// into model messages. It loads from a conversation of 100,000 events and
// from one of 100, both in the same table, and reports long/short: the
// median over 21 rounds of the ratio of their times, each round timing a
// batch of loads of one and then of the other, so that load on the machine
// falls on both alike. Goal: 1.5 or less. Results are in docs/benchmarks.md;
// `make bench` runs it (PostgreSQL only with TEST_DATABASE_URL).
func BenchmarkAssistantHistory(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchHistory(b, storetest.NewSQLite(b)) })
	b.Run("postgres", func(b *testing.B) { benchHistory(b, storetest.NewPostgres(b)) })
}

func benchHistory(b *testing.B, st store.Store) {
	loadavg := func() string {
		raw, _ := os.ReadFile("/proc/loadavg")
		return strings.TrimSpace(string(raw))
	}
	b.Logf("load average at the start: %s", loadavg())
	b.Cleanup(func() { b.Logf("load average at the end: %s", loadavg()) })
	ctx := context.Background()
	start := time.Now()
	long := benchSeedRun(b, st, "bench-long", benchLongLog)
	short := benchSeedRun(b, st, "bench-short", benchShortLog)
	seeded := time.Since(start)

	rt := &Runtime{st: st, o: Options{HistoryMessages: DefaultHistoryMessages}}
	load := func(runID string, before int64) {
		t := &turn{rt: rt, run: store.Run{ID: runID}, seq: before}
		msgs, err := t.history(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// 24 messages: the window never starts at a tool result, so the
		// projection drops none.
		if len(msgs) != DefaultHistoryMessages {
			b.Fatalf("run %s: %d model messages, want %d", runID, len(msgs), DefaultHistoryMessages)
		}
	}
	var c benchComparison
	for b.Loop() {
		c = benchCompare(func() { load(long.id, long.last) }, func() { load(short.id, short.last) }, 200)
	}
	// After the loop: b.Loop drops the metrics reported before it.
	b.ReportMetric(seeded.Seconds(), "seed-s")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(c.op/1e3, "long-µs/load")
	b.ReportMetric(c.base/1e3, "short-µs/load")
	b.ReportMetric(c.ratio, "long/short")
}

// benchRun is a seeded conversation: its id and the sequence of its last
// event, a user message, which the loads answer.
type benchRun struct {
	id   string
	last int64
}

// benchSeedRun creates a run of n events through the store's public API:
// the opening user message, then turns as the runtime records them (user
// message, turn start, system prompt and runtime context records, a tool
// call, its result, the answer, turn end: four messages and four agent.*
// events), appended under a lease in transactions of benchSeedBatch
// events, and a last user message, the one a turn would answer.
func benchSeedRun(b *testing.B, st store.Store, owner string, n int) benchRun {
	b.Helper()
	ctx := context.Background()
	id := "run_" + owner
	first := benchTurnEvent(id, 0)
	r, _, err := st.OpenRun(ctx, store.Run{ID: id, Owner: owner}, 1, &first)
	if err != nil {
		b.Fatal(err)
	}
	// A run seeded before is queued again at its release (its last user
	// message is unanswered), so this claim may take it too.
	runs, err := st.ClaimRuns(ctx, "bench-seeder", 10, time.Hour)
	i := slices.IndexFunc(runs, func(c store.Run) bool { return c.ID == r.ID })
	if err != nil || i < 0 {
		b.Fatalf("claiming the run to seed: %v %v", runs, err)
	}
	lease := runs[i].Lease()
	batch := make([]store.NewEvent, 0, benchSeedBatch)
	for i := 1; i < n; i++ {
		e := benchTurnEvent(id, i)
		if i == n-1 {
			e = benchTurnEvent(id, 0) // the message the turn answers
		}
		batch = append(batch, e)
		if len(batch) == benchSeedBatch || i == n-1 {
			if _, err := st.AppendLeased(ctx, lease, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if _, err := st.ReleaseRun(ctx, lease, ""); err != nil {
		b.Fatal(err)
	}
	r, err = st.GetRun(ctx, r.ID)
	if err != nil || r.LastSeq != int64(n) {
		b.Fatalf("seeded run %s: last sequence %d, want %d (%v)", owner, r.LastSeq, n, err)
	}
	return benchRun{id: r.ID, last: r.LastSeq}
}

// benchTurnEvent is the i-th event of a conversation of eight-event
// turns, with payloads of a realistic size.
func benchTurnEvent(runID string, i int) store.NewEvent {
	turn := i / 8
	call := fmt.Sprintf("call_%d", turn)
	switch i % 8 {
	case 0:
		text := fmt.Sprintf("Message %d: could you list my notes and tell me which ones mention the quarterly report? ", turn)
		return store.NewEvent{Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: text}), Preview: text}
	case 1:
		return store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: int64(i)})}
	case 2:
		return store.NewEvent{Type: EventSystemPrompt, Payload: mustJSON(SystemPromptRecord{RunID: runID, Characters: len(DefaultSystemPrompt)})}
	case 3:
		return store.NewEvent{Type: EventRuntimeContext, Payload: mustJSON(RuntimeContextRecord{
			RunID: runID, Messages: 24, Characters: 4800, Tools: 5, Delivery: "held"})}
	case 4:
		return store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(AssistantMessage{
			ToolCalls: []ToolCall{{ID: call, Name: "notes_list", Arguments: []byte(`{}`)}}})}
	case 5:
		return store.NewEvent{Type: EventToolResult, Payload: mustJSON(ToolResult{
			ToolCallID: call, Name: "notes_list", Status: ToolSucceeded,
			Content: strings.Repeat("quarterly-report-draft, groceries, team offsite agenda, ", 8)})}
	case 6:
		text := "You have three notes; the first, quarterly-report-draft, mentions the quarterly report. " +
			"The others are about groceries and the team offsite. Do you want me to read it to you?"
		return store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(AssistantMessage{Content: text}), Preview: text}
	default:
		return store.NewEvent{Type: EventTurnEnd, Payload: mustJSON(TurnEnd{MessageSeq: int64(i - 7), Status: TurnCompleted})}
	}
}

// benchComparison is the median time of an operation and of its baseline,
// in nanoseconds, and the median of the ratios op/base.
type benchComparison struct{ op, base, ratio float64 }

// benchCompare times n runs of op, then n of base, 21 times over, after a
// warm-up of each.
func benchCompare(op, base func(), n int) benchComparison {
	timed := func(f func()) float64 {
		start := time.Now()
		for range n {
			f()
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	timed(op)
	timed(base)
	var ops, bases, ratios []float64
	for i := range 21 {
		// Alternate which goes first.
		var o, b float64
		if i%2 == 0 {
			o, b = timed(op), timed(base)
		} else {
			b, o = timed(base), timed(op)
		}
		ops, bases, ratios = append(ops, o), append(bases, b), append(ratios, o/b)
	}
	median := func(s []float64) float64 { slices.Sort(s); return s[len(s)/2] }
	return benchComparison{op: median(ops), base: median(bases), ratio: median(ratios)}
}

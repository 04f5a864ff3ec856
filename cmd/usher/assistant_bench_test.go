//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store/storetest"
)

// The Assistant runtime's benchmarks run a real `usher serve` in this
// process, with an instant scripted model, and take turns through the
// Assistant API as a client would. Results are in docs/benchmarks.md;
// `make bench` runs them. Each engine runs where it can: SQLite always,
// PostgreSQL with TEST_DATABASE_URL.

// benchTurnMessage is what the user says in every turn: the instant model
// answers it with a call of notes_list (allowed unattended by the default
// policy), then, given the call's result, with text.
const benchTurnMessage = "list my notes"

// BenchmarkAssistantTurn measures one turn with an instant model and one
// allowed tool call, as the client sees it: the round trip of
// POST /api/assistant/runs/{id}/messages?wait=60s. Each round opens a run
// and takes five turns on it one after the other: the first is cold (the
// run's MCP session is opened: broker token, initialize, tools/list), the
// four others warm (the session held since the first). It reports p50 and
// p99 of each, warm/cold at p50, and the CPU time this process (client,
// model and Usher; not PostgreSQL) spent per warm turn. From the run's event log it also
// reports the server's own span of warm turns: from the user message's
// commit to the turn's end (queue → end) and from the turn's start to its
// end (start → end, which leaves out the claim and, in a cold turn, the MCP
// connection). Interleaved with the rounds, in the same run, it times the
// parts a turn is made of on their own: one model step against the same
// scripted server with the same client library (a turn takes two), and one
// notes_list call through Usher's MCP endpoint with a broker token for a
// run, as the runner makes it.
func BenchmarkAssistantTurn(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchTurns(b, "") })
	b.Run("postgres", func(b *testing.B) { benchTurns(b, storetest.PostgresURL(b)) })
}

// Rounds of BenchmarkAssistantTurn: each opens a run and takes one cold
// and benchWarmTurns warm turns on it. The first benchWarmupRounds are not
// counted.
const (
	benchRounds       = 60
	benchWarmupRounds = 5
	benchWarmTurns    = 4
)

func benchTurns(b *testing.B, dbURL string) {
	s := startAssistantBench(b, dbURL)
	step := s.model.stepper(b)
	tool := s.toolCaller(b)

	var cold, warm, steps, calls []time.Duration
	var warmCPU time.Duration
	var turns []benchTurnRef
	for b.Loop() {
		for i := range benchRounds + benchWarmupRounds {
			runID := s.createRun(b)
			for j := range 1 + benchWarmTurns {
				cpu := processCPU()
				d, seq := s.turn(b, runID)
				if i < benchWarmupRounds {
					continue
				}
				turns = append(turns, benchTurnRef{run: runID, seq: seq, cold: j == 0})
				if j == 0 {
					cold = append(cold, d)
				} else {
					warm = append(warm, d)
					warmCPU += processCPU() - cpu
				}
			}
			s.completeRun(b, runID)
			// The parts alone, as often as a round uses them.
			for range 2 * (1 + benchWarmTurns) {
				if d := step(); i >= benchWarmupRounds {
					steps = append(steps, d)
				}
			}
			for range 1 + benchWarmTurns {
				if d := tool(); i >= benchWarmupRounds {
					calls = append(calls, d)
				}
			}
		}
	}
	queued, started := s.serverSpans(b, turns)
	b.ReportMetric(0, "ns/op")
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		b.ReportMetric(millis(percentile(cold, q.q)), "cold-"+q.name+"-ms")
		b.ReportMetric(millis(percentile(warm, q.q)), "warm-"+q.name+"-ms")
	}
	b.ReportMetric(float64(percentile(warm, 0.5))/float64(percentile(cold, 0.5)), "warm/cold-p50")
	b.ReportMetric(millis(percentile(queued, 0.5)), "warm-queue→end-p50-ms")
	b.ReportMetric(millis(percentile(started, 0.5)), "warm-start→end-p50-ms")
	b.ReportMetric(millis(warmCPU)/float64(len(warm)), "warm-cpu-ms/turn")
	b.ReportMetric(millis(percentile(steps, 0.5)), "model-step-p50-ms")
	b.ReportMetric(millis(percentile(calls, 0.5)), "tool-call-p50-ms")
}

// benchTurnRef names a measured turn: its run and user message.
type benchTurnRef struct {
	run  string
	seq  int64
	cold bool
}

// benchSegments are the steps of a turn as its events mark them; each
// event is stamped when its append begins.
var benchSegments = []struct{ name, until string }{
	{"claim, load, session", "agent.turn.start"},
	{"records, history, model step", "message.assistant"},
	{"append, tool call", "message.tool"},
	{"append, history, model step", "message.assistant"},
	{"append", "agent.turn.end"},
}

// serverSpans reads the measured turns' events and returns, for the warm
// ones, the time from the user message to the turn's end and from the
// turn's start to its end, as the server stamped them, and logs the p50
// of each segment of a warm turn. It checks that cold turns opened the
// run's MCP session and warm ones reused it.
func (s *assistantBench) serverSpans(b *testing.B, turns []benchTurnRef) (queued, started []time.Duration) {
	b.Helper()
	events := map[string][]benchEvent{}
	for _, t := range turns {
		if _, ok := events[t.run]; !ok {
			events[t.run] = s.events(b, t.run)
		}
	}
	segments := make([][]time.Duration, len(benchSegments))
	for _, t := range turns {
		evs := events[t.run]
		i := slices.IndexFunc(evs, func(e benchEvent) bool { return e.Seq == t.seq })
		if i < 0 {
			b.Fatalf("run %s: message %d not in its events", t.run, t.seq)
		}
		msg := evs[i].CreatedAt
		// The turn's events follow its message: the next user message
		// is posted only after the turn ended.
		at, delivery := msg, ""
		var stamps []time.Time
		for _, e := range evs[i+1:] {
			if len(stamps) == len(benchSegments) {
				break
			}
			if e.Type == "agent.runtime_context" {
				delivery = e.Data.Delivery
			}
			if e.Type == benchSegments[len(stamps)].until {
				stamps = append(stamps, e.CreatedAt)
			}
		}
		if len(stamps) != len(benchSegments) {
			b.Fatalf("run %s: turn of message %d has %d of its %d steps", t.run, t.seq, len(stamps), len(benchSegments))
		}
		if want := map[bool]string{true: "fresh", false: "held"}[t.cold]; delivery != want {
			b.Fatalf("run %s: turn of message %d had delivery %q, want %q", t.run, t.seq, delivery, want)
		}
		if t.cold {
			continue
		}
		for j, st := range stamps {
			segments[j] = append(segments[j], st.Sub(at))
			at = st
		}
		queued = append(queued, stamps[len(stamps)-1].Sub(msg))
		started = append(started, stamps[len(stamps)-1].Sub(stamps[0]))
	}
	var sb strings.Builder
	for j, seg := range benchSegments {
		fmt.Fprintf(&sb, "\n  until %-18s %-30s p50 %5.2f ms", seg.until, "("+seg.name+")", millis(percentile(segments[j], 0.5)))
	}
	b.Logf("a warm turn, from its message's commit:%s", sb.String())
	return queued, started
}

// BenchmarkAssistantConcurrent has 200 conversations of one user take
// turns at once on one process (assistant.max_concurrency at its default,
// 4; the user's active-run limit raised to 200), each turn one tool call
// as in BenchmarkAssistantTurn. Each conversation first takes its opening
// (cold) turn, all 200 at once, then three more (warm), all at once
// again. It reports turns/s of each phase, and as the baseline, measured
// before them, turns/s of one conversation taking its turns alone;
// warm/alone is the ratio of the warm phase to it. Memory is of this
// process (client, scripted model and Usher): the Go heap in use after a
// collection before the phases and after them (when 200 runs hold their
// MCP sessions), its peak sampled every 50 ms, and the resident set. To
// tell whether the CPU is the limit, it reports the CPU cores this process
// used during the warm phase and the busy fraction of the machine's CPUs
// (all processes: PostgreSQL, other work) from /proc/stat.
func BenchmarkAssistantConcurrent(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchConcurrent(b, "") })
	b.Run("postgres", func(b *testing.B) { benchConcurrent(b, storetest.PostgresURL(b)) })
}

const (
	benchConversations = 200
	benchWarmRounds    = 3
	benchAloneTurns    = 40
)

func benchConcurrent(b *testing.B, dbURL string) {
	// Each waiting post holds one of its user's live-update places.
	s := startAssistantBench(b, dbURL, "USHER_ASSISTANT_MAX_ACTIVE_RUNS", strconv.Itoa(benchConversations+1),
		"USHER_EVENTS_MAX_STREAMS_PER_USER", strconv.Itoa(2*benchConversations))
	runs := make([]string, benchConversations)
	for i := range runs {
		runs[i] = s.createRun(b)
	}
	// The baseline: one more conversation, alone.
	alone := s.createRun(b)
	s.turn(b, alone)
	start := time.Now()
	for range benchAloneTurns {
		s.turn(b, alone)
	}
	aloneRate := benchAloneTurns / time.Since(start).Seconds()
	s.completeRun(b, alone)

	// phase takes one turn in every conversation at once.
	phase := func() (rate float64, lat []time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed error
		start := time.Now()
		for _, id := range runs {
			wg.Go(func() {
				d, _, err := s.tryTurn(id)
				mu.Lock()
				defer mu.Unlock()
				lat = append(lat, d)
				if err != nil && failed == nil {
					failed = err
				}
			})
		}
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
		return float64(len(runs)) / time.Since(start).Seconds(), lat
	}

	var coldRate, warmRate, warmCores, warmBusy float64
	var coldLat, warmLat []time.Duration
	var before, after runtime.MemStats
	var rssBefore, rssAfter, rssPeak, heapPeak uint64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		rssBefore = procStatus(b, "VmRSS")
		resetPeakRSS()
		stop := sampleHeap(&heapPeak)
		coldRate, coldLat = phase()
		var warmTime time.Duration
		cpu := processCPU()
		busy, total := machineCPU()
		for range benchWarmRounds {
			start := time.Now()
			_, lat := phase()
			warmTime += time.Since(start)
			warmLat = append(warmLat, lat...)
		}
		warmRate = float64(benchWarmRounds*len(runs)) / warmTime.Seconds()
		warmCores = (processCPU() - cpu).Seconds() / warmTime.Seconds()
		b2, t2 := machineCPU()
		warmBusy = (b2 - busy) / (t2 - total)
		stop()
		rssPeak = procStatus(b, "VmHWM")
		// Close the client's 200 keep-alive connections, which are not
		// the server's to keep, and give the server a moment to notice.
		s.client.CloseIdleConnections()
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		runtime.ReadMemStats(&after)
		rssAfter = procStatus(b, "VmRSS")
	}
	if d := s.deliveries(b, runs); d["fresh"] != benchConversations || d["held"] != benchWarmRounds*benchConversations {
		b.Fatalf("turns by delivery: %v, want %d fresh and %d held", d, benchConversations, benchWarmRounds*benchConversations)
	}
	const mib = 1 << 20
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(aloneRate, "alone-turns/s")
	b.ReportMetric(coldRate, "cold-turns/s")
	b.ReportMetric(warmRate, "warm-turns/s")
	b.ReportMetric(warmRate/aloneRate, "warm/alone")
	b.ReportMetric(warmCores, "warm-process-cores")
	b.ReportMetric(warmBusy, "warm-machine-busy")
	b.ReportMetric(millis(percentile(warmLat, 0.5)), "warm-p50-ms")
	b.ReportMetric(millis(percentile(warmLat, 0.99)), "warm-p99-ms")
	b.ReportMetric(millis(percentile(coldLat, 0.99)), "cold-p99-ms")
	b.ReportMetric(float64(before.HeapInuse)/mib, "heap-before-MiB")
	b.ReportMetric(float64(heapPeak)/mib, "heap-peak-MiB")
	b.ReportMetric(float64(after.HeapInuse)/mib, "heap-after-MiB")
	b.ReportMetric((float64(after.HeapInuse)-float64(before.HeapInuse))/1024/benchConversations, "held-KiB/conversation")
	b.ReportMetric(float64(rssBefore)/1024, "rss-before-MiB")
	b.ReportMetric(float64(rssPeak)/1024, "rss-peak-MiB")
	b.ReportMetric(float64(rssAfter)/1024, "rss-after-MiB")
}

// deliveries counts the turns of the runs by how their tools were
// reached: "fresh" (the MCP session opened for the turn) or "held".
func (s *assistantBench) deliveries(b *testing.B, runs []string) map[string]int {
	out := map[string]int{}
	for _, id := range runs {
		for _, e := range s.events(b, id) {
			if e.Type == "agent.runtime_context" {
				out[e.Data.Delivery]++
			}
		}
	}
	return out
}

// sampleHeap records the peak of the heap in use every 50 ms until stop.
func sampleHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			*peak = max(*peak, m.HeapInuse)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// procStatus returns a field of /proc/self/status in KiB (VmRSS, VmHWM).
func procStatus(b *testing.B, field string) uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// machineCPU returns the time all CPUs of the machine spent busy and in
// total, in clock ticks, from /proc/stat.
func machineCPU() (busy, total float64) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i >= 8 { // guest times are already in user and nice
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// resetPeakRSS makes VmHWM start again from the current resident set.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkAssistantIdle counts the statements a server with no work sends
// PostgreSQL, through a proxy that reads the client side of the wire
// protocol: every simple query and every execution of a prepared one,
// grouped by its SQL. The server runs with the default sweep interval
// (30 s). It first takes one cold and five warm turns, counting their
// statements, then stays idle for a minute. It reports idle statements per
// minute and, of them, the queue claims (ClaimRuns) against the sweep ticks
// seen in the same minute (the sweep parks idle runs first): claims/sweep
// is 1 when the queue is only looked at on the sweep ticker and would grow
// with any polling. The statements are logged.
func BenchmarkAssistantIdle(b *testing.B) {
	counter := newPGCounter(b)
	dbURL := counter.via(b, storetest.PostgresURL(b))
	s := startAssistantBench(b, dbURL)

	runID := s.createRun(b)
	mark := counter.snapshot()
	s.turn(b, runID)
	coldStmts, coldTrips := counter.since(mark)
	var warmStmts, warmTrips int
	var lastWarm benchStatements
	for range 5 {
		mark = counter.snapshot()
		s.turn(b, runID)
		st, tr := counter.since(mark)
		warmStmts, warmTrips, lastWarm = warmStmts+st.total(), warmTrips+tr, st
	}

	window := time.Minute
	var idle benchStatements
	var idleTrips, idleConns int
	for b.Loop() {
		time.Sleep(time.Second) // let the last turn's waiter and release finish
		mark = counter.snapshot()
		time.Sleep(window)
		idle, idleTrips = counter.since(mark)
		idleConns = counter.connections() - mark.conns
	}
	perMinute := float64(time.Minute) / float64(window)
	claims, sweeps := idle.containing("UPDATE runs SET lease_owner"), idle.matching("UPDATE runs SET status = 'Idle'")
	b.Logf("statements of a warm turn (the API request, the turn, the tool call):\n%s", lastWarm)
	b.Logf("statements in %s idle (PostgreSQL, assistant.sweep_interval 30s):\n%s", window, idle)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(idle.total())*perMinute, "idle-statements/min")
	b.ReportMetric(float64(idleTrips)*perMinute, "idle-round-trips/min")
	b.ReportMetric(float64(idleConns)*perMinute, "idle-new-conns/min")
	b.ReportMetric(float64(claims)*perMinute, "idle-claims/min")
	if sweeps > 0 {
		b.ReportMetric(float64(claims)/float64(sweeps), "claims/sweep")
	}
	b.ReportMetric(float64(coldStmts.total()), "cold-turn-statements")
	b.ReportMetric(float64(coldTrips), "cold-turn-round-trips")
	b.ReportMetric(float64(warmStmts)/5, "warm-turn-statements")
	b.ReportMetric(float64(warmTrips)/5, "warm-turn-round-trips")
}

// assistantBench is a running `usher serve` with the instant model, and
// a user's token for its Assistant API.
type assistantBench struct {
	url     string
	dataDir string
	dbURL   string
	token   string
	client  *http.Client
	model   *instantModel
}

// startAssistantBench starts `usher serve` on SQLite in a new data
// directory, or on PostgreSQL at dbURL, with the instant model and the
// extra environment given as name, value pairs.
func startAssistantBench(b *testing.B, dbURL string, extra ...string) *assistantBench {
	b.Helper()
	m := newInstantModel(b)
	env := map[string]string{
		"USHER_MODEL_PROVIDER": "openai", "USHER_MODEL_BASE_URL": m.url, "USHER_MODEL_NAME": "instant",
		"USHER_MODEL_API_KEY": "bench-key", "USHER_LOG_LEVEL": "warn",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	logLoad(b)
	var args []string
	if dbURL != "" {
		args = []string{"--database-url", dbURL}
	}
	srv := startServer(b, env, args...)
	s := &assistantBench{dataDir: srv.dataDir, dbURL: dbURL, model: m, url: srv.url}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * benchConversations // a connection per waiting client
	s.client = &http.Client{Transport: tr}
	b.Cleanup(tr.CloseIdleConnections)
	s.token = s.cli(b, "token", "user", "--sub", "bench-user")
	return s
}

// cli runs one usher command against the server's installation.
func (s *assistantBench) cli(b *testing.B, args ...string) string {
	args = append(args, "--data-dir", s.dataDir, "--addr", strings.TrimPrefix(s.url, "http://"))
	if s.dbURL != "" {
		args = append(args, "--database-url", s.dbURL)
	}
	return benchCLI(b, args...)
}

// call sends one request to the server as the user and decodes the JSON
// answer into out (when not nil); it fails unless the status is want.
func (s *assistantBench) call(b *testing.B, method, path, body string, want int, out any) {
	if err := s.do(method, path, body, want, out); err != nil {
		b.Fatal(err)
	}
}

// do is call for any goroutine: it returns what went wrong.
func (s *assistantBench) do(method, path, body string, want int, out any) error {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s = %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return nil
}

func (s *assistantBench) createRun(b *testing.B) string {
	var run struct{ RunID string }
	s.call(b, "POST", "/api/assistant/runs", `{"title":"bench"}`, http.StatusCreated, &run)
	return run.RunID
}

func (s *assistantBench) completeRun(b *testing.B, runID string) {
	s.call(b, "POST", "/api/assistant/runs/"+runID+"/complete", "", http.StatusOK, nil)
}

// turn posts the user's message and waits for the turn's end; it returns
// the round trip and the message's sequence.
func (s *assistantBench) turn(b *testing.B, runID string) (time.Duration, int64) {
	d, seq, err := s.tryTurn(runID)
	if err != nil {
		b.Fatal(err)
	}
	return d, seq
}

// tryTurn is turn for any goroutine: it returns what went wrong.
func (s *assistantBench) tryTurn(runID string) (time.Duration, int64, error) {
	var out struct {
		Seq    int64
		Status string
		Reply  string
	}
	start := time.Now()
	if err := s.do("POST", "/api/assistant/runs/"+runID+"/messages?wait=60s", `{"content":"`+benchTurnMessage+`"}`, http.StatusOK, &out); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	if out.Status != "completed" || out.Reply != instantReply {
		return 0, 0, fmt.Errorf("turn on %s: %+v", runID, out)
	}
	return d, out.Seq, nil
}

// benchEvent is an event of the Assistant API, with the payload fields the
// benchmarks read.
type benchEvent struct {
	Seq       int64
	Type      string
	CreatedAt time.Time
	Data      struct {
		MessageSeq int64
		Delivery   string
	}
}

// events returns the run's whole event log.
func (s *assistantBench) events(b *testing.B, runID string) []benchEvent {
	var all []benchEvent
	var after int64
	for {
		var page struct {
			Events  []benchEvent
			HasMore bool
		}
		s.call(b, "GET", fmt.Sprintf("/api/assistant/runs/%s/events?after=%d", runID, after), "", http.StatusOK, &page)
		all = append(all, page.Events...)
		if len(page.Events) > 0 {
			after = page.Events[len(page.Events)-1].Seq
		}
		if !page.HasMore || len(page.Events) == 0 {
			return all
		}
	}
}

// toolCaller opens an MCP session to the server's endpoint as the runner
// does for a run (a broker token for the user and a run of theirs) and
// returns a function that calls notes_list once, with a new tool call id,
// and returns how long it took.
func (s *assistantBench) toolCaller(b *testing.B) func() time.Duration {
	var who assistant.Me
	s.call(b, "GET", "/api/me", "", http.StatusOK, &who)
	runID := s.createRun(b)
	token := s.cli(b, "token", "mcp", "--sub", who.ID, "--run", runID)
	cs := connectBench(b, s.url+"/mcp", token)
	prefix := rand.Text()[:8]
	var n atomic.Int64
	return func() time.Duration {
		start := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
			Name: "notes_list", Arguments: map[string]any{},
			Meta: mcp.Meta{"usher/tool_call_id": fmt.Sprintf("call_%s_%d", prefix, n.Add(1))},
		})
		d := time.Since(start)
		if err != nil || res.IsError {
			b.Fatalf("notes_list through /mcp: %v %+v", err, res)
		}
		return d
	}
}

// instantReply is the instant model's answer once the tool has answered.
const instantReply = "Here are your notes."

// instantModel is an OpenAI-compatible Chat Completions server that
// answers at once and keeps nothing: a conversation whose last message is
// a tool result gets instantReply, any other a call of notes_list with a
// new id. Unlike modeltest's scripted server, its answer depends only on
// the request, so conversations taking turns at once each get the same
// two steps, and it records nothing, so its memory stays flat.
type instantModel struct {
	url    string
	prefix string
	n      atomic.Int64
}

func newInstantModel(b *testing.B) *instantModel {
	m := &instantModel{prefix: rand.Text()[:8]}
	srv := httptest.NewServer(m)
	b.Cleanup(srv.Close)
	m.url = srv.URL + "/v1"
	return m
}

func (m *instantModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string
		Messages []struct{ Role string }
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	delta, finish := map[string]any{"role": "assistant", "content": instantReply}, "stop"
	if req.Messages[len(req.Messages)-1].Role != "tool" {
		delta = map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"index": 0, "id": fmt.Sprintf("call_%s_%d", m.prefix, m.n.Add(1)), "type": "function",
			"function": map[string]any{"name": "notes_list", "arguments": "{}"},
		}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		raw, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-instant", "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
		fmt.Fprintf(w, "data: %s\n\n", raw)
	}
	chunk(delta, nil)
	chunk(map[string]any{}, finish)
	io.WriteString(w, "data: [DONE]\n\n")
}

// stepper returns a function that makes one model step against the model
// with the server's own client library and a request like a turn's first
// step (the system prompt, the user message, the demo tools offered), and
// returns how long it took.
func (m *instantModel) stepper(b *testing.B) func() time.Duration {
	p, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: m.url, APIKey: "bench-key", Model: "instant"})
	if err != nil {
		b.Fatal(err)
	}
	req := model.Request{Messages: []model.Message{
		{Role: model.RoleSystem, Content: "You are Usher, an assistant that helps people through the tools you are offered."},
		{Role: model.RoleUser, Content: benchTurnMessage},
	}}
	for _, name := range []string{"notes_list", "notes_read", "notes_write", "notes_delete"} {
		req.Tools = append(req.Tools, model.Tool{Name: name, Description: "A demo tool.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
	}
	return func() time.Duration {
		start := time.Now()
		resp, err := p.Complete(context.Background(), req, nil)
		d := time.Since(start)
		if err != nil || len(resp.Message.ToolCalls) != 1 {
			b.Fatalf("model step: %v %+v", err, resp)
		}
		return d
	}
}

// logLoad logs the machine's load average now and when the benchmark
// ends: other work on the machine moves the absolute figures.
func logLoad(b *testing.B) {
	load := func() string {
		raw, _ := os.ReadFile("/proc/loadavg")
		return strings.TrimSpace(string(raw))
	}
	b.Logf("load average at the start: %s", load())
	b.Cleanup(func() { b.Logf("load average at the end: %s", load()) })
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pgCounter is a TCP proxy in front of PostgreSQL that reads the client
// side of the wire protocol and counts what the clients ask for: each
// simple query ('Q') and each execution ('E') of a prepared statement, by
// its SQL; each Sync or simple query as a round trip; each connection.
type pgCounter struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	stmts benchStatements
	trips int
	conns int
}

// benchStatements counts executed statements by their SQL, shortened.
type benchStatements map[string]int

func (c benchStatements) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// matching counts the statements whose SQL starts with prefix.
func (c benchStatements) matching(prefix string) int {
	n := 0
	for k, v := range c {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// containing counts the statements whose SQL contains part.
func (c benchStatements) containing(part string) int {
	n := 0
	for k, v := range c {
		if strings.Contains(k, part) {
			n += v
		}
	}
	return n
}

func (c benchStatements) String() string {
	keys := slices.SortedFunc(maps.Keys(c), func(a, b string) int { return c[b] - c[a] })
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%6d  %s\n", c[k], k)
	}
	return sb.String()
}

// pgMark is the counters at a moment.
type pgMark struct {
	stmts benchStatements
	trips int
	conns int
}

func newPGCounter(b *testing.B) *pgCounter {
	u, err := url.Parse(os.Getenv(storetest.DatabaseURLEnv))
	if err != nil || u.Host == "" {
		b.Skipf("%s is not set: this benchmark counts the statements sent to PostgreSQL", storetest.DatabaseURLEnv)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c := &pgCounter{ln: ln, upstream: host, stmts: benchStatements{}}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { c.serve(conn) })
		}
	})
	return c
}

// via returns dsn with its host replaced by the proxy's.
func (c *pgCounter) via(b *testing.B, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	u.Host = c.ln.Addr().String()
	return u.String()
}

func (c *pgCounter) snapshot() pgMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return pgMark{stmts: maps.Clone(c.stmts), trips: c.trips, conns: c.conns}
}

// since returns the statements and round trips counted after m.
func (c *pgCounter) since(m pgMark) (benchStatements, int) {
	now := c.snapshot()
	out := benchStatements{}
	for k, v := range now.stmts {
		if d := v - m.stmts[k]; d > 0 {
			out[k] = d
		}
	}
	return out, now.trips - m.trips
}

func (c *pgCounter) connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

func (c *pgCounter) count(sql string, trip bool) {
	sql = strings.Join(strings.Fields(sql), " ")
	if len(sql) > 72 {
		sql = sql[:72] + "…"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stmts[sql]++
	if trip {
		c.trips++
	}
}

// serve relays one connection, reading the client's messages as they go.
func (c *pgCounter) serve(client net.Conn) {
	var relay sync.WaitGroup
	defer relay.Wait() // after both connections are closed
	defer client.Close()
	server, err := net.Dial("tcp", c.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	c.mu.Lock()
	c.conns++
	c.mu.Unlock()
	relay.Go(func() {
		io.Copy(client, server) //nolint:errcheck // the connection ends either way
		client.Close()
	})
	r := bufio.NewReaderSize(client, 64<<10)
	w := bufio.NewWriterSize(server, 64<<10)
	// The startup packet has no type byte; an SSL or GSS encryption
	// request (refused without TLS) comes before it.
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 {
			return
		}
		body := make([]byte, n-8)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		w.Write(hdr[:])
		w.Write(body)
		if err := w.Flush(); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(hdr[4:]); code != 80877103 && code != 80877104 {
			break
		}
	}
	prepared := map[string]string{} // statement name → SQL
	var bound string                // the SQL of the last bound portal
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 {
			return
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		switch hdr[0] {
		case 'Q':
			c.count(cstring(body), true)
		case 'P':
			name, rest, _ := bytes.Cut(body, []byte{0})
			prepared[string(name)] = cstring(rest)
		case 'B':
			_, rest, _ := bytes.Cut(body, []byte{0}) // the portal
			bound = prepared[cstring(rest)]
		case 'E':
			c.count(bound, false)
		case 'S':
			c.mu.Lock()
			c.trips++
			c.mu.Unlock()
		}
		w.Write(hdr[:])
		w.Write(body)
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if hdr[0] == 'X' {
			return
		}
	}
}

// cstring returns the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	s, _, _ := bytes.Cut(b, []byte{0})
	return string(s)
}

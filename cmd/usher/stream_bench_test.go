package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// fanoutMessages is how many messages each fan-out run posts; each makes a
// turn of the demo model, about seven events.
const fanoutMessages = 20

// BenchmarkFanout measures how long an event takes from its append to the
// run's log to its arrival at each SSE subscriber: with 1, 100 and 1,000
// subscribers of one run, on SQLite and, with TEST_DATABASE_URL, on
// PostgreSQL (through LISTEN/NOTIFY). The latency of an event is its
// arrival time at a subscriber minus its createdAt, which the store sets
// when it appends it (one clock: server and subscribers share the
// process). It reports p50 and p99 over every (subscriber, event) pair,
// and their ratio to the single subscriber's. idle measures the heap of
// what 1,000 idle subscribers cost a server process of its own.
// Results are in docs/benchmarks.md.
func BenchmarkFanout(b *testing.B) {
	engines := []struct{ name, dbURL string }{{"sqlite", ""}}
	if os.Getenv(storetest.DatabaseURLEnv) != "" {
		engines = append(engines, struct{ name, dbURL string }{"postgres", storetest.PostgresURL(b)})
	}
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			var base float64
			for _, n := range []int{1, 100, 1000} {
				b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
					p50, p99 := fanout(b, e.dbURL, n)
					if n == 1 {
						base = p50
					}
					b.ReportMetric(p50, "p50-ms")
					b.ReportMetric(p99, "p99-ms")
					if base > 0 {
						b.ReportMetric(p50/base, "p50/1-subscriber")
					}
					b.ReportMetric(0, "ns/op")
				})
			}
			b.Run("idle", func(b *testing.B) {
				rss, heap := idleSubscribers(b, e.dbURL, 1000)
				b.ReportMetric(rss, "server-rss-B/subscriber")
				b.ReportMetric(heap, "server-heap+stack-B/subscriber")
				b.ReportMetric(0, "ns/op")
			})
		})
	}
}

// fanoutServer starts a server (SQLite, or PostgreSQL at dbURL) and
// returns it, a token and a new run.
func fanoutServer(b testing.TB, dbURL string) (*server, string, string) {
	// One user holds every subscriber: lift the per-user bound.
	env := map[string]string{"USHER_LOG_LEVEL": "warn", "USHER_EVENTS_MAX_STREAMS_PER_USER": "10000"}
	var args []string
	if dbURL != "" {
		env["USHER_BROKER_KEY_ENCRYPTION_KEY"] = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="
		args = []string{"--database-url", dbURL}
	}
	s := startServer(b, env, args...)
	cliArgs := []string{"token", "user", "--sub", fmt.Sprintf("fan-%d", time.Now().UnixNano())}
	if dbURL != "" {
		cliArgs = append(cliArgs, "--database-url", dbURL)
	}
	token, err := s.cli(b, cliArgs...)
	if err != nil {
		b.Fatal(err)
	}
	_, run := apitest.Call(b, "POST", s.url+"/api/assistant/runs", token, "")
	return s, token, run["runId"].(string)
}

// subscribe opens n SSE streams of the run and calls seen for each event
// with an id; it returns once every stream is connected, and a function
// that closes them.
func subscribe(b testing.TB, url, token string, n int, seen func(sub int, seq int64, latency time.Duration)) (closeAll func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	client := &http.Client{Transport: tr}
	var ready sync.WaitGroup
	var running sync.WaitGroup
	bodies := make(chan func(), n)
	for i := range n {
		ready.Add(1)
		running.Go(func() {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				ready.Done()
				return
			}
			bodies <- func() { resp.Body.Close() }
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 4<<10), 1<<20)
			var seq int64
			connected := false
			for sc.Scan() {
				line := sc.Text()
				switch {
				case !connected && line == "event: connected":
					connected = true
					ready.Done()
				case strings.HasPrefix(line, "id: "):
					seq, _ = strconv.ParseInt(line[4:], 10, 64)
				case strings.HasPrefix(line, "data: ") && seq > 0:
					// Only createdAt is read, without decoding the rest,
					// so that the subscribers' own work stays small.
					now := time.Now()
					if at, ok := createdAt(line); ok && seen != nil {
						seen(i, seq, now.Sub(at))
					}
					seq = 0
				}
			}
		})
	}
	ready.Wait()
	return func() {
		close(bodies)
		for c := range bodies {
			c()
		}
		running.Wait()
		tr.CloseIdleConnections()
	}
}

// fanout posts fanoutMessages messages to a run with n subscribers and
// returns the p50 and p99 append-to-arrival latency, in milliseconds.
func fanout(b *testing.B, dbURL string, n int) (p50, p99 float64) {
	s, token, runID := fanoutServer(b, dbURL)
	var mu sync.Mutex
	var latencies []time.Duration
	last := make([]int64, n)
	closeAll := subscribe(b, s.url+"/api/assistant/runs/"+runID+"/events/stream", token, n, func(sub int, seq int64, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		latencies = append(latencies, d)
		last[sub] = seq
	})
	defer closeAll()
	b.ResetTimer()
	for i := range fanoutMessages {
		body := fmt.Sprintf(`{"content":"message %d"}`, i)
		if code, r := apitest.Call(b, "POST", s.url+"/api/assistant/runs/"+runID+"/messages?wait=30s", token, body); code != 200 {
			b.Fatalf("turn = %d %v", code, r)
		}
	}
	// Wait until every subscriber has the whole log.
	_, run := apitest.Call(b, "GET", s.url+"/api/assistant/runs/"+runID, token, "")
	want := int64(run["run"].(map[string]any)["lastSeq"].(float64))
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		done := !slices.ContainsFunc(last, func(seq int64) bool { return seq < want })
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			b.Fatalf("subscribers did not receive all %d events: the last seq each received is %v", want, last[:min(len(last), 10)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if len(latencies) != n*int(want) {
		b.Fatalf("%d deliveries, want %d subscribers × %d events", len(latencies), n, want)
	}
	slices.Sort(latencies)
	return micros(latencies[len(latencies)/2]) / 1000, micros(latencies[len(latencies)*99/100]) / 1000
}

// idleSubscribers opens n idle subscribers of a run served by an usher
// process of its own, and returns what they cost the server, per
// subscriber: the growth of its resident set (VmRSS) and of its Go heap and
// stacks in use (from its /metrics), without the clients' share.
func idleSubscribers(b *testing.B, dbURL string, n int) (rss, heapAndStacks float64) {
	bin := testenv.Usher(b)
	addr := testenv.FreeAddr(b)
	// GOGC=10 keeps the garbage of the 1,000 sign-ins out of the figure.
	env := []string{"USHER_LOG_LEVEL=warn", "USHER_EVENTS_HEARTBEAT=5m", "GOGC=10", "USHER_EVENTS_MAX_STREAMS_PER_USER=10000"}
	if dbURL != "" {
		env = append(env, "USHER_DATABASE_URL="+dbURL, "USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=")
	}
	p := startProcess(b, bin, env, addr)
	cmd := exec.Command(bin, "token", "user", "--sub", "idle", "--addr", addr, "--data-dir", p.dataDir)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		b.Fatal(err)
	}
	token := strings.TrimSpace(string(out))
	_, run := apitest.Call(b, "POST", p.url+"/api/assistant/runs", token, "")
	measure := func() (float64, float64) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			b.Skipf("no /proc: %v", err)
		}
		var kb float64
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				fmt.Sscan(v, &kb)
			}
		}
		return kb * 1024, metricOf(b, p.url, "go_memstats_heap_inuse_bytes") + metricOf(b, p.url, "go_memstats_stack_inuse_bytes")
	}
	rss0, heap0 := measure()
	closeAll := subscribe(b, p.url+"/api/assistant/runs/"+run["runId"].(string)+"/events/stream", token, n, nil)
	defer closeAll()
	time.Sleep(time.Second) // let the server settle its new connections
	rss1, heap1 := measure()
	return (rss1 - rss0) / float64(n), (heap1 - heap0) / float64(n)
}

// metricOf reads one unlabelled value from a server's /metrics.
func metricOf(b *testing.B, url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("no metric %s", name)
	return 0
}

// createdAt finds the "createdAt" time in an event's data line.
func createdAt(line string) (time.Time, bool) {
	_, rest, ok := strings.Cut(line, `"createdAt":"`)
	if !ok {
		return time.Time{}, false
	}
	v, _, ok := strings.Cut(rest, `"`)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

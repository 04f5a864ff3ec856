//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// benchWorkers is how many calls are in flight at once when the throughput
// is measured: many more than two cores, so that others run while calls
// wait on PostgreSQL and the upstream.
const benchWorkers = 16

// benchWarmup calls are made on each path before anything is measured, so
// that connections, Usher's upstream session and its tool list are open.
const benchWarmup = 100

// BenchmarkToolsCall measures an allowed tools/call through Usher (broker
// token verification, policy, audit records and the idempotency record on
// PostgreSQL, the upstream hop) against the same upstream called directly,
// in the same run with the same client code. Results are recorded in
// docs/benchmarks.md; `make bench` runs it.
//
// latency makes one call at a time, b.N on each path, alternating the
// two, and reports their p50 and p99 and what Usher adds. throughput makes
// b.N calls on each path with benchWorkers in flight and reports calls/s,
// and the CPU time and heap bytes this process spent per call (the client
// and the upstream, plus Usher on its path; PostgreSQL is not counted).
// store makes, b.N times, only the PostgreSQL writes of one allowed call,
// to show their share of what Usher adds. Client, Usher, upstream and
// PostgreSQL share the machine. ns/op is left out: an op is a call on each
// path, and the metrics say more.
func BenchmarkToolsCall(b *testing.B) {
	if os.Getenv(storetest.DatabaseURLEnv) == "" {
		b.Skipf("%s is not set: this benchmark measures Usher's audit and execution records on PostgreSQL; "+
			"set it, e.g. %s='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'", storetest.DatabaseURLEnv, storetest.DatabaseURLEnv)
	}
	ctx := b.Context()
	upURL := startEchoUpstream(b, nil)
	u := startBenchUsher(b, upURL)

	paths := []*benchPath{
		{name: "direct", tool: "echo", session: connectBench(b, upURL, "")},
		{name: "usher", tool: "up__echo", session: connectBench(b, u.url+"/mcp", u.token)},
	}
	keys := newKeySource()
	for _, p := range paths {
		for range benchWarmup {
			if _, err := p.call(ctx, keys.next()); err != nil {
				b.Fatalf("warm-up on %s: %v", p.name, err)
			}
		}
	}

	b.Run("latency", func(b *testing.B) {
		lat := make([][]time.Duration, len(paths))
		for i := 0; b.Loop(); i++ {
			// Alternate which path goes first, so that neither gains from
			// the other having just run.
			for j := range paths {
				p := (i + j) % len(paths)
				d, err := paths[p].call(ctx, keys.next())
				if err != nil {
					b.Fatalf("%s: %v", paths[p].name, err)
				}
				lat[p] = append(lat[p], d)
			}
		}
		direct, usher := lat[0], lat[1]
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			d, u := percentile(direct, q.q), percentile(usher, q.q)
			b.ReportMetric(micros(d), "direct-"+q.name+"-µs")
			b.ReportMetric(micros(u), "usher-"+q.name+"-µs")
			b.ReportMetric(micros(u-d), "added-"+q.name+"-µs")
		}
		b.ReportMetric(0, "ns/op")
	})

	b.Run("throughput", func(b *testing.B) {
		for _, p := range paths {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu := processCPU()
			elapsed, err := p.throughput(ctx, b.N, benchWorkers, keys)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			cpu = processCPU() - cpu
			runtime.ReadMemStats(&after)
			n := float64(b.N)
			b.ReportMetric(n/elapsed.Seconds(), p.name+"-calls/s")
			b.ReportMetric(micros(cpu)/n, p.name+"-cpu-µs/call")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/1024/n, p.name+"-KiB/call")
		}
		b.ReportMetric(0, "ns/op")
	})

	b.Run("store", func(b *testing.B) { benchStoreCalls(b) })

	// What was measured is what Usher must do: each call left its audit
	// records (the decision and the execution), in an intact chain.
	var records int64
	out := benchCLI(b, "audit", "verify", "--config", u.config)
	if _, err := fmt.Sscanf(out, "audit log intact: %d records", &records); err != nil || records < 2*paths[1].calls.Load() {
		b.Fatalf("after %d calls through Usher, audit verify says: %s", paths[1].calls.Load(), out)
	}
}

// benchStoreCalls makes the store calls of one allowed tools/call with an
// idempotency key, in the order the MCP server makes them and through the
// same adapter, without the call itself: the decision record with the
// execution's start, on the caller's time, then the execution's finish
// with its record, which the server writes after it has answered (and
// which rides in the transaction of the next call's start). It reports
// the p50 of the start, what a call waits for.
func benchStoreCalls(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.PostgresURL(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	auditLog, err := audit.New(st, nil)
	if err != nil {
		b.Fatal(err)
	}
	x := mcpserver.AuditedExecutions{Store: st, Log: auditLog}
	var lat []time.Duration
	result := json.RawMessage(`{"content":[{"type":"text","text":"echo: x"}]}`)
	keys := newKeySource()
	var finishes sync.WaitGroup
	failed := make(chan error, 1)
	for b.Loop() {
		key := keys.next()
		ev := mcpserver.Event{
			Principal: "bench-user", ClientID: "usher-assistant", TokenID: rand.Text(), Tool: "up__echo", Server: "up",
			DefinitionHash: "sha256:" + strings.Repeat("a", 64), ArgumentsHash: strings.Repeat("b", 64),
			Decision: mcpserver.Allow, PolicyIDs: []string{"allow-bench-echo"}, PolicyHash: "sha256:" + strings.Repeat("c", 64),
			Reasons: []string{"echo only returns its argument"}, IdempotencyKey: key,
		}
		exec := store.Execution{IdempotencyKey: key, Principal: ev.Principal, Tool: ev.Tool, ArgumentsHash: ev.ArgumentsHash}
		start := time.Now()
		ev.Kind, ev.At = mcpserver.KindDecision, time.Now()
		_, started, err := x.BeginExecution(ctx, exec, ev)
		if err == nil && !started {
			err = errors.New("the execution was not started")
		}
		if err != nil {
			b.Fatalf("decision and start: %v", err)
		}
		lat = append(lat, time.Since(start))
		ev.Kind, ev.At, ev.Outcome, ev.Latency = mcpserver.KindExecuted, time.Now(), mcpserver.OutcomeSucceeded, time.Since(start)
		finishes.Go(func() {
			if _, err := x.FinishExecution(ctx, key, store.ExecutionSucceeded, result, time.Now(), ev); err != nil {
				select {
				case failed <- err:
				default:
				}
			}
		})
	}
	finishes.Wait()
	select {
	case err := <-failed:
		b.Fatalf("finish and record: %v", err)
	default:
	}
	b.ReportMetric(micros(percentile(lat, 0.5)), "decision-and-start-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// benchPath is one way to the echo tool: directly or through Usher.
type benchPath struct {
	name    string
	tool    string
	session *mcp.ClientSession
	calls   atomic.Int64 // calls answered as expected
}

// call makes one call of the echo tool and returns how long it took. The
// idempotency key makes Usher keep an execution record, as it does for
// every call of the assistant; the upstream ignores it.
func (p *benchPath) call(ctx context.Context, key string) (time.Duration, error) {
	params := &mcp.CallToolParams{
		Name:      p.tool,
		Arguments: map[string]any{"text": key},
		Meta:      mcp.Meta{"usher/idempotency_key": key},
	}
	start := time.Now()
	res, err := p.session.CallTool(ctx, params)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if len(res.Content) != 1 {
		return 0, fmt.Errorf("%d content items, want 1", len(res.Content))
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	if res.IsError || text == nil || text.Text != "echo: "+key {
		b, _ := json.Marshal(res)
		return 0, fmt.Errorf("unexpected result %s", b)
	}
	p.calls.Add(1)
	return d, nil
}

// throughput makes n calls with workers in flight and returns how long
// they took together.
func (p *benchPath) throughput(ctx context.Context, n, workers int, keys *keySource) (time.Duration, error) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := p.call(ctx, keys.next()); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// keySource hands out idempotency keys unique to this process run, so
// that no call is answered from an earlier call's execution record.
type keySource struct {
	prefix string
	n      atomic.Int64
}

func newKeySource() *keySource { return &keySource{prefix: "bench-" + rand.Text()[:12]} }

func (k *keySource) next() string { return fmt.Sprintf("%s-%d", k.prefix, k.n.Add(1)) }

// percentile returns the q-quantile of ds by the nearest-rank method.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startEchoUpstream serves a stateless streamable-HTTP MCP server with one
// tool, echo, and returns its endpoint. calls, when not nil, counts the
// echo calls it ran.
func startEchoUpstream(tb testing.TB, calls *atomic.Int64) string {
	tb.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-upstream", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{
		Name: "echo", Description: "Returns its text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		if calls != nil {
			calls.Add(1)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	tb.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// benchUsher is a running `usher serve`.
type benchUsher struct {
	url    string // where it serves
	token  string // a broker token for its /mcp
	config string // its configuration file
}

// startBenchUsher configures Usher on PostgreSQL with the benchmark policy
// and the upstream, writes the tool lock from the live catalog as an
// operator would (`usher tools lock`), starts `usher serve` and mints a
// broker token for it (`usher token mcp`).
func startBenchUsher(b testing.TB, upstreamURL string) benchUsher {
	b.Helper()
	policyFile, err := filepath.Abs(filepath.Join("testdata", "bench", "policy.cedar"))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := filepath.Join(dir, "usher.yaml")
	// The longest broker token lifetime, so that long runs keep theirs.
	yaml := fmt.Sprintf(`server:
  data_dir: %q
database:
  url: %q
broker:
  token_lifetime: 15m
mcp:
  upstreams:
    - name: up
      url: %q
policy:
  file: %q
  lock_file: %q
`, filepath.Join(dir, "data"), storetest.PostgresURL(b), upstreamURL, policyFile, filepath.Join(dir, "tools.lock"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	benchCLI(b, "tools", "lock", "--config", cfg)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	stderr := &testenv.Output{}
	go func() {
		err := run(ctx, []string{"serve", "--config", cfg, "--addr", "127.0.0.1:0"}, getenv(nil), pw, stderr)
		pw.Close()
		done <- err
	}()
	var url string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain the rest of the banner
	if url == "" {
		cancel()
		b.Fatalf("usher did not start: %v\nstderr:\n%s", <-done, stderr)
	}
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("serve returned %v\nstderr:\n%s", err, stderr)
		}
	})
	token := benchCLI(b, "token", "mcp", "--sub", "bench-user", "--config", cfg, "--addr", strings.TrimPrefix(url, "http://"))
	return benchUsher{url: url, token: token, config: cfg}
}

// benchCLI runs one usher command and returns what it printed.
func benchCLI(b testing.TB, args ...string) string {
	b.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, getenv(nil), &out, &errOut); err != nil {
		b.Fatalf("usher %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// connectBench opens an MCP client session to endpoint, sending token as a
// bearer token when there is one. Both paths use this one client setup.
func connectBench(b *testing.B, endpoint, token string) *mcp.ClientSession {
	b.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = benchWorkers // keep one connection per worker open
	client := mcp.NewClient(&mcp.Implementation{Name: "usher-bench", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:             endpoint,
		HTTPClient:           &http.Client{Transport: &bearer{base: tr, token: token}},
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		b.Fatalf("connect to %s: %v", endpoint, err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// bearer sends a bearer token, if it has one, with every request.
type bearer struct {
	base  http.RoundTripper
	token string
}

func (t *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.token == "" {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

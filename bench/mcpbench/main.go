// Command mcpbench is the out-of-process benchmark of an allowed MCP
// tools/call through Usher: it starts an echo upstream (bench/echoupstream)
// and `usher serve` as processes of their own on loopback, Usher on
// PostgreSQL when TEST_DATABASE_URL is set (in a schema of its own) and on
// SQLite otherwise, and drives both from this process as an MCP client
// (the Go SDK's: initialize, then tools/call).
//
// The baseline of the same run is a transparent proxy (bench/passproxy,
// net/http/httputil's ReverseProxy, in a process of its own) in front of
// the same upstream: what one more loopback hop through a proxy costs,
// with nothing on top.
//
// Sequentially it makes calls in rounds, A through Usher, B to the
// upstream directly and C through the proxy, A, B, C, A, B, C, and reports
// what Usher and the proxy each add from the distribution of the
// per-round differences A − B and C − B (the median and 99th percentile),
// with each side's own p50 and p99, and their ratio. Then, with 8 clients
// at once (-concurrency), it calls through Usher alone, then the upstream
// alone and then the proxy alone for -duration each, and reports calls/s
// and the CPU time per call of each process: Usher, the upstream, the
// proxy, Usher's PostgreSQL backends (when the server is on this machine)
// and this load client, from /proc/PID/stat before and after. `make bench-mcp` builds the binaries
// and runs it; the figures are recorded in docs/benchmarks.md.
//
// With -against, a second usher binary runs beside the first, its calls
// in the same rounds (D) and its c=8 phases alternating with the first's
// (A B B A B A A B), so that a change is measured against the revision before it
// on the same moments of the machine.
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/usherhq/usher/bench/child"
)

//go:embed policy.cedar
var policy []byte

// options are the benchmark's flags.
type options struct {
	usher, upstream string
	proxy           string
	method          string
	database        string
	dbRTT           time.Duration
	netdelay        string
	dbVia           string // the address Usher reaches PostgreSQL at: netdelay's, with -db-rtt
	pairs, warmup   int
	gap             time.Duration
	concurrency     int
	duration        time.Duration
	protocol        string
	idempotencyKey  bool
	profile         string
	stateful        bool
	against         string
	keep            bool
}

func main() {
	var o options
	flag.StringVar(&o.usher, "usher", "bin/usher", "the usher binary")
	flag.StringVar(&o.upstream, "upstream", "bin/echoupstream", "the echo upstream's binary (bench/echoupstream)")
	flag.StringVar(&o.proxy, "proxy", "bin/passproxy", "the transparent proxy's binary (bench/passproxy), the run's baseline; empty: none")
	flag.StringVar(&o.database, "database", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL server URL (a schema of its own is created and dropped); empty: SQLite")
	flag.DurationVar(&o.dbRTT, "db-rtt", 0, "time added to each round trip between Usher and PostgreSQL by a relay (bench/netdelay, half each way), as a database in another rack or zone adds; 0: none, Usher connects to the server directly")
	flag.StringVar(&o.netdelay, "netdelay", "bin/netdelay", "the relay's binary (bench/netdelay), for -db-rtt")
	flag.StringVar(&o.method, "method", "tools/call", "what each call is: tools/call (of the echo tool), resources/read (of the echo resource template) or prompts/get (of the echo prompt)")
	flag.IntVar(&o.pairs, "pairs", 2000, "sequential rounds (a call through Usher, then one direct, then one through the proxy)")
	flag.DurationVar(&o.gap, "gap", 0, "a pause after each sequential call, so that what a call leaves running after its answer (its outcome's write) is over before the next call; 0: none")
	flag.IntVar(&o.warmup, "warmup", 200, "warm-up calls on each path before anything is measured")
	flag.IntVar(&o.concurrency, "concurrency", 8, "clients calling at once in the throughput phases")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each throughput phase (through Usher, then direct, then through the proxy)")
	flag.StringVar(&o.protocol, "protocol", "2025-11-25", "MCP protocol revision the clients ask for (empty: the SDK's latest)")
	flag.BoolVar(&o.idempotencyKey, "idempotency-key", true, `send a new _meta["usher/idempotency_key"] with every call, so that Usher keeps an execution record, as for the assistant's calls`)
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile of Usher during its throughput phase to this file (through server.debug_addr)")
	flag.BoolVar(&o.stateful, "stateful", false, "run Usher's MCP endpoint stateful (mcp.stateful: sessions kept in its process), not the default stateless")
	flag.StringVar(&o.against, "against", "", "a second usher binary to measure against -usher in the same run: its calls go in the same sequential rounds (D, after C) and its c=8 phases alternate with -usher's (A B B A B A A B, each a quarter of -duration); the report adds its figures and -usher's less its, round by round")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configuration, logs, SQLite database)")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}

var (
	upstreamReady = regexp.MustCompile(`^echo upstream at (http://\S+)`)
	proxyReady    = regexp.MustCompile(`^proxy at (http://\S+)`)
	netdelayReady = regexp.MustCompile(`^netdelay at (\S+)`)
	debugListen   = regexp.MustCompile(`msg="debug listener \(pprof, expvar\)" listen=(\S+)`)
	auditIntact   = regexp.MustCompile(`audit log intact: (\d+) records`)
)

func run(ctx context.Context, o options, out io.Writer) (err error) {
	if o.pairs < 1 || o.concurrency < 1 || o.duration <= 0 || o.warmup < 0 || o.gap < 0 {
		return fmt.Errorf("-pairs, -concurrency and -duration must be positive, -gap not negative")
	}
	dir, err := os.MkdirTemp("", "usher-mcpbench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "work directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	switch o.method {
	case "tools/call", "resources/read", "prompts/get":
	default:
		return fmt.Errorf("-method must be tools/call, resources/read or prompts/get, not %q", o.method)
	}
	r := report{loadStart: child.LoadAverage(), method: o.method, protocol: o.protocol, sdk: sdkVersion(), idempotencyKey: o.idempotencyKey && o.method == "tools/call", endpoint: endpointMode(o.stateful), gap: o.gap}

	up, upURL, err := child.Start("upstream", filepath.Join(dir, "upstream.log"), o.upstream, upstreamReady)
	if err != nil {
		return err
	}
	defer func() {
		if e := up.Stop(); err == nil {
			err = e
		}
	}()

	var proxy *child.Process
	var proxyURL string
	if o.proxy != "" {
		if proxy, proxyURL, err = child.Start("proxy", filepath.Join(dir, "proxy.log"), o.proxy, proxyReady, "-upstream", upURL); err != nil {
			return err
		}
		defer func() {
			if e := proxy.Stop(); err == nil {
				err = e
			}
		}()
	}

	if o.dbRTT > 0 {
		if o.database == "" {
			return fmt.Errorf("-db-rtt needs a PostgreSQL server (-database or TEST_DATABASE_URL)")
		}
		u, err := url.Parse(o.database)
		if err != nil {
			return fmt.Errorf("-database: %w", err)
		}
		relay, addr, err := child.Start("netdelay", filepath.Join(dir, "netdelay.log"), o.netdelay, netdelayReady, "-target", u.Host, "-rtt", o.dbRTT.String())
		if err != nil {
			return err
		}
		defer func() {
			if e := relay.Stop(); err == nil {
				err = e
			}
		}()
		o.dbVia, r.dbRTT = addr, o.dbRTT
		// What the relay adds as measured, with its own hops and timers.
		if r.dbRTTDirect, err = roundTrip(ctx, o.database, "", 200); err != nil {
			return err
		}
		if r.dbRTTRelayed, err = roundTrip(ctx, o.database, addr, 200); err != nil {
			return err
		}
	}
	if o.database != "" {
		r.engine = "PostgreSQL"
	} else {
		r.engine = "SQLite"
	}
	ua, err := startUsher(ctx, o, o.usher, dir, upURL, up.Pid())
	if err != nil {
		return err
	}
	defer func() {
		if e := ua.stop(); err == nil {
			err = e
		}
	}()
	var ub *usherRun // -against's
	if o.against != "" {
		if ub, err = startUsher(ctx, o, o.against, filepath.Join(dir, "against"), upURL, up.Pid()); err != nil {
			return err
		}
		defer func() {
			if e := ub.stop(); err == nil {
				err = e
			}
		}()
		r.against = &againstResult{bin: o.against}
	}

	keys := newKeySource()
	via := ua.via
	direct := &path{name: "direct", tool: "echo", method: o.method, endpoint: upURL, protocol: o.protocol}
	paths := []*path{via, direct}
	var passed *path // through the proxy
	if proxy != nil {
		passed = &path{name: "through the proxy", tool: "echo", method: o.method, endpoint: proxyURL, protocol: o.protocol}
		paths = append(paths, passed)
	}
	if ub != nil {
		ub.via.name = "through -against's Usher"
		paths = append(paths, ub.via)
	}
	for _, p := range paths {
		if err := p.connect(ctx, o.concurrency); err != nil {
			return err
		}
		defer p.close()
	}
	procs := ua.procs
	if proxy != nil {
		procs.proxy = proxy.Pid()
	}

	// Warm-up: connections, Usher's upstream session and tool list.
	for range o.warmup {
		for _, p := range paths {
			if _, err := p.call(ctx, p.sessions[0], keys.next()); err != nil {
				return fmt.Errorf("warm-up %s: %w", p.name, err)
			}
		}
	}

	// Sequential rounds: A through Usher, B direct, C through the proxy,
	// D through -against's Usher.
	before, err := ua.sample(ctx, procs)
	if err != nil {
		return err
	}
	var beforeB usherSample
	if ub != nil {
		if beforeB, err = ub.sample(ctx, ub.procs); err != nil {
			return err
		}
	}
	sides := make([][]time.Duration, len(paths))
	for range o.pairs {
		for i, p := range paths {
			d, err := p.call(ctx, p.sessions[0], keys.next())
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			sides[i] = append(sides[i], d)
			if o.gap > 0 {
				time.Sleep(o.gap)
			}
		}
	}
	r.seq = summarisePairs(sides[0], sides[1])
	if passed != nil {
		r.proxy = true
		r.seqProxy = summarisePairs(sides[2], sides[1])
		r.usherOverProxy = median(pairedDiffs(sides[0], sides[2]))
	}
	after, err := ua.sample(ctx, procs)
	if err != nil {
		return err
	}
	r.seqCPU, r.seqMemory, r.seqStages = after.since(before, o.pairs)
	if ub != nil {
		afterB, err := ub.sample(ctx, ub.procs)
		if err != nil {
			return err
		}
		d := sides[len(sides)-1]
		a := r.against
		a.seq = summarisePairs(d, sides[1])
		a.usherLess = median(pairedDiffs(sides[0], d))
		a.usherFaster = shareLower(sides[0], d)
		a.seqCPU, a.seqMemory, a.seqStages = afterB.since(beforeB, o.pairs)
	}

	// Throughput: each path alone, with o.concurrency clients; with
	// -against, its Usher's phases alternate with this one's (see
	// alternation), so that a drift of the machine falls on both.
	var profile chan error
	if o.profile != "" {
		profile = make(chan error, 1)
		d := o.duration
		if ub != nil {
			d = alternationPart(d) // the first phase through Usher
		}
		go func() { profile <- takeProfile(ctx, ua.debugAddr, d, o.profile) }()
	}
	c8Before, err := sampleStages(ctx, ua.url)
	if err != nil {
		return err
	}
	if ub == nil {
		if r.c8Usher, err = throughput(ctx, via, o.duration, keys, procs); err != nil {
			return err
		}
	} else {
		if r.c8Usher, r.against.c8, r.against.c8Stages, err = alternate(ctx, via, ub, o.duration, keys, procs); err != nil {
			return err
		}
	}
	c8After, err := sampleStages(ctx, ua.url)
	if err != nil {
		return err
	}
	r.c8Stages = c8After.since(c8Before)
	if profile != nil {
		if err := <-profile; err != nil {
			return fmt.Errorf("CPU profile: %w", err)
		}
		r.profile = o.profile
	}
	if r.c8Direct, err = throughput(ctx, direct, o.duration, keys, procs); err != nil {
		return err
	}
	if passed != nil {
		if r.c8Proxy, err = throughput(ctx, passed, o.duration, keys, procs); err != nil {
			return err
		}
	}
	r.concurrency, r.duration = o.concurrency, o.duration

	// What was measured is what Usher must do: every call through it left
	// its records (the decision and how it ended) in an intact chain.
	if r.auditRecords, err = ua.verifyAudit(ctx, o.usher); err != nil {
		return err
	}
	r.usherCalls = via.calls.Load()
	if ub != nil {
		if r.against.auditRecords, err = ub.verifyAudit(ctx, o.against); err != nil {
			return fmt.Errorf("-against: %w", err)
		}
		r.against.usherCalls = ub.via.calls.Load()
	}
	r.loadEnd = child.LoadAverage()
	r.print(out)
	return nil
}

// writeConfig writes Usher's configuration for the run: the upstream, the
// benchmark's policy (echo allowed unattended), the database, and the
// debug listener (on loopback), which the run reads Usher's memory
// statistics from and takes a profile through; the endpoint stateful when
// stateful is set.
func writeConfig(dir, upstreamURL string, db *benchDatabase, stateful bool) (string, error) {
	policyFile := filepath.Join(dir, "policy.cedar")
	if err := os.WriteFile(policyFile, policy, 0o600); err != nil {
		return "", err
	}
	var database string
	if db != nil {
		database = fmt.Sprintf("database:\n  url: %q\n", db.url)
	}
	// The longest broker token lifetime, so that long runs keep theirs.
	yaml := fmt.Sprintf(`server:
  data_dir: %q
  debug_addr: 127.0.0.1:0
%sbroker:
  token_lifetime: 15m
mcp:
  stateful: %t
  upstreams:
    - name: up
      url: %q
policy:
  file: %q
  lock_file: %q
`, filepath.Join(dir, "data"), database, stateful, upstreamURL, policyFile, filepath.Join(dir, "tools.lock"))
	cfg := filepath.Join(dir, "usher.yaml")
	return cfg, os.WriteFile(cfg, []byte(yaml), 0o600)
}

// takeProfile fetches a CPU profile of Usher for most of d from its debug
// listener and writes it to file.
func takeProfile(ctx context.Context, addr string, d time.Duration, file string) error {
	secs := max(int((d-time.Second)/time.Second), 1)
	resp, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sdkVersion is the Go SDK's version this load client (and so the
// upstream, built from the same module) was built with.
func sdkVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/modelcontextprotocol/go-sdk" {
				return m.Version
			}
		}
	}
	return "unknown"
}

// endpointMode names how Usher's endpoint keeps MCP sessions.
func endpointMode(stateful bool) string {
	if stateful {
		return "stateful"
	}
	return "stateless"
}

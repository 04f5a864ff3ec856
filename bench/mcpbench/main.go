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
// Beside that Usher (A), -variants runs the same binary configured as an
// operator would turn on what is measured: "sink", an audit webhook sink
// delivering to a loopback receiver, and "traced", tracing on (every trace
// sampled, exported over OTLP/HTTP to a loopback receiver); the receiver
// is bench/collector, a process of its own. Each is an Usher of its own
// (its own schema), its calls in the same sequential rounds as A's, the
// Ushers' order changing round by round (A B C S T, T B C S A, S B C T A,
// ..., see roundOrder), and its c=8 phases alternating with A's (see
// alternation). The report sets each against A: the added p50 and p99, the
// per-round difference X − A with a 95 % confidence interval of its
// median, the CPU per call sequentially and at c=8 (with the spread of its
// ratio phase by phase), and what the receiver got: every record of the
// sink's log, signed, and a span of every call through the traced Usher.
//
// On PostgreSQL each sequential round ends with a bare durable commit
// from Go against the same server (a one-row INSERT in autocommit on a
// fresh table, see commitFloor): with the proxy's added p50 it is the
// floor, and the report gives Usher's added p50 as a ratio of the floor,
// its record stage as a ratio of the bare commit, and its calls/s and
// CPU per call at c=8 as ratios of the proxy's.
//
// With -against, a second usher binary runs beside the first in the same
// way (D), so that a change is measured against the revision before it
// on the same moments of the machine.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
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
	memProfile      string
	profileOf       string // the variant whose Usher -profile profiles; empty: A
	stateful        bool
	against         string
	againstVariant  string // the variant whose configuration -against's Usher gets; empty: none
	variants        []variant
	collector       string
	exportDelay     time.Duration // the traced variants' OTEL_BSP_SCHEDULE_DELAY; zero: the SDK's default
	keep            bool
	replicas        bool
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
	flag.StringVar(&o.memProfile, "memprofile", "", "write a profile of the heap allocations Usher makes during its first throughput phase to this file (through server.debug_addr)")
	flag.StringVar(&o.profileOf, "profile-of", "", "the variant whose Usher -profile profiles (sink or traced), in a c=8 phase of -duration of its own after the measured ones; empty: -usher's plain Usher, during its first c=8 phase")
	flag.BoolVar(&o.stateful, "stateful", false, "run Usher's MCP endpoint stateful (mcp.stateful, the default: each client's session recorded), not stateless")
	flag.StringVar(&o.against, "against", "", "a second usher binary to measure against -usher in the same run: its calls go in the same sequential rounds (D) and its c=8 phases alternate with -usher's (with no variants A B B A B A A B, each a quarter of -duration); the report adds its figures and -usher's less its, round by round")
	flag.StringVar(&o.againstVariant, "against-variant", "", "configure -against's Usher as this variant rather than plain, to measure a change to what the variant turns on against the variant of -usher in the same run: traced (with -variants traced; both Ushers' spans go to the one receiver, whose counts are then of both)")
	variantList := flag.String("variants", "sink,traced", "configurations of -usher measured beside the plain one in the same run, comma-separated: sink (an audit webhook sink delivering to a loopback receiver) and traced (tracing on, every trace sampled and exported over OTLP/HTTP to a loopback receiver) and stateful (the endpoint stateful, as by default, to measure it against the stateless one); empty: none")
	flag.StringVar(&o.collector, "collector", "bin/collector", "the receiver of the variants' spans and audit batches (bench/collector)")
	flag.DurationVar(&o.exportDelay, "export-delay", 0, "the traced Ushers' batch span processor delay (OTEL_BSP_SCHEDULE_DELAY), in whole milliseconds; 0: the SDK's default of 5 s, as an operator gets it. Each CPU reading of a traced Usher waits for its spans' export, so a shorter delay makes a run shorter")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configuration, logs, SQLite database)")
	flag.BoolVar(&o.replicas, "replicas", false, "instead: one stateful session through two replicas on one PostgreSQL against one replica, and a session's first call on a replica that has not seen it (see replicas.go); uses -pairs, -warmup, -method, -protocol")
	flag.Parse()
	if o.replicas {
		if err := runReplicas(context.Background(), o, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mcpbench:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if o.variants, err = parseVariants(*variantList); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(2)
	}
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
	if o.profileOf != "" && !slices.ContainsFunc(o.variants, func(v variant) bool { return v.key == o.profileOf }) {
		return fmt.Errorf("-profile-of %q is not one of -variants", o.profileOf)
	}
	if o.stateful && slices.ContainsFunc(o.variants, func(v variant) bool { return v.key == "stateful" }) {
		return errors.New("-variants stateful measures the stateful endpoint against the stateless one: not with -stateful")
	}
	againstSetup := func(*collectorRun) usherSetup { return usherSetup{env: baseEnv()} }
	if o.againstVariant != "" {
		vs, err := parseVariants(o.againstVariant)
		// Not sink: two sinks' records, each numbered from 1, would be
		// one count at the receiver.
		if err != nil || o.againstVariant != "traced" || o.against == "" || !slices.ContainsFunc(o.variants, func(v variant) bool { return v.key == o.againstVariant }) {
			return fmt.Errorf("-against-variant %q: only traced, with -against and -variants traced", o.againstVariant)
		}
		againstSetup = vs[0].setup
	}
	dir, cleanup, err := workDir("usher-mcpbench-", o.keep)
	if err != nil {
		return err
	}
	defer cleanup()
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
	var floor *commitFloor // the bare durable commit, on PostgreSQL
	if o.database != "" {
		r.engine = "PostgreSQL"
		if floor, err = openCommitFloor(ctx, o.database, o.dbVia); err != nil {
			return err
		}
		defer func() {
			if e := floor.close(context.Background()); err == nil {
				err = e
			}
		}()
	} else {
		r.engine = "SQLite"
	}
	// A, -usher's plain Usher; then each variant of it; then -against's.
	var coll *collectorRun
	if len(o.variants) > 0 {
		if coll, err = startCollector(o.collector, dir, o.exportDelay); err != nil {
			return err
		}
		defer func() {
			if e := coll.proc.Stop(); err == nil {
				err = e
			}
		}()
	}
	ua, err := startUsher(ctx, o, o.usher, dir, upURL, up.Pid(), usherSetup{env: baseEnv()})
	if err != nil {
		return err
	}
	defer func() {
		if e := ua.stop(); err == nil {
			err = e
		}
	}()
	ushers := []*usherRun{ua}
	for i := range o.variants {
		v := &o.variants[i]
		u, err := startUsher(ctx, o, o.usher, filepath.Join(dir, v.key), upURL, up.Pid(), v.setup(coll))
		if err != nil {
			return fmt.Errorf("%s: %w", v.key, err)
		}
		defer func() {
			if e := u.stop(); err == nil {
				err = e
			}
		}()
		u.variant, u.via.name = v, "through Usher with "+v.key
		ushers = append(ushers, u)
	}
	var ub *usherRun // -against's
	if o.against != "" {
		if ub, err = startUsher(ctx, o, o.against, filepath.Join(dir, "against"), upURL, up.Pid(), againstSetup(coll)); err != nil {
			return err
		}
		defer func() {
			if e := ub.stop(); err == nil {
				err = e
			}
		}()
		ub.via.name = "through -against's Usher"
		ushers = append(ushers, ub)
	}

	// Each reading of a traced Usher's CPU time waits for the export of
	// its calls' spans (see spanSettler).
	var settler *spanSettler
	for _, u := range ushers {
		if u.variant != nil && u.variant.spans || u == ub && o.againstVariant == "traced" {
			if settler == nil {
				settler = &spanSettler{coll: coll}
			}
			settler.paths = append(settler.paths, u.via)
			u.procs.settle = settler.settle
		}
	}

	keys := newKeySource()
	via := ua.via
	direct := &path{name: "direct", tool: "echo", method: o.method, endpoint: upURL, protocol: o.protocol}
	paths := []*path{direct}
	var passed *path // through the proxy
	if proxy != nil {
		passed = &path{name: "through the proxy", tool: "echo", method: o.method, endpoint: proxyURL, protocol: o.protocol}
		paths = append(paths, passed)
	}
	for _, u := range ushers {
		paths = append(paths, u.via)
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
	ua.procs = procs

	// Warm-up: connections, each Usher's upstream session and tool list.
	for range o.warmup {
		for _, p := range paths {
			if _, err := p.call(ctx, p.sessions[0], keys.next()); err != nil {
				return fmt.Errorf("warm-up %s: %w", p.name, err)
			}
		}
		if floor != nil {
			if err := floor.commit(ctx, false); err != nil {
				return err
			}
		}
	}

	// Sequential rounds: the Ushers' calls, the first followed by one
	// direct (B) and one through the proxy (C), and each round ends with
	// a bare commit (on PostgreSQL), so that the floor is measured on the
	// same moments of the machine. The Ushers' order changes round by
	// round, a block of the alternation at a time, so that each is first
	// as often as any other and none always follows the same one (whose
	// call may leave work running, such as its outcome's write):
	// A B C S T, T B C S A, S B C T A, A B C T S, T B C A S, S B C A T, ...
	befores := make([]usherSample, len(ushers))
	for i, u := range ushers {
		if befores[i], err = u.sample(ctx, u.procs); err != nil {
			return err
		}
	}
	sides := make([][]time.Duration, len(ushers))
	var bSide, cSide []time.Duration
	one := func(p *path, to *[]time.Duration) error {
		d, err := p.call(ctx, p.sessions[0], keys.next())
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		*to = append(*to, d)
		if o.gap > 0 {
			time.Sleep(o.gap)
		}
		return nil
	}
	orders := alternation(len(ushers))
	for round := range o.pairs {
		order := roundOrder(orders, len(ushers), round)
		for slot, i := range order {
			if err := one(ushers[i].via, &sides[i]); err != nil {
				return err
			}
			if slot > 0 {
				continue
			}
			if err := one(direct, &bSide); err != nil {
				return err
			}
			if passed != nil {
				if err := one(passed, &cSide); err != nil {
					return err
				}
			}
		}
		if floor != nil {
			if err := floor.commit(ctx, true); err != nil {
				return err
			}
		}
	}
	r.seq = summarisePairs(sides[0], bSide)
	if floor != nil {
		r.floor = floor.result()
	}
	if passed != nil {
		r.proxy = true
		r.seqProxy = summarisePairs(cSide, bSide)
		r.usherOverProxy = median(pairedDiffs(sides[0], cSide))
	}
	others := make([]*sideResult, len(ushers))
	for i, u := range ushers {
		after, err := u.sample(ctx, u.procs)
		if err != nil {
			return err
		}
		if i == 0 {
			r.seqCPU, r.seqMemory, r.seqStages = after.since(befores[0], o.pairs)
			continue
		}
		s := &sideResult{key: "against", bin: o.against, title: o.againstVariant}
		if u.variant != nil {
			s.key, s.title, s.bin = u.variant.key, u.variant.title, o.usher
		}
		s.seq = summarisePairs(sides[i], bSide)
		d := pairedDiffs(sides[i], sides[0])
		s.xLessA, s.xFaster = median(d), shareLower(sides[i], sides[0])
		s.ciLo, s.ciHi = medianCI(d)
		s.seqCPU, s.seqMemory, s.seqStages = after.since(befores[i], o.pairs)
		others[i] = s
	}

	// Throughput: each path alone, with o.concurrency clients; with more
	// than one Usher, their phases alternate (see alternation), so that a
	// drift of the machine falls on each alike.
	var profile chan error
	if o.profile != "" && o.profileOf == "" {
		profile = make(chan error, 1)
		d := o.duration
		if len(ushers) > 1 {
			d = alternationPart(d, len(ushers)) // the first phase through A
		}
		go func() { profile <- takeProfile(ctx, ua.debugAddr, "profile", d, o.profile) }()
	}
	var memProfile chan error
	if o.memProfile != "" {
		memProfile = make(chan error, 1)
		d := o.duration
		if len(ushers) > 1 {
			d = alternationPart(d, len(ushers))
		}
		go func() { memProfile <- takeProfile(ctx, ua.debugAddr, "allocs", d, o.memProfile) }()
	}
	c8Before := make([]stageSample, len(ushers))
	for i, u := range ushers {
		if c8Before[i], err = sampleStages(ctx, u.url); err != nil {
			return err
		}
	}
	if len(ushers) == 1 {
		if r.c8Usher, err = throughput(ctx, via, o.duration, keys, procs); err != nil {
			return err
		}
	} else {
		joined, parts, err := alternate(ctx, ushers, o.duration, keys)
		if err != nil {
			return err
		}
		r.c8Usher = joined[0]
		for i, s := range others[1:] {
			s.c8, s.c8CPURatios = joined[i+1], cpuRatios(parts[i+1], parts[0])
		}
	}
	for i, u := range ushers {
		after, err := sampleStages(ctx, u.url)
		if err != nil {
			return err
		}
		if i == 0 {
			r.c8Stages = after.since(c8Before[0])
		} else {
			others[i].c8Stages = after.since(c8Before[i])
		}
	}
	if profile != nil {
		if err := <-profile; err != nil {
			return fmt.Errorf("CPU profile: %w", err)
		}
		r.profile, r.profileOf = o.profile, "A"
	}
	if memProfile != nil {
		if err := <-memProfile; err != nil {
			return fmt.Errorf("allocation profile: %w", err)
		}
	}
	if o.profile != "" && o.profileOf != "" {
		if err := profileVariant(ctx, o, ushers, keys); err != nil {
			return err
		}
		r.profile, r.profileOf = o.profile, o.profileOf
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

	// What was measured is what Usher must do: every call through each
	// Usher left its records (the decision and how it ended) in an intact
	// chain, and each variant's receiver got what it must have.
	if r.auditRecords, err = ua.verifyAudit(ctx, o.usher); err != nil {
		return err
	}
	r.usherCalls = via.calls.Load()
	for i, u := range ushers[1:] {
		s, bin := others[i+1], o.usher
		if u == ub {
			bin = o.against
		}
		if s.auditRecords, err = u.verifyAudit(ctx, bin); err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
		s.usherCalls = u.via.calls.Load()
		if u.variant != nil {
			calls := s.usherCalls
			if ub != nil && o.againstVariant == u.variant.key {
				calls += ub.via.calls.Load() // its spans reach the same receiver
			}
			if s.note, err = u.variant.check(ctx, coll, u, s.auditRecords, calls); err != nil {
				return fmt.Errorf("%s: %w", s.key, err)
			}
			if u.variant.spans {
				s.note += "\n  " + settler.String()
			}
			r.variants = append(r.variants, s)
		} else {
			r.against = s
		}
	}
	r.loadEnd = child.LoadAverage()
	r.print(out)
	return nil
}

// writeConfig writes Usher's configuration for the run: the upstream, the
// benchmark's policy (echo allowed unattended), the database, and the
// debug listener (on loopback), which the run reads Usher's memory
// statistics from and takes a profile through; the endpoint stateful when
// stateful is set; audit is its audit section (YAML), if any.
func writeConfig(dir, upstreamURL string, db *benchDatabase, stateful bool, audit string) (string, error) {
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
%s`, filepath.Join(dir, "data"), database, stateful, upstreamURL, policyFile, filepath.Join(dir, "tools.lock"), audit)
	cfg := filepath.Join(dir, "usher.yaml")
	return cfg, os.WriteFile(cfg, []byte(yaml), 0o600)
}

// takeProfile fetches a profile of Usher of the kind ("profile" for CPU,
// "allocs" for the heap allocations) for most of d from its debug
// listener and writes it to file.
func takeProfile(ctx context.Context, addr, kind string, d time.Duration, file string) error {
	secs := max(int((d-time.Second)/time.Second), 1)
	resp, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, secs))
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

// profileVariant takes o.profile of the Usher of variant o.profileOf over
// a c=8 phase of its own, not counted in the figures.
func profileVariant(ctx context.Context, o options, ushers []*usherRun, keys *keySource) error {
	for _, u := range ushers {
		if u.variant == nil || u.variant.key != o.profileOf {
			continue
		}
		done := make(chan error, 1)
		go func() { done <- takeProfile(ctx, u.debugAddr, "profile", o.duration, o.profile) }()
		_, err := throughput(ctx, u.via, o.duration, keys, u.procs)
		if e := <-done; err == nil && e != nil {
			err = fmt.Errorf("CPU profile: %w", e)
		}
		return err
	}
	return fmt.Errorf("-profile-of %q: no such Usher", o.profileOf)
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

// workDir makes the run's work directory, and the function that removes
// it at the end, unless keep (then it is named on stderr and stays).
func workDir(prefix string, keep bool) (string, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintf(os.Stderr, "work directory: %s\n", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

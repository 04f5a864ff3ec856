package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usherhq/usher/bench/child"
)

// With -replicas, the benchmark measures what serving one stateful
// session from two replicas costs against serving it from one, in the
// same run: two `usher serve` processes on one PostgreSQL schema (the
// same configuration, so the same key for session handles), behind a
// balancer in this process that forwards each request over loopback:
//
//   - /alt/ sends each request to the other replica than the one before
//     (no affinity), /one/ sends every request to the first: tools/call in
//     sequential rounds, alt, one, direct, with the order of alt and one
//     changing each round; Usher's added p50 (over the direct call to the
//     upstream) through two replicas against one, as a ratio.
//   - /split/ sends a session's handshake and notifications to the first
//     replica and its requests to the second, so that a new session's
//     first tools/call reaches a replica that has not seen it and
//     restores it from its record; against a new session whose call goes
//     to the first replica, which holds it. Each round opens one session
//     of each; the first call's p50 overhead is the median of the
//     per-round differences.
//
// Both sides pass through the same balancer, so its hop cancels out.

// replicaBalancer is the balancer: its three routes, over two replicas.
// It reads a request's body whole before it forwards the request, as nginx
// does by default: Go's HTTP/1 server closes a request's body once its
// handler begins the response, and the proxy's transport reads the body
// once more after the declared length, to check that it ends there. A
// replica that had answered before that read (a response stream's
// headers) made it fail, and the transport closed its connection to the
// replica, cutting the stream (golang/go#40747).
type replicaBalancer struct {
	one, two *httputil.ReverseProxy
	next     atomic.Uint64
	srv      *http.Server
	url      string
}

// newReplicaBalancer listens on loopback; route gives it its replicas
// before it is used.
func newReplicaBalancer() (*replicaBalancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &replicaBalancer{url: "http://" + ln.Addr().String()}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

// route sets the two replicas' URLs.
func (b *replicaBalancer) route(oneURL, twoURL string) error {
	proxy := func(raw string) (*httputil.ReverseProxy, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		return &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = u.Host },
			FlushInterval: -1, Transport: http.DefaultTransport.(*http.Transport).Clone()}, nil
	}
	var err error
	if b.one, err = proxy(oneURL); err != nil {
		return err
	}
	b.two, err = proxy(twoURL)
	return err
}

// ServeHTTP routes a request by its path's first segment (see above),
// once its body is read (see replicaBalancer).
func (b *replicaBalancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	route, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if route == "alt" || route == "one" || route == "split" {
		r.URL.Path = "/" + rest
	}
	target := b.one
	switch route {
	case "alt":
		if b.next.Add(1)%2 == 0 {
			target = b.two
		}
	case "split":
		if r.Header.Get("Mcp-Session-Id") != "" && bytes.Contains(body, []byte(`"id"`)) && !bytes.Contains(body, []byte(`"result"`)) {
			target = b.two
		}
	}
	target.ServeHTTP(w, r)
}

func (b *replicaBalancer) close() error { return b.srv.Close() }

// replicasResult is what -replicas measured.
type replicasResult struct {
	alt, one         pairedResult // tools/call against the direct call
	altLessOne       time.Duration
	ciLo, ciHi       time.Duration
	firstTwo         time.Duration // p50 of a session's first call on the replica that has not seen it
	firstOne         time.Duration // p50 of a session's first call on the replica that holds it
	firstLess        time.Duration // the median per-round difference
	firstLo, firstHi time.Duration // its 95 % confidence interval
	firstRounds      int
}

// runReplicas runs the -replicas benchmark.
func runReplicas(ctx context.Context, o options, out io.Writer) (err error) {
	if o.database == "" {
		return errors.New("-replicas needs a PostgreSQL server (-database or TEST_DATABASE_URL): two processes share it")
	}
	o.stateful = true
	dir, cleanup, err := workDir("usher-mcpbench-replicas-", o.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	// Both replicas' public URL is the balancer's: the audience of the
	// broker token either accepts.
	lb, err := newReplicaBalancer()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, lb.close()) }()
	if err := os.Setenv("USHER_SERVER_PUBLIC_URL", lb.url); err != nil {
		return err
	}
	// Each replica on a port of its own, chosen here, so that the
	// balancer routes before they start (usher token mcp reaches the
	// server through it).
	addrs := make([]string, 2)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	if err := lb.route("http://"+addrs[0], "http://"+addrs[1]); err != nil {
		return err
	}
	up, upURL, err := child.Start("upstream", filepath.Join(dir, "upstream.log"), o.upstream, upstreamReady)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, up.Stop()) }()
	ua, err := startUsher(ctx, o, o.usher, filepath.Join(dir, "one"), upURL, up.Pid(), usherSetup{env: baseEnv(), addr: addrs[0]})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ua.stop()) }()
	two, _, err := child.StartEnv("usher-two", filepath.Join(dir, "two.log"), o.usher, baseEnv(), child.UsherReady,
		"serve", "--config", ua.cfg, "--addr", addrs[1])
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, two.Stop()) }()

	through := func(name, route string) *path {
		v := ua.via
		return &path{name: name, tool: v.tool, method: v.method, endpoint: lb.url + "/" + route + "/mcp",
			token: v.token, protocol: v.protocol, idempotencyKey: v.idempotencyKey}
	}
	alt, one := through("two replicas, alternating", "alt"), through("one replica", "one")
	direct := &path{name: "direct", tool: "echo", method: o.method, endpoint: upURL, protocol: o.protocol}
	for _, p := range []*path{alt, one, direct} {
		if err := p.connect(ctx, 1); err != nil {
			return err
		}
		defer p.close()
	}
	keys := newKeySource()
	for range o.warmup {
		for _, p := range []*path{alt, one, direct} {
			if _, err := p.call(ctx, p.sessions[0], keys.next()); err != nil {
				return fmt.Errorf("warm-up %s: %w", p.name, err)
			}
		}
	}
	var altSide, oneSide, directSide []time.Duration
	for round := range o.pairs {
		order := []*path{alt, one}
		if round%2 == 1 {
			order = []*path{one, alt}
		}
		for _, p := range append(order, direct) {
			d, err := p.call(ctx, p.sessions[0], keys.next())
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			switch p {
			case alt:
				altSide = append(altSide, d)
			case one:
				oneSide = append(oneSide, d)
			default:
				directSide = append(directSide, d)
			}
		}
	}
	var r replicasResult
	r.alt, r.one = summarisePairs(altSide, directSide), summarisePairs(oneSide, directSide)
	diffs := pairedDiffs(altSide, oneSide)
	r.altLessOne = median(diffs)
	r.ciLo, r.ciHi = medianCI(diffs)

	// A session's first call, on a replica that has not seen it and on
	// the one that holds it, a new session of each per round.
	split, held := through("first call on the other replica", "split"), through("first call on the same replica", "one")
	r.firstRounds = max(o.pairs/4, 1)
	var twoSide, heldSide []time.Duration
	for round := range r.firstRounds {
		order := []*path{split, held}
		if round%2 == 1 {
			order = []*path{held, split}
		}
		for _, p := range order {
			if err := p.connect(ctx, 1); err != nil {
				return err
			}
			d, err := p.call(ctx, p.sessions[0], keys.next())
			p.close()
			p.sessions = nil
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if p == split {
				twoSide = append(twoSide, d)
			} else {
				heldSide = append(heldSide, d)
			}
		}
	}
	r.firstTwo, r.firstOne = median(twoSide), median(heldSide)
	fd := pairedDiffs(twoSide, heldSide)
	r.firstLess = median(fd)
	r.firstLo, r.firstHi = medianCI(fd)
	r.print(out, o)
	return nil
}

func (r replicasResult) print(w io.Writer, o options) {
	fmt.Fprintf(w, "mcpbench -replicas: %s, stateful sessions, PostgreSQL, protocol %s, %d sequential rounds (alt, one, direct)\n", o.method, o.protocol, r.alt.Pairs)
	fmt.Fprintf(w, "  through one replica:             p50 %s ms, added p50 %s ms (direct p50 %s ms)\n", msf(r.one.GatewayP50), msf(r.one.AddedP50), msf(r.one.DirectP50))
	fmt.Fprintf(w, "  through two replicas, alternating: p50 %s ms, added p50 %s ms\n", msf(r.alt.GatewayP50), msf(r.alt.AddedP50))
	fmt.Fprintf(w, "  added p50, two replicas / one:   %.2fx (goal <= 1.10x); per round two - one: median %s ms, 95 %% CI %s to %s ms\n",
		ratio(r.alt.AddedP50, r.one.AddedP50), signed(r.altLessOne), signed(r.ciLo), signed(r.ciHi))
	fmt.Fprintf(w, "  a session's first call, %d rounds: on a replica that has not seen it p50 %s ms, on the one that holds it p50 %s ms\n",
		r.firstRounds, msf(r.firstTwo), msf(r.firstOne))
	fmt.Fprintf(w, "  its overhead: median per round %s ms (goal <= 1 ms), 95 %% CI %s to %s ms; p50 ratio %.2fx\n",
		signed(r.firstLess), signed(r.firstLo), signed(r.firstHi), ratio(r.firstTwo, r.firstOne))
}

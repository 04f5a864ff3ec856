package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// path is one way to the echo tool, through Usher or directly, with the
// client sessions that call it, one per concurrent client.
type path struct {
	name, tool string
	// method is what each call is: "tools/call" of tool, "resources/read"
	// of tool + "://" + the text, or "prompts/get" of the prompt tool.
	method   string
	endpoint string
	token    string // a broker token, through Usher
	protocol string
	// idempotencyKey sends the call's text as _meta["usher/idempotency_key"]
	// too, so that Usher keeps an execution record of the call.
	idempotencyKey bool
	sessions       []*mcp.ClientSession
	calls          atomic.Int64 // calls answered as expected
}

// connect opens n client sessions (initialize, and the initialized
// notification), each with its own HTTP client as separate MCP clients
// have. Both paths use this one setup.
func (p *path) connect(ctx context.Context, n int) error {
	for range n {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		client := mcp.NewClient(&mcp.Implementation{Name: "usher-mcpbench", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:             p.endpoint,
			HTTPClient:           &http.Client{Transport: &bearer{base: tr, token: p.token}},
			DisableStandaloneSSE: true,
			MaxRetries:           -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: p.protocol})
		if err != nil {
			return fmt.Errorf("connect %s (%s): %w", p.name, p.endpoint, err)
		}
		p.sessions = append(p.sessions, cs)
	}
	return nil
}

func (p *path) close() {
	for _, cs := range p.sessions {
		cs.Close()
	}
}

// call makes one call of the echo tool on cs, checks its result and
// returns how long it took.
func (p *path) call(ctx context.Context, cs *mcp.ClientSession, key string) (time.Duration, error) {
	switch p.method {
	case "resources/read", "prompts/get":
		return p.read(ctx, cs, key)
	}
	params := &mcp.CallToolParams{Name: p.tool, Arguments: map[string]any{"text": key}}
	if p.idempotencyKey {
		params.Meta = mcp.Meta{"usher/idempotency_key": key}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, params)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	text, _ := func() (*mcp.TextContent, bool) {
		if len(res.Content) != 1 {
			return nil, false
		}
		t, ok := res.Content[0].(*mcp.TextContent)
		return t, ok
	}()
	if res.IsError || text == nil || text.Text != "echo: "+key {
		b, _ := json.Marshal(res)
		return 0, fmt.Errorf("unexpected result %s", b)
	}
	p.calls.Add(1)
	return d, nil
}

// read reads the echo resource, or gets the echo prompt, for key on cs,
// checks what came back and returns how long it took.
func (p *path) read(ctx context.Context, cs *mcp.ClientSession, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	var text string
	if p.method == "resources/read" {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: p.tool + "://" + key})
		if err != nil {
			return 0, err
		}
		if len(res.Contents) == 1 {
			text = res.Contents[0].Text
		}
	} else {
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: p.tool, Arguments: map[string]string{"text": key}})
		if err != nil {
			return 0, err
		}
		if len(res.Messages) == 1 {
			if t, ok := res.Messages[0].Content.(*mcp.TextContent); ok {
				text = t.Text
			}
		}
	}
	d := time.Since(start)
	if text != "echo: "+key {
		return 0, fmt.Errorf("unexpected %s answer %q", p.method, text)
	}
	p.calls.Add(1)
	return d, nil
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

// keySource hands out the calls' texts, unique to the run; through Usher
// they are also the idempotency keys, when those are sent.
type keySource struct {
	prefix string
	n      atomic.Int64
}

func newKeySource() *keySource { return &keySource{prefix: "bench-" + rand.Text()[:12]} }

func (k *keySource) next() string { return fmt.Sprintf("%s-%d", k.prefix, k.n.Add(1)) }

// phase is what a throughput phase measured.
type phase struct {
	calls    int
	elapsed  time.Duration
	lat      []time.Duration // each call's
	p50, p99 time.Duration
	cpu      cpuPerCall
}

// throughput calls p with all its sessions at once, each in a loop, for d,
// and returns the calls/s, latencies and CPU per call.
func throughput(ctx context.Context, p *path, d time.Duration, keys *keySource, procs processes) (phase, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		first error
	)
	before, err := procs.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	start := time.Now()
	deadline := start.Add(d)
	for _, cs := range p.sessions {
		wg.Go(func() {
			var mine []time.Duration
			var err error
			for time.Now().Before(deadline) {
				var l time.Duration
				if l, err = p.call(ctx, cs, keys.next()); err != nil {
					break
				}
				mine = append(mine, l)
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %w", p.name, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return phase{}, first
	}
	after, err := procs.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	return phase{
		calls: len(lat), elapsed: elapsed, lat: lat, p50: median(lat), p99: percentile(lat, 0.99),
		cpu: after.since(before, len(lat)),
	}, nil
}

// processes are the processes whose CPU time is measured.
type processes struct {
	usher, upstream int
	proxy           int            // 0 without the proxy
	db              *benchDatabase // nil on SQLite
	// settle, when set, is waited for before each reading: the work the
	// calls left behind (a traced Usher's spans, queued for export) done,
	// so that the reading counts it.
	settle func(context.Context) error
}

// cpuSample is the CPU time each process had used at one moment.
type cpuSample struct {
	usher, upstream, client time.Duration
	proxy                   time.Duration
	pg                      map[int]time.Duration // by backend pid; nil if not measured
	pgWhyNot                string
}

// sample reads each process's CPU time, after p.settle. Usher's and the
// upstream's must be read; PostgreSQL's backends are measured when they
// can be.
func (p processes) sample(ctx context.Context) (cpuSample, error) {
	var s cpuSample
	if p.settle != nil {
		if err := p.settle(ctx); err != nil {
			return s, err
		}
	}
	var err1, err2 error
	s.usher, err1 = procCPU(p.usher)
	s.upstream, err2 = procCPU(p.upstream)
	var err3 error
	if p.proxy != 0 {
		s.proxy, err3 = procCPU(p.proxy)
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		return s, fmt.Errorf("CPU time: %w", err)
	}
	s.client = selfCPU()
	if p.db == nil {
		s.pgWhyNot = "SQLite, in Usher's process"
	} else if pg, err := p.db.backendCPU(ctx); err != nil {
		s.pgWhyNot = err.Error()
	} else {
		s.pg = pg
	}
	return s, nil
}

// cpuPerCall is the CPU time per call of each process over a phase.
type cpuPerCall struct {
	usher, upstream, client time.Duration
	proxy                   time.Duration
	pg                      time.Duration
	pgMeasured              bool
	pgNote                  string // why PostgreSQL is not measured, or what it misses
}

// since returns the CPU each process used per call from before to s.
// PostgreSQL's is the sum over Usher's backends: those opened in between
// count from zero; those closed in between are missing, which pgNote
// says.
func (s cpuSample) since(before cpuSample, calls int) cpuPerCall {
	n := time.Duration(max(calls, 1))
	c := cpuPerCall{
		usher: (s.usher - before.usher) / n, upstream: (s.upstream - before.upstream) / n,
		client: (s.client - before.client) / n, proxy: (s.proxy - before.proxy) / n,
	}
	switch {
	case before.pg == nil:
		c.pgNote = before.pgWhyNot
	case s.pg == nil:
		c.pgNote = s.pgWhyNot
	default:
		var sum time.Duration
		for pid, t := range s.pg {
			sum += t - before.pg[pid]
		}
		closed := 0
		for pid := range before.pg {
			if _, ok := s.pg[pid]; !ok {
				closed++
			}
		}
		if closed > 0 {
			c.pgNote = fmt.Sprintf("%d of Usher's backends closed during the phase: their CPU is missing", closed)
		}
		c.pg, c.pgMeasured = sum/n, true
	}
	return c
}

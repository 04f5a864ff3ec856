package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/apitest"
)

// TestMetricsOnThePublicListenerByDefault checks that without
// server.metrics_addr the public listener serves /metrics, with the
// backlog read from the database, and that a turn's model request is
// counted there.
func TestMetricsOnThePublicListenerByDefault(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	code, body := get(t, s.url+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"usher_build_info", "usher_runs_queued 0", "usher_approvals_pending 0", "usher_mcp_outcome_unknown_total{source=\"call\"} 0",
		`usher_model_requests_total{model="demo",outcome="ok",purpose="turn"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	alice := userToken(t, s, "alice")
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs?wait=30s", alice, `{"message":"hello there"}`); code != 201 {
		t.Fatalf("a run with an opening message = %d %v", code, body)
	}
	series := `usher_model_requests_total{model="demo",outcome="ok",purpose="turn"} `
	body2 := awaitMetric(t, s.url+"/metrics", series+"1")
	for _, want := range []string{`usher_model_tokens_total{model="demo",purpose="turn",type="output"} `, `usher_model_time_to_first_token_seconds_count{model="demo"} 1`} {
		line := grepLines(body2, want)
		if line == "" || strings.HasSuffix(strings.TrimSpace(line), " 0") {
			t.Errorf("after one turn /metrics has %q for %q, want a count", strings.TrimSpace(line), want)
		}
	}
}

// restartable is an upstream MCP server (the Go SDK's) on a loopback
// address of its own that can be stopped and started again there.
type restartable struct {
	t    *testing.T
	addr string
	h    http.Handler
	srv  *http.Server
	done chan struct{}
}

func newRestartable(t *testing.T) *restartable {
	up := mcp.NewServer(&mcp.Implementation{Name: "health", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "ping", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil
		})
	r := &restartable{t: t, addr: "127.0.0.1:0",
		h: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true})}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.srv, r.done = &http.Server{Handler: r.h}, make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed
	}(r.srv, r.done)
}

func (r *restartable) stop() {
	if r.srv != nil {
		r.srv.Close()
		<-r.done
		r.srv = nil
	}
}

// TestMetricsOnTheirOwnListener starts usher serve with
// server.metrics_addr, an upstream checked every second and an audit
// sink: /metrics is served there and not on the public listener; every
// metric the dashboard and the alert rules in deploy/monitoring use is
// there; an upstream stopped is reported down by the next checks, and up
// once started again.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	up := newRestartable(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "usher.yaml")
	if err := writeTestFile(cfg, fmt.Sprintf("mcp:\n  upstreams:\n    - name: pinger\n      url: %q\naudit:\n  sinks:\n    - name: siem\n      file:\n        path: %q\n",
		"http://"+up.addr+"/mcp", filepath.Join(dir, "audit.jsonl"))); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, map[string]string{"USHER_SERVER_METRICS_ADDR": "127.0.0.1:0", "USHER_MCP_UPSTREAM_CHECK_INTERVAL": "1s"}, "--config", cfg)
	m := regexp.MustCompile(`msg="metrics listener" listen=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no metrics listener in the log:\n%s", s.stderr)
	}
	metrics := "http://" + m[1] + "/metrics"
	if code, _ := get(t, s.url+"/metrics", ""); code != 404 {
		t.Errorf("the public listener serves /metrics: %d, want 404", code)
	}
	if code, _ := get(t, "http://"+m[1]+"/healthz", ""); code != 404 {
		t.Errorf("the metrics listener serves /healthz: %d, want 404", code)
	}

	upSeries := `usher_upstream_up{upstream="pinger"} `
	body := awaitMetric(t, metrics, upSeries+"1")
	t.Run("every metric the dashboard and the rules use", func(t *testing.T) {
		have := exposedNames(body)
		for _, f := range []string{"usher-alerts.yaml", "usher-dashboard.json"} {
			used := usedNames(t, filepath.Join("..", "..", "deploy", "monitoring", f))
			if len(used) == 0 {
				t.Errorf("%s uses no usher metric", f)
			}
			for _, name := range used {
				if !have[name] {
					t.Errorf("%s uses %s, which usher serve does not expose", f, name)
				}
			}
		}
	})
	up.stop()
	awaitMetric(t, metrics, upSeries+"0")
	up.start()
	awaitMetric(t, metrics, upSeries+"1")
}

// awaitMetric scrapes url until a line of it begins with series (a name,
// its labels and a value), across the process boundary of the checks'
// own schedule, and returns that scrape.
func awaitMetric(t *testing.T, url, series string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, url, "")
		if code != 200 {
			t.Fatalf("%s = %d", url, code)
		}
		for line := range strings.Lines(string(body)) {
			if strings.TrimSpace(line) == series {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %s within 30s:\n%s", series, url, grepLines(string(body), "usher_upstream_up"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// exposedNames are the names of the series of an exposition: each
// family's, and a histogram's _bucket, _sum and _count.
func exposedNames(exposition string) map[string]bool {
	have := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			have[f[2]] = true
			if f[3] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					have[f[2]+s] = true
				}
			}
		}
	}
	return have
}

// metricName is how an Usher metric is named in a query.
var metricName = regexp.MustCompile(`\busher_[a-z0-9_]*[a-z0-9]\b`)

// usedNames are the Usher metrics a file's queries name.
func usedNames(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range metricName.FindAll(b, -1) {
		if s := string(n); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store/storetest"
)

// stoppable is an upstream MCP server (the Go SDK's, over streamable HTTP)
// on a fixed loopback address that can be stopped and started again.
type stoppable struct {
	t    *testing.T
	addr string
	h    http.Handler
	srv  *http.Server
	done chan struct{}
}

func newStoppable(t *testing.T, server *mcp.Server) *stoppable {
	t.Helper()
	s := &stoppable{t: t, addr: "127.0.0.1:0",
		h: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *stoppable) url() string { return "http://" + s.addr + "/mcp" }

// start listens on the address it listened on before (the first time, on
// a port the system chooses) and serves.
func (s *stoppable) start() {
	s.t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.srv, s.done = &http.Server{Handler: s.h}, make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed
	}(s.srv, s.done)
}

// stop closes the listener and every connection.
func (s *stoppable) stop() {
	if s.srv == nil {
		return
	}
	s.srv.Close()
	<-s.done
	s.srv = nil
}

// upstreamServer is an SDK server with the tools echo and extra.
func upstreamServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "health-fixture", Version: "1"}, nil)
	for _, name := range []string{"echo", "extra", "fail"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: name == "fail", Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	return srv
}

// gauge returns the value of the gauge name with labels from reg, or -1
// when it has no such series.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := metricOf(t, reg, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func metricOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// TestHealthSaysDownAtTheCheckAfterAnUpstreamStopsAndUpAfterItStarts
// stops an upstream: the first check after it says down, in the state and
// in usher_upstream_up, keeping the time of the last successful listing;
// started again, the next check says up. The tools are compared with the
// lock: one added, one changed, one removed.
func TestHealthSaysDownAtTheCheckAfterAnUpstreamStopsAndUpAfterItStarts(t *testing.T) {
	t.Parallel()
	up := newStoppable(t, upstreamServer())
	st := storetest.NewSQLite(t)
	cat, err := NewCatalog(&CatalogOptions{
		DefinitionHash: testDefinitionHash, Runs: st, Approvals: st,
		Upstreams: []Upstream{{Name: "fx", URL: up.url()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	defs, err := cat.Definitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lock := &policy.Lock{Tools: map[string]string{"fx__gone": "sha256:00", "sessions_list": "sha256:11"}}
	for _, d := range defs {
		switch d.Name {
		case "fx__echo", "fx__fail":
			lock.Tools[d.Name] = d.Hash
		case "fx__extra": // not in the lock: added
		}
	}
	lock.Tools["fx__fail"] = "sha256:22" // changed
	reg := prometheus.NewRegistry()
	h, err := NewHealth(cat, &HealthOptions{Interval: time.Hour, Lock: lock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"upstream": "fx"}

	h.check(t.Context())
	s := h.States()
	if len(s) != 1 || !s[0].Up || s[0].Name != "fx" || s[0].Tools != 3 || s[0].Listed.IsZero() || s[0].Error != "" {
		t.Fatalf("states = %+v, want fx up with 3 tools", s)
	}
	if s[0].Added != 1 || s[0].Changed != 1 || s[0].Removed != 1 {
		t.Errorf("changes = %+v, want 1 added, 1 changed, 1 removed", s[0])
	}
	if v := gauge(t, reg, "usher_upstream_up", labels); v != 1 {
		t.Errorf("usher_upstream_up = %v, want 1", v)
	}
	for change, want := range map[string]float64{"added": 1, "changed": 1, "removed": 1} {
		if v := gauge(t, reg, "usher_upstream_tools_changed", map[string]string{"upstream": "fx", "change": change}); v != want {
			t.Errorf("usher_upstream_tools_changed{change=%q} = %v, want %v", change, v, want)
		}
	}
	listedAt := gauge(t, reg, "usher_upstream_last_list_timestamp_seconds", labels)
	if listedAt != float64(s[0].Listed.UnixNano())/1e9 {
		t.Errorf("usher_upstream_last_list_timestamp_seconds = %v, want %v", listedAt, s[0].Listed)
	}

	up.stop()
	h.check(t.Context())
	down := h.States()[0]
	if down.Up || down.Error == "" || !down.Listed.Equal(s[0].Listed) || !down.Checked.After(s[0].Checked) {
		t.Errorf("after the stop: %+v, want down with the last listing kept", down)
	}
	if v := gauge(t, reg, "usher_upstream_up", labels); v != 0 {
		t.Errorf("usher_upstream_up = %v after the stop, want 0", v)
	}
	if v := gauge(t, reg, "usher_upstream_last_list_timestamp_seconds", labels); v != listedAt {
		t.Errorf("the last listing moved to %v while down", v)
	}

	up.start()
	h.check(t.Context())
	if again := h.States()[0]; !again.Up || !again.Listed.After(s[0].Listed) {
		t.Errorf("after the start: %+v, want up, listed again", again)
	}
	if v := gauge(t, reg, "usher_upstream_up", labels); v != 1 {
		t.Errorf("usher_upstream_up = %v after the start, want 1", v)
	}
}

// TestUpstreamCallErrorsByKind calls upstream tools through the endpoint:
// a tool error counts as upstream_error, a call to a stopped upstream as
// not_sent, and every call sent is timed.
func TestUpstreamCallErrorsByKind(t *testing.T) {
	t.Parallel()
	up := newStoppable(t, upstreamServer())
	reg := prometheus.NewRegistry()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow, "fx__fail": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url()}},
		catalog: func(o *CatalogOptions) {
			o.Registerer, o.HTTPClient = reg, &http.Client{Transport: transport}
		},
	})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "fx__echo", map[string]any{}, nil); res.IsError {
		t.Fatalf("echo: %s", text(res))
	}
	if res := call(t, cs, "fx__fail", map[string]any{}, nil); !res.IsError {
		t.Fatalf("fail: %s", text(res))
	}
	kind := func(k string) float64 {
		return gauge(t, reg, "usher_upstream_call_errors_total", map[string]string{"upstream": "fx", "kind": k})
	}
	if v := kind(CallUpstreamError); v != 1 {
		t.Errorf("upstream_error = %v, want 1", v)
	}
	if v := gauge(t, reg, "usher_upstream_call_duration_seconds", map[string]string{"upstream": "fx"}); v != 2 {
		t.Errorf("calls timed = %v, want 2", v)
	}
	up.stop()
	// A kept-alive connection the client has not yet seen closed would
	// carry the request out and lose it: that is the kind lost.
	transport.CloseIdleConnections()
	if res := call(t, cs, "fx__echo", map[string]any{}, nil); !res.IsError {
		t.Fatalf("echo on a stopped upstream: %s", text(res))
	}
	if v := kind(CallNotSent); v != 1 {
		t.Errorf("not_sent = %v, want 1", v)
	}
	for _, k := range []string{CallBusy, CallRefused, CallTimeout, CallCancelled, CallLost} {
		if v := kind(k); v != 0 {
			t.Errorf("%s = %v, want 0", k, v)
		}
	}
}

// TestCallKind classifies the failures of a call.
func TestCallKind(t *testing.T) {
	t.Parallel()
	live := context.Background()
	timedOut, cancel := context.WithTimeout(live, 0)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(live)
	cancel2()
	transport := func(err error) error {
		return errors.Join(&jsonrpc.Error{Code: codeRejectedByTransport, Message: "rejected by transport"}, err)
	}
	for name, tc := range map[string]struct {
		ctx  context.Context
		err  error
		want string
	}{
		"refused":   {live, &jsonrpc.Error{Code: -32602, Message: "invalid params"}, CallRefused},
		"not sent":  {live, transport(&net.OpError{Op: "dial", Err: errors.New("refused")}), CallNotSent},
		"lost":      {live, transport(&net.OpError{Op: "read", Err: errors.New("reset")}), CallLost},
		"timeout":   {timedOut, transport(context.DeadlineExceeded), CallTimeout},
		"cancelled": {cancelled, transport(context.Canceled), CallCancelled},
	} {
		if got := callKind(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}

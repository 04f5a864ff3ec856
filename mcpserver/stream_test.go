package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
)

// TestUpstreamStreamEndsWithoutAnswer checks what a caller is told, and
// what the audit says, when an upstream takes a tools/call, runs it, and
// closes its response stream without the answer and without an event id
// to resume it from: the outcome is unknown (the call may have run), for
// that reason, told apart from a lost connection; a retry of the same key
// does not run it again.
func TestUpstreamStreamEndsWithoutAnswer(t *testing.T) {
	t.Parallel()
	up, runs := chargeServer("closer")
	up.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://doc", Text: "doc"}}}, nil
	})
	ts := interceptedUpstream(t, up, []string{"tools/call", "resources/read"}, func(sdk http.Handler, w http.ResponseWriter, r *http.Request) {
		// Run the request, then answer with a response stream that
		// carries a notification, no event id, and ends.
		sdk.ServeHTTP(httptest.NewRecorder(), r)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"working\"}}\n\n")
	})

	e := newEnv(t, envConfig{rules: map[string]Decision{"cl__charge": Allow, "cl__test://doc": Allow}, upstreams: []Upstream{{Name: "cl", URL: ts.URL}}})
	cs := e.connect(alice, "", nil, "")
	meta := mcp.Meta{MetaIdempotencyKey: "charge-1"}
	res := call(t, cs, "cl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the upstream ran the call %d times, want 1", n)
	}
	if !res.IsError || !strings.Contains(text(res), "closed its response stream without answering") || !strings.Contains(text(res), "outcome is unknown") {
		t.Errorf("a call whose upstream stream ended = %q, want its outcome unknown because the stream ended", text(res))
	}
	again := call(t, cs, "cl__charge", map[string]any{}, meta)
	if n := runs.Load(); n != 1 || !again.IsError || strings.Contains(text(again), "charged") {
		t.Errorf("a retry of the same key: %d runs, %q", n, text(again))
	}
	var found bool
	for _, ev := range e.events() {
		if ev.Tool == "cl__charge" && ev.Kind == KindOutcomeUnknown {
			found = true
			if !slices.Contains(ev.Reasons, streamEndedReason) || ev.Outcome != OutcomeUnknown {
				t.Errorf("the outcome_unknown record = %+v, want the reason %q", ev, streamEndedReason)
			}
		}
	}
	if !found {
		t.Errorf("no outcome_unknown record: %v", e.audit.kinds("cl__charge"))
	}

	// A read whose stream ends so fails, saying why, and so is recorded.
	if _, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "cl__test://doc"}); err == nil || !strings.Contains(err.Error(), "closed its response stream without answering") {
		t.Errorf("a read whose upstream stream ended: %v", err)
	}
	found = false
	for _, ev := range e.events() {
		if ev.Tool == "cl__test://doc" && ev.Kind == KindExecutionFailed {
			found = slices.Contains(ev.Reasons, streamEndedReason)
		}
	}
	if !found {
		t.Errorf("the read's execution_failed record lacks the reason: %v", e.audit.kinds("cl__test://doc"))
	}
}

// TestLostConnectionIsNotAStreamEnd: a connection lost before the
// answer is the general unknown outcome, without the stream's reason.
func TestLostConnectionIsNotAStreamEnd(t *testing.T) {
	t.Parallel()
	up, _ := chargeServer("flaky")
	ts := interceptedUpstream(t, up, []string{"tools/call"}, func(_ http.Handler, w http.ResponseWriter, r *http.Request) {
		// A response stream begun, then the connection lost mid-event.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\"")
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	})
	e := newEnv(t, envConfig{rules: map[string]Decision{"fl__charge": Allow}, upstreams: []Upstream{{Name: "fl", URL: ts.URL}}})
	res := call(t, e.connect(alice, "", nil, ""), "fl__charge", map[string]any{}, nil)
	if !res.IsError || !strings.Contains(text(res), "outcome is unknown") || strings.Contains(text(res), "response stream") {
		t.Errorf("a lost connection = %q, want the general unknown outcome", text(res))
	}
	for _, ev := range e.events() {
		if ev.Kind == KindOutcomeUnknown && slices.Contains(ev.Reasons, streamEndedReason) {
			t.Errorf("a lost connection was recorded as a stream that ended: %+v", ev)
		}
	}
}

// TestUpstreamPollingReachesTheCaller: when an upstream closes a call's
// response stream to be polled (SSE polling, SEP-1699: event ids, a retry
// field), a stateful Usher closes its own response stream to a caller of
// protocol 2025-11-25 with the upstream's retry field, and the caller, the
// Go SDK's client, reconnects with Last-Event-ID and gets the answer.
func TestUpstreamPollingReachesTheCaller(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := mcp.NewServer(&mcp.Implementation{Name: "poller", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 25 * time.Millisecond})
			select {
			case <-release: // the caller's stream was closed to be polled
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}))
	t.Cleanup(ts.Close)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"po__slow": Allow},
		upstreams: []Upstream{{Name: "po", URL: ts.URL}},
		server:    func(o *Options) { o.Stateful = true },
	})

	watch := &pollWatch{retry: make(chan string, 1), release: release}
	src := e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:             e.url + "/mcp",
		HTTPClient:           &http.Client{Transport: watch.wrap(&oauth2.Transport{Source: src})},
		DisableStandaloneSSE: true,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res := call(t, cs, "po__slow", map[string]any{}, nil)
	if res.IsError || text(res) != "done" {
		t.Fatalf("the polled call = %q", text(res))
	}
	if got := <-watch.retry; got != "25" {
		t.Errorf("Usher's retry field = %q, want the upstream's 25 (ms)", got)
	}
	if n := watch.resumed.Load(); n == 0 {
		t.Error("the caller never reconnected with Last-Event-ID")
	}
}

// pollWatch is the test client's HTTP transport: it reports the first
// retry field of a response stream from Usher (and then lets the upstream
// answer), and counts the reconnections with Last-Event-ID.
type pollWatch struct {
	base    http.RoundTripper
	retry   chan string
	release chan struct{}
	once    sync.Once
	resumed atomic.Int32
}

func (w *pollWatch) wrap(base http.RoundTripper) http.RoundTripper { w.base = base; return w }

func (w *pollWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
		w.resumed.Add(1)
	}
	resp, err := w.base.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && isEventStream(resp) {
		resp.Body = &retryScan{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

// retryScan reads a response stream for a retry field.
type retryScan struct {
	io.ReadCloser
	w    *pollWatch
	seen []byte
}

func (s *retryScan) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.seen = append(s.seen, p[:n]...)
	for _, line := range strings.Split(string(s.seen), "\n") {
		if v, ok := strings.CutPrefix(line, "retry:"); ok && strings.HasSuffix(string(s.seen), "\n") {
			s.w.once.Do(func() {
				s.w.retry <- strings.TrimSpace(v)
				close(s.w.release)
			})
		}
	}
	return n, err
}

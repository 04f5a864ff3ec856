package assistant

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// resumableTools is a stateful MCP server whose response streams are
// resumable, as Usher's stateful endpoint's are: each begins with a
// priming event carrying an event id, and the server keeps the events, so
// that a client that lost a stream reconnects with Last-Event-ID and gets
// what it missed. Its one tool, charge, runs once per key (the call's
// usher/tool_call_id) and counts its runs.
func resumableTools(t *testing.T) (*httptest.Server, *atomic.Int32) {
	return keyedToolsWith(t, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
}

// cuttingRelay forwards requests to target, except that the response
// stream of the first tools/call is cut after its first event (the
// priming event): the relay reads the rest of it, so the call runs and
// its answer is sent and kept, then drops the client's connection, as a
// balancer or a network under load may. With refuseResume, it answers
// every resumption 502, as when the stream's events are lost with the
// server that kept them.
func cuttingRelay(t *testing.T, target string, refuseResume bool) *httptest.Server {
	var cut atomic.Bool
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuseResume && r.Header.Get("Last-Event-ID") != "" {
			http.Error(w, "gone", http.StatusBadGateway)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, bytes.NewReader(body))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		if !bytes.Contains(body, []byte(`"tools/call"`)) || !cut.CompareAndSwap(false, true) {
			_, _ = io.Copy(flushWriter{w}, resp.Body)
			return
		}
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			_, _ = io.WriteString(w, line)
			if err != nil || strings.TrimRight(line, "\r\n") == "" {
				break
			}
		}
		http.NewResponseController(w).Flush()
		_, _ = io.Copy(io.Discard, br)
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(relay.Close)
	return relay
}

// flushWriter flushes each write: a response stream's events pass at once.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	_ = http.NewResponseController(f.w).Flush()
	return n, err
}

// TestResumedCallStream: a tool call whose response stream from a
// stateful MCP server is cut after its priming event is resumed by the
// assistant's client (Last-Event-ID) and answered from the server's
// events: the turn completes with the call's one outcome, the tool ran
// once, and the session stays usable for the next call.
//
// When the stream cannot be resumed, the call's answer is lost: it is
// asked again under its key, on a new session, as a call whose connection
// broke is (TestLostAnswerIsNotARefusal), and the turn still completes.
func TestResumedCallStream(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		t.Run(map[bool]string{false: "resumed", true: "lost"}[refuse], func(t *testing.T) { testResumedCallStream(t, refuse) })
	}
}

func testResumedCallStream(t *testing.T, refuseResume bool) {
	forEachEngine(t, func(t *testing.T, st store.Store) {
		tools, runs := resumableTools(t)
		relay := cuttingRelay(t, tools.URL, refuseResume)
		ms, provider := scriptedModel(t)
		ms.ReplyToolCalls(model.ToolCall{ID: "call_1", Name: "charge", Arguments: json.RawMessage(`{}`)})
		ms.ReplyToolCalls(model.ToolCall{ID: "call_2", Name: "charge", Arguments: json.RawMessage(`{}`)})
		ms.Reply("Done.")
		h := newHarness(t, st, provider, &Options{MCPURL: relay.URL})
		code, out := h.call(t, "POST", "/runs", `{"message": "charge it twice"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		waitHandled(t, st, runID, 1, 20*time.Second)
		if ends := turnEnds(t, st, runID); len(ends) != 1 || ends[0].Status != TurnCompleted {
			t.Fatalf("turn ends = %+v, want one completed", ends)
		}
		reqs := ms.Requests()
		if len(reqs) != 3 {
			t.Fatalf("model requests = %d, want 3", len(reqs))
		}
		for _, r := range reqs[1:] {
			last := r.Messages[len(r.Messages)-1]
			if last.Role != "tool" || last.Content != "charged once" {
				t.Errorf("the model was told %q (%s), want the call's outcome", last.Content, last.Role)
			}
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("the tool ran %d times, want twice (once per call)", n)
		}
	})
}

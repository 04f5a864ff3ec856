package assistant

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
)

// TestToolsOutOfReachOnceAreRetried has the MCP server refuse the start of
// the turn's session, as a replica restarting or a connection lost at the wrong
// moment would: the slice is retried after its backoff and the turn
// completes, instead of ending at once as failed.
func TestToolsOutOfReachOnceAreRetried(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		tools := newCountingTools(t, st)
		target, err := url.Parse(tools.url)
		if err != nil {
			t.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.FlushInterval = -1
		// The first requests of the session's start are refused, whatever
		// the protocol's order of them (a discovery the client may do
		// without, then initialize): the start fails.
		var requests atomic.Int32
		flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if requests.Add(1) <= 2 {
				http.Error(w, "restarting", http.StatusServiceUnavailable)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		t.Cleanup(flaky.Close)
		tools.url = flaky.URL

		ms := modeltest.NewServer(t)
		ms.Reply("reached")
		rt, runID := startRuntime(t, st, ms, tools, Options{RetryBackoff: 10 * time.Millisecond})
		say(t, rt, runID, "hello") // fails the test unless the turn completes
		if n := requests.Load(); n < 4 {
			t.Errorf("the MCP server saw %d requests, want the two refused and the retry's", n)
		}
	})
}

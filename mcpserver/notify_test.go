//lint:file-ignore SA1019 The test covers the passing on of log messages, a feature deprecated as of 2026-07-28 (SEP-2577) that Usher still supports.

package mcpserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProgressAndLogsPassThrough checks that an upstream's progress and log
// notifications reach the caller of the call that caused them, on the
// stateless endpoint, before its result.
func TestProgressAndLogsPassThrough(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fx__slow_work": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	// The client SDK hands notifications to these handlers apart from the
	// result, so the test waits for them rather than read them at once.
	got := make(chan string, 10)
	cs := e.connect(alice, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			got <- fmt.Sprintf("progress %v %v/%v", req.Params.ProgressToken, req.Params.Progress, req.Params.Total)
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			got <- fmt.Sprintf("log %s: %v", req.Params.Logger, req.Params.Data)
		},
	}, "")
	res := call(t, cs, "fx__slow_work", map[string]any{}, mcp.Meta{"progressToken": "my-token", mcp.MetaKeyLogLevel: "info"})
	if res.IsError {
		t.Fatal(text(res))
	}
	want := []string{"progress my-token 1/2", "progress my-token 2/2", "log fx/worker: halfway"}
	timeout := time.After(10 * time.Second)
	for _, w := range want {
		select {
		case g := <-got:
			if g != w {
				t.Errorf("got %q, want %q", g, w)
			}
		case <-timeout:
			t.Fatalf("no %q", w)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// replicaPolicy lets the replica tests' upstream tools (server "up") run
// unattended, so that their calls go through the policy, the audit log
// and the upstream without waiting for a person.
const replicaPolicy = `@id("allow-replica-test-tools")
@outcome("allow")
@reason("the replica tests' tools")
permit (
  principal,
  action == Usher::Action::"call_tool",
  resource
)
when { resource.server == "up" };
`

// replicaCluster is `usher serve` processes on one PostgreSQL database
// of their own, with one upstream MCP server ("up", its tools locked and
// allowed by the policy), the scripted model, and a balancer as their
// public URL: the address of /mcp that each replica's assistant reaches
// its tools at, and that the test points at one replica or another.
type replicaCluster struct {
	t     *testing.T
	bin   string
	cfg   string
	env   []string
	db    *faultDB
	lb    *balancer
	alice string // alice's API token
}

// newReplicaCluster writes the configuration for the upstream at upURL
// and the model ms, locks the upstream's tools and mints alice's token.
// Replicas are started with start.
func newReplicaCluster(t *testing.T, upURL string, ms *modeltest.Server, extra ...string) *replicaCluster {
	t.Helper()
	c := &replicaCluster{t: t, bin: testenv.Usher(t), db: newFaultDB(t), lb: newBalancer(t)}
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.cedar")
	if err := os.WriteFile(policy, []byte(replicaPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	c.cfg = filepath.Join(dir, "usher.yaml")
	yaml := fmt.Sprintf("mcp:\n  upstreams:\n    - name: up\n      url: %q\npolicy:\n  file: %q\n  lock_file: %q\n",
		upURL, policy, filepath.Join(dir, "tools.lock"))
	if err := os.WriteFile(c.cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{
		"USHER_DATABASE_URL=" + c.db.url,
		"USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL=" + c.lb.url,
		// A failing test prints the replicas' logs: what went wrong.
		"USHER_LOG_LEVEL=warn",
	}
	for k, v := range ms.UsherEnv() {
		c.env = append(c.env, k+"="+v)
	}
	c.env = append(c.env, extra...)
	c.cli("tools", "lock")
	c.alice = c.cli("token", "user", "--sub", "alice")
	return c
}

// start starts one replica and waits until it is ready.
func (c *replicaCluster) start() *process {
	c.t.Helper()
	return startProcess(c.t, c.bin, c.env, testenv.FreeAddr(c.t), "--config", c.cfg)
}

// cli runs an usher command with the cluster's configuration and returns
// its output.
func (c *replicaCluster) cli(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.bin, append(args, "--config", c.cfg, "--data-dir", c.t.TempDir())...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("usher %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// queryRow runs one query, with args, on the database at dbURL and scans
// its one row into dest.
func queryRow(t *testing.T, dbURL, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// serveUpstream serves srv over streamable HTTP on loopback, with opts,
// and closes it when the test ends (after the replicas, which are
// stopped first: cleanups run last first).
func serveUpstream(t *testing.T, srv *mcp.Server, opts *mcp.StreamableHTTPOptions) string {
	t.Helper()
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, opts))
	t.Cleanup(ts.Close)
	return ts.URL
}

// createHeld creates a run with its first message, content, at base (a
// replica's URL) as token, while ms holds its requests (ms.Hold), and
// waits until the turn's model request is held: the turn is under way. It
// returns the run's id.
func createHeld(t *testing.T, ms *modeltest.Server, base, token, content string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"message": content})
	code, run := apitest.Call(t, "POST", base+"/api/assistant/runs", token, string(body))
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	return run["runId"].(string)
}

// startKilledPair starts two replicas of a cluster (extra: their
// environment) in front of an upstream whose tool "ask" calls ask with the
// call's session, under a context that also ends with the test (so do the
// upstream's sessions); the balancer sends to the first replica. It returns
// the cluster, both replicas, an MCP token of alice's and the count of the
// tool's calls.
func startKilledPair(t *testing.T, ask func(context.Context, *mcp.ServerSession) (*mcp.CallToolResult, error), extra ...string) (c *replicaCluster, a, b *process, mcpTok string, calls *atomic.Int32) {
	t.Helper()
	calls = new(atomic.Int32)
	ended, end := context.WithCancel(context.Background())
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(ended, cancel)()
			return ask(ctx, req.Session)
		})
	upURL := serveUpstream(t, srv, nil)
	c = newReplicaCluster(t, upURL, modeltest.NewServer(t), extra...)
	// The upstream's sessions end with the test: the one A opened, whose
	// client died, and its tool call, which waits for an answer, too.
	t.Cleanup(func() {
		end()
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	})
	a, b = c.start(), c.start()
	c.lb.set(a.url)
	_, body := get(t, a.url+"/api/me", c.alice)
	var who assistant.Me
	if err := json.Unmarshal(body, &who); err != nil {
		t.Fatal(err)
	}
	return c, a, b, c.cli("token", "mcp", "--sub", who.ID), calls
}

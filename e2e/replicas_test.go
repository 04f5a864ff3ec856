package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// replicaModes are the runs of TestConformanceReplicas: two replicas
// behind an alternating balancer, in each mode of Usher's endpoint.
var replicaModes = []string{"replicas-stateless", "replicas-stateful"}

// replicasKEK is the key encryption key both replicas share: the broker's
// signing keys, sealed in the database, are readable by either.
const replicasKEK = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="

// TestConformanceReplicas runs the official MCP conformance suite's server
// scenarios through two `usher serve` replicas on one PostgreSQL database,
// behind a balancer that sends each request to the other replica than the
// one before (no affinity of any kind), in front of the Go SDK's
// everything-server (stateful) as in TestConformanceEverythingServer: once
// in each mode of Usher's endpoint. Each scenario must pass, unless
// testdata/conformance-replicas-expected.yaml lists it for that run with
// the reason; a listed scenario that passes fails the test too.
func TestConformanceReplicas(t *testing.T) {
	nt := requireTools(t)
	testenv.DatabaseURL(t)
	t.Parallel()
	const file = "conformance-replicas-expected.yaml"
	expected := readExpected(t, file, replicaModes)
	scenarios := listScenarios(t, nt)
	checkListed(t, file, expected, scenarios)
	bin := everythingBinary(t)

	for _, mode := range replicaModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			lb, token := startReplicas(t, startEverything(t, bin, true)+"/mcp", mode == "replicas-stateful")
			endpoint := startAuthProxy(t, lb, token) + "/mcp"
			compareOutcomes(t, file, mode, scenarios, runSuite(t, nt, endpoint), expected)
		})
	}
}

// TestTypeScriptClientReplicas: the official TypeScript SDK's client holds
// one stateful session through two replicas behind the alternating
// balancer (testdata/replicas-client.mjs): every request of the session is
// served, whichever replica it reaches; the log level set on one replica
// holds for a call on the other; a tool's elicitation, sent from one
// replica, is answered through the other; the session ended on one is
// refused on both.
func TestTypeScriptClientReplicas(t *testing.T) {
	nt := requireTools(t)
	testenv.DatabaseURL(t)
	t.Parallel()
	lb, token := startReplicas(t, startEverything(t, everythingBinary(t), true)+"/mcp", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := nt.script(ctx, t.TempDir(), filepath.Join("testdata", "replicas-client.mjs"), lb+"/mcp", token)
	if err != nil {
		t.Fatalf("replicas-client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var got struct {
		SessionID        bool   `json:"sessionId"`
		ProtocolVersion  string `json:"protocolVersion"`
		ToolLists        []int  `json:"toolLists"`
		SimpleText       string `json:"simpleText"`
		LoggingCallError bool   `json:"loggingCallError"`
		Logs             int    `json:"logs"`
		Prompts          int    `json:"prompts"`
		ResourceText     string `json:"resourceText"`
		ElicitationText  string `json:"elicitationText"`
		ElicitationAsked int    `json:"elicitationAsked"`
		AfterEnd         []int  `json:"afterEnd"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("replicas-client.mjs printed %q: %v", stdout, err)
	}
	t.Logf("the TypeScript client saw %+v", got)
	if !got.SessionID || len(got.ToolLists) != 3 || got.ToolLists[0] == 0 || got.ToolLists[1] != got.ToolLists[0] || got.ToolLists[2] != got.ToolLists[0] {
		t.Errorf("the session or its tool lists: %+v", got)
	}
	if got.SimpleText == "" || got.LoggingCallError || got.Logs == 0 || got.Prompts == 0 || got.ResourceText == "" {
		t.Errorf("the calls of the session: %+v", got)
	}
	if got.ElicitationAsked != 1 || !strings.Contains(got.ElicitationText, "action=accept") || !strings.Contains(got.ElicitationText, "ada") {
		t.Errorf("the elicitation round trip: asked %d times, the tool said %q", got.ElicitationAsked, got.ElicitationText)
	}
	if len(got.AfterEnd) != 2 || got.AfterEnd[0] != http.StatusNotFound || got.AfterEnd[1] != http.StatusNotFound {
		t.Errorf("the ended session on both replicas: %v, want 404 twice", got.AfterEnd)
	}
}

// TestInspectorCLIReplicas: the MCP Inspector's command-line client,
// against two replicas behind the alternating balancer (the stateful
// default): each invocation is a session whose handshake and request
// reach different replicas; it lists the everything-server's tools and
// calls one, in the handshake protocols and in the sessionless 2026-07-28.
func TestInspectorCLIReplicas(t *testing.T) {
	nt := requireTools(t)
	testenv.DatabaseURL(t)
	t.Parallel()
	lb, token := startReplicas(t, startEverything(t, everythingBinary(t), true)+"/mcp", true)
	home := t.TempDir()
	for _, era := range [][]string{nil, {"--protocol-era", "modern"}} {
		out, err := runInspector(t, nt, home, lb+"/mcp", token, append(slices.Clone(era), "--method", "tools/list")...)
		if err != nil {
			t.Fatalf("tools/list %v: %v (%+v)", era, err, out.Error)
		}
		var list struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(out.Result, &list); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(list.Tools, func(tool struct{ Name string }) bool { return tool.Name == "test_simple_text" }) {
			t.Errorf("tools/list %v lists %d tools, without test_simple_text", era, len(list.Tools))
		}
		out, err = runInspector(t, nt, home, lb+"/mcp", token, append(slices.Clone(era), "--method", "tools/call", "--tool-name", "test_simple_text")...)
		if err != nil {
			t.Fatalf("tools/call test_simple_text %v: %v (%+v)", era, err, out.Error)
		}
		var res struct {
			IsError bool                    `json:"isError"`
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.IsError || len(res.Content) == 0 || res.Content[0].Text == "" {
			t.Errorf("tools/call test_simple_text %v = %s, want its text", era, out.Result)
		}
	}
}

// startReplicas starts two `usher serve` replicas on a PostgreSQL database
// of their own, with serverURL as the upstream "everything", behind an
// alternating balancer, and returns the balancer's URL and a broker token
// for the MCP endpoint.
func startReplicas(t *testing.T, serverURL string, stateful bool) (string, string) {
	t.Helper()
	lb := newBalancer(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "usher.yaml")
	writeConfigFrom(t, config, "replicas.yaml.tmpl", "everything.cedar", map[string]any{
		"PublicURL":        lb.url,
		"DatabaseURL":      storetest.PostgresURL(t),
		"KeyEncryptionKey": replicasKEK,
		"ServerURL":        serverURL,
		"Stateful":         stateful,
		"LockFile":         filepath.Join(dir, "tools.lock"),
	})
	offline := &usher{bin: testenv.Usher(t), dataDir: filepath.Join(dir, "a"), config: config}
	t.Log(offline.run(t, "tools", "lock"))
	t.Log(offline.run(t, "policy", "check"))
	// The balancer serves first: a replica reaches its own development
	// OIDC provider through the public URL, the balancer's, before it is
	// ready.
	addrs := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	lb.start(t, "http://"+addrs[0], "http://"+addrs[1])
	a := startUsherAt(t, addrs[0], filepath.Join(dir, "a"), config)
	startUsherAt(t, addrs[1], filepath.Join(dir, "b"), config)
	return lb.url, a.brokerToken(t, "conformance")
}

// balancer is a reverse proxy on loopback that sends each request to the
// next of its targets in turn, whatever the request: no affinity by
// session, connection or client. Host and Origin pass unchanged (they name
// the balancer, the replicas' public URL).
type balancer struct {
	ts  *httptest.Server
	url string
}

// newBalancer reserves the balancer's address, so that the replicas'
// configuration can name it; start serves it.
func newBalancer(t *testing.T) *balancer {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	t.Cleanup(ts.Close)
	return &balancer{ts: ts, url: "http://" + ts.Listener.Addr().String()}
}

// start serves the balancer in front of targets until the test ends.
func (lb *balancer) start(t *testing.T, targets ...string) {
	t.Helper()
	to := make([]*url.URL, len(targets))
	for i, target := range targets {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		to[i] = u
	}
	balancerLog := &testenv.Output{}
	t.Cleanup(func() {
		if t.Failed() && balancerLog.String() != "" {
			t.Logf("balancer log:\n%s", balancerLog)
		}
	})
	logger := log.New(balancerLog, "", log.Lmicroseconds)
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		ErrorLog: logger,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(to[(next.Add(1)-1)%uint64(len(to))])
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
		Transport:     &http.Transport{DisableKeepAlives: true},
	}
	lb.ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, rw := time.Now(), &statusWriter{ResponseWriter: w}
		defer func() {
			logger.Printf("%s %s session=%q: %d after %s", r.Method, r.URL.Path, r.Header.Get("Mcp-Session-Id"), rw.status, time.Since(start).Round(time.Microsecond))
		}()
		if !readWhole(rw, r) {
			return
		}
		rp.ServeHTTP(rw, r)
	})
	lb.ts.Config.SetKeepAlivesEnabled(false)
	lb.ts.Start()
}

// readWhole reads r's body whole before a proxy forwards r, as nginx does
// by default, and answers 400 itself when it cannot. Go's HTTP/1 server
// closes a request's body once its handler begins the response, and the
// proxy's transport reads the body once more after its declared length:
// a response stream begun before that read made it fail, and the
// transport closed its connection to the upstream, cutting the stream
// (golang/go#40747).
func readWhole(w http.ResponseWriter, r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

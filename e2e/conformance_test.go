package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/usherhq/usher/internal/testenv"
)

// suiteTimeout bounds one run of the conformance suite.
const suiteTimeout = 150 * time.Second

// modes are the modes of Usher's MCP endpoint, the default first.
var modes = []string{"stateless", "stateful"}

// TestConformance runs the official MCP conformance suite in server mode,
// every scenario it has, against Usher's /mcp, once in each mode of the
// endpoint, with the fixture upstream behind Usher and a policy that allows
// its tools. Each scenario must pass, unless
// testdata/conformance-expected.yaml lists it for that mode with the reason
// it fails; a listed scenario that passes fails the test too, so that the
// list stays true.
//
// The suite cannot send an Authorization header, and Usher's endpoint
// requires a broker token. So the suite talks to a reverse proxy on
// loopback that adds the token to every request and is otherwise
// transparent: its own address in Host and Origin becomes Usher's, and any
// other Host or Origin passes unchanged, so that Usher's DNS-rebinding
// defence sees what the suite sends.
func TestConformance(t *testing.T) {
	nt := requireTools(t)
	t.Parallel()
	expected := readExpected(t, "conformance-expected.yaml", modes)
	scenarios := listScenarios(t, nt)
	checkListed(t, "conformance-expected.yaml", expected, scenarios)

	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			results := runSuite(t, nt, startTarget(t, mode == "stateful"))
			compareOutcomes(t, "conformance-expected.yaml", mode, scenarios, results, expected)
		})
	}
}

// compareOutcomes fails the test for each scenario whose outcome in mode
// is not what file (in testdata) expects: one that fails and is not listed
// for mode, one that is listed for mode and passes, one that did not run.
// It logs the outcomes.
func compareOutcomes(t *testing.T, file, mode string, scenarios []string, results map[string][]check, expected map[string]expectedFailure) {
	t.Helper()
	var passed, failedAsExpected []string
	for _, name := range scenarios {
		checks, ran := results[name]
		want := expected[name]
		listed := slices.Contains(want.Modes, mode)
		failures := failedChecks(checks)
		switch {
		case !ran:
			t.Errorf("scenario %s did not run", name)
		case len(failures) > 0 && !listed:
			t.Errorf("scenario %s failed, and testdata/%s does not expect it to in the %s mode:\n  %s",
				name, file, mode, strings.Join(failures, "\n  "))
		case len(failures) == 0 && listed:
			t.Errorf("scenario %s passes in the %s mode, but testdata/%s expects it to fail (%s): remove the mode from its entry, here and in docs/conformance.md",
				name, mode, file, want.Reason)
		case listed:
			failedAsExpected = append(failedAsExpected, name)
			t.Logf("scenario %s fails, as expected: %s\n  %s", name, want.Reason, strings.Join(failures, "\n  "))
		default:
			passed = append(passed, name)
		}
	}
	var warned, failed int
	for _, name := range failedAsExpected {
		if failedOnlyWarnings(results[name]) {
			warned++
		} else {
			failed++
		}
	}
	t.Logf("%s mode, %d scenarios: %d passed, %d failed as expected (%d of them with warnings only: pass/warn/fail %d/%d/%d)\npassed: %s\nfailed as expected: %s",
		mode, len(scenarios), len(passed), len(failedAsExpected), warned, len(passed), warned, failed, strings.Join(passed, ", "), strings.Join(failedAsExpected, ", "))
}

// failedOnlyWarnings reports whether checks fail a scenario by warnings
// alone, none a failure.
func failedOnlyWarnings(checks []check) bool {
	warned := false
	for _, c := range checks {
		switch c.Status {
		case "FAILURE":
			return false
		case "WARNING":
			warned = true
		}
	}
	return warned
}

// startTarget starts the fixture upstream and Usher in front of it, in the
// stateful mode or not, and returns the endpoint the suite is to test: the
// authenticating proxy's /mcp.
func startTarget(t *testing.T, stateful bool) string {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "usher.yaml")
	writeConfig(t, config, startFixture(t), stateful)
	return startBehindProxy(t, filepath.Join(dir, "data"), config)
}

// startBehindProxy reviews the upstreams' tools of config with `usher
// tools lock` and checks the policy against the lock with `usher policy
// check`, as an operator would, then starts Usher with dataDir and config,
// and returns the endpoint the suite is to test: the authenticating
// proxy's /mcp.
func startBehindProxy(t *testing.T, dataDir, config string) string {
	t.Helper()
	offline := &usher{bin: testenv.Usher(t), dataDir: dataDir, config: config}
	t.Log(offline.run(t, "tools", "lock"))
	t.Log(offline.run(t, "policy", "check"))

	u := startUsher(t, dataDir, config)
	return startAuthProxy(t, u.url, u.brokerToken(t, "conformance")) + "/mcp"
}

// TestConformanceSSEPolling runs the pre-release suite's server-sse-polling
// scenario against the stateful endpoint. Unlike the released suite's, it
// calls the tool that closes its stream mid-call (upstream, at the fixture)
// with the protocol version it negotiated, 2025-11-25, for which SSE
// polling is specified: Usher's response stream must begin with a priming
// event, be closed with a retry field when the upstream closes its own,
// and give the answer after the client reconnects with Last-Event-ID —
// every check passes, none warns.
func TestConformanceSSEPolling(t *testing.T) {
	nt := requireOAuthTools(t)
	t.Parallel()
	endpoint := startTarget(t, true)
	out := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	stdout, stderr, err := nt.run(ctx, t.TempDir(), mustRel(t, nt, conformanceNext), "server", "--url", endpoint, "--scenario", "server-sse-polling", "--output-dir", out)
	checks, ran := readResults(t, out, "server-")["server-sse-polling"]
	if !ran {
		t.Fatalf("the scenario did not run (exit %v)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if failures := failedChecks(checks); len(failures) > 0 {
		t.Errorf("server-sse-polling (pre-release suite), stateful:\n  %s", strings.Join(failures, "\n  "))
	}
	var resumed bool
	for _, c := range checks {
		if c.ID == "server-sse-disconnect-resume" && c.Status == "SUCCESS" {
			resumed = true
		}
	}
	if !resumed {
		t.Errorf("the scenario did not see the answer after reconnecting: %+v", checks)
	}
}

// expectedFailure is an entry of testdata/conformance-expected.yaml.
type expectedFailure struct {
	Modes  []string `yaml:"modes"`
	Reason string   `yaml:"reason"`
}

// readExpected reads the scenarios expected to fail, by name, from file in
// testdata, whose entries may name only modes.
func readExpected(t *testing.T, file string, modes []string) map[string]expectedFailure {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]expectedFailure
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("testdata/%s: %v", file, err)
	}
	for name, e := range doc {
		if strings.TrimSpace(e.Reason) == "" {
			t.Errorf("testdata/%s: %s has no reason", file, name)
		}
		if len(e.Modes) == 0 {
			t.Errorf("testdata/%s: %s names no mode", file, name)
		}
		for _, m := range e.Modes {
			if !slices.Contains(modes, m) {
				t.Errorf("testdata/%s: %s names the mode %q; the modes are %q", file, name, m, modes)
			}
		}
	}
	return doc
}

// checkListed fails the test for each scenario of expected (read from file)
// that is not a scenario of the suite.
func checkListed(t *testing.T, file string, expected map[string]expectedFailure, scenarios []string) {
	t.Helper()
	for name := range expected {
		if !slices.Contains(scenarios, name) {
			t.Errorf("testdata/%s lists %q, which is not a scenario of the suite", file, name)
		}
	}
}

// writeConfig writes Usher's configuration from testdata/usher.yaml.tmpl.
func writeConfig(t *testing.T, path, fixtureURL string, stateful bool) {
	t.Helper()
	writeConfigFrom(t, path, "usher.yaml.tmpl", "conformance.cedar", map[string]any{"FixtureURL": fixtureURL, "Stateful": stateful})
}

// writeConfigFrom writes Usher's configuration to path from the template
// tmplFile in testdata, with data and, as Policy, the absolute path of
// policyFile in testdata.
func writeConfigFrom(t *testing.T, path, tmplFile, policyFile string, data map[string]any) {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", tmplFile))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := filepath.Abs(filepath.Join("testdata", policyFile))
	if err != nil {
		t.Fatal(err)
	}
	data["Policy"] = policy
	var b bytes.Buffer
	if err := tmpl.Option("missingkey=error").Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startAuthProxy serves, on loopback until the test ends, a reverse proxy
// to target that sends token as the bearer token of every request, and
// returns its URL.
func startAuthProxy(t *testing.T, target, token string) string {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	self := ts.Listener.Addr().String()
	// The proxy logs each request, and its own complaints (a client that
	// hung up, say); the log is shown when the test fails.
	proxyLog := &testenv.Output{}
	t.Cleanup(func() {
		if t.Failed() && proxyLog.String() != "" {
			t.Logf("proxy log:\n%s", proxyLog)
		}
	})
	logger := log.New(proxyLog, "", log.Lmicroseconds)
	rp := &httputil.ReverseProxy{
		ErrorLog: logger,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(to)
			r.Out.Host = r.In.Host
			if r.In.Host == self {
				r.Out.Host = to.Host
			}
			if r.In.Header.Get("Origin") == "http://"+self {
				r.Out.Header.Set("Origin", target)
			}
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		FlushInterval: -1, // pass each event of a response stream on at once
		// A connection per request, on both sides: with keep-alive
		// connections between the suite's client and the proxy, a
		// response stream was now and then cut (and its request timed
		// out), which a direct client of Usher does not meet.
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, rw := time.Now(), &statusWriter{ResponseWriter: w}
		logger.Printf("start %s %s session=%q", r.Method, r.URL.Path, r.Header.Get("Mcp-Session-Id"))
		// Deferred: the proxy panics to abort a response it cannot
		// finish.
		defer func() {
			logger.Printf("end %s %s: %d after %s", r.Method, r.URL.Path, rw.status, time.Since(start).Round(time.Microsecond))
		}()
		if !readWhole(rw, r) {
			return
		}
		rp.ServeHTTP(rw, r)
	})
	ts.Config.SetKeepAlivesEnabled(false)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// listScenarios returns the names of the suite's server scenarios.
func listScenarios(t *testing.T, nt nodeTools) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := nt.run(ctx, t.TempDir(), "conformance", "list", "--server")
	if err != nil {
		t.Fatalf("conformance list: %v\n%s%s", err, stdout, stderr)
	}
	var names []string
	for line := range strings.Lines(stdout) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			name, _, _ = strings.Cut(name, " ")
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list named no scenario:\n%s", stdout)
	}
	return names
}

// check is one check of a scenario, as the suite writes it in checks.json.
type check struct {
	ID           string          `json:"id"`
	Status       string          `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, SKIPPED
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// failedChecks describes the checks that fail a scenario. As the suite's
// own baseline does, a warning counts as a failure.
func failedChecks(checks []check) []string {
	var out []string
	for _, c := range checks {
		if c.Status == "FAILURE" || c.Status == "WARNING" {
			details := string(c.Details)
			if len(details) > 600 {
				details = details[:600] + "…"
			}
			out = append(out, fmt.Sprintf("%s %s: %s %s", c.Status, c.ID, c.ErrorMessage, details))
		}
	}
	return out
}

// runSuite runs every server scenario of the suite against endpoint and
// returns each one's checks.
func runSuite(t *testing.T, nt nodeTools, endpoint string) map[string][]check {
	t.Helper()
	return runSuiteOf(t, nt, "conformance", endpoint, "--suite", "all")
}

// runSuiteOf runs the server scenarios of the suite whose entry point is
// suite that the arguments args select against endpoint, and returns each
// one's checks.
func runSuiteOf(t *testing.T, nt nodeTools, suite, endpoint string, args ...string) map[string][]check {
	t.Helper()
	out := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	start := time.Now()
	// It exits non-zero when a scenario fails; the results say which.
	args = append([]string{suite, "server", "--url", endpoint, "--output-dir", out}, args...)
	stdout, stderr, err := nt.run(ctx, t.TempDir(), args[0], args[1:]...)
	t.Logf("the conformance suite ran for %s (exit: %v)", time.Since(start).Round(time.Millisecond), err)
	if ctx.Err() != nil {
		t.Fatalf("the conformance suite did not finish within %s\nstdout:\n%s\nstderr:\n%s", suiteTimeout, stdout, stderr)
	}
	if _, rerr := os.Stat(out); rerr != nil {
		t.Fatalf("the conformance suite wrote no results (%v, exit %v)\nstdout:\n%s\nstderr:\n%s", rerr, err, stdout, stderr)
	}
	results := readResults(t, out, "server-")
	if t.Failed() || len(results) == 0 {
		t.Logf("conformance suite output:\n%s\n%s", stdout, stderr)
	}
	return results
}

// statusWriter remembers the status of a response, for the proxy's log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController flush the response underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

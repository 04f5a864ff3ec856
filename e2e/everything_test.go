package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// everythingModes are the runs of TestConformanceEverythingServer: the
// everything-server directly, in each of its modes, and federated through
// Usher, in each mode of Usher's endpoint, with the server stateful behind
// it.
var everythingModes = []string{"direct-stateful", "direct-stateless", "usher-stateless", "usher-stateful"}

// everythingPackage is the Go SDK's conformance server, from the module
// version go.mod requires: the server the SDK's own conformance run tests.
// It serves the suite's tools, resources and prompts under the suite's
// names.
const everythingPackage = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"

// TestConformanceEverythingServer runs the official MCP conformance suite's
// server scenarios against a server from outside the project, the Go SDK's
// conformance everything-server, built unmodified from the module in
// go.mod: directly, once in each of its modes, and federated through Usher
// with the prefix "none", once in each mode of Usher's endpoint. Each
// scenario must pass, unless testdata/conformance-everything-expected.yaml
// lists it for that run with the reason; a listed scenario that passes
// fails the test too. So the differences between the server directly and
// the server through Usher are the list's, each explained there and in
// docs/conformance.md.
func TestConformanceEverythingServer(t *testing.T) {
	nt := requireTools(t)
	t.Parallel()
	const file = "conformance-everything-expected.yaml"
	expected := readExpected(t, file, everythingModes)
	scenarios := listScenarios(t, nt)
	checkListed(t, file, expected, scenarios)
	bin := everythingBinary(t)

	for _, mode := range everythingModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var endpoint string
			switch mode {
			case "direct-stateful":
				endpoint = startEverything(t, bin, true) + "/mcp"
			case "direct-stateless":
				endpoint = startEverything(t, bin, false) + "/mcp"
			case "usher-stateless", "usher-stateful":
				endpoint = startUsherBefore(t, startEverything(t, bin, true)+"/mcp", mode == "usher-stateful")
			}
			compareOutcomes(t, file, mode, scenarios, runSuite(t, nt, endpoint), expected)
		})
	}
}

// startUsherBefore starts Usher, its endpoint stateful or not, with the
// everything-server at serverURL as the upstream "everything" (prefix
// none, testdata/everything.cedar), behind the token-adding proxy, and
// returns the proxy's MCP endpoint.
func startUsherBefore(t *testing.T, serverURL string, stateful bool) string {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "usher.yaml")
	writeConfigFrom(t, config, "everything.yaml.tmpl", "everything.cedar", map[string]any{"ServerURL": serverURL, "Stateful": stateful})
	return startBehindProxy(t, filepath.Join(dir, "data"), config)
}

// everythingBinary is the everything-server, built once.
func everythingBinary(t *testing.T) string {
	t.Helper()
	return testenv.Path(t, everythingPackage)
}

// startEverything runs the everything-server on a free loopback port,
// stateful or stateless, until the test ends, and returns its base URL
// once it answers. It serves MCP at every path. The server takes a port
// and cannot pick its own, so the port was free a moment before: if
// another process took it meanwhile, the server exits and another port is
// tried.
func startEverything(t *testing.T, bin string, stateful bool) string {
	t.Helper()
	var failures []string
	for range 3 {
		base, err := tryEverything(t, bin, stateful)
		if err == nil {
			return base
		}
		failures = append(failures, err.Error())
	}
	t.Fatalf("the everything-server did not start:\n%s", strings.Join(failures, "\n"))
	return ""
}

// tryEverything is one attempt of startEverything: it fails if the server
// exits before it answers.
func tryEverything(t *testing.T, bin string, stateful bool) (string, error) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "-http", addr, "-stateless="+strconv.FormatBool(!stateful))
	output := &testenv.Output{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("everything-server at %s, output:\n%s", addr, output)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited: // it has no graceful stop: SIGTERM ends it
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return "", fmt.Errorf("it exited before it answered at %s: %v\n%s", addr, err, output)
		default:
		}
		// Any answer will do: a GET without a session is refused.
		resp, err := http.Get(base + "/mcp")
		if err == nil {
			resp.Body.Close()
			return base, nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("the everything-server does not answer at %s after 30s: %v\n%s", base, err, output)
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a bounded readiness loop
	}
}

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nextModes are the runs of TestConformanceNext: the everything-server
// directly (stateless, as protocol 2026-07-28 is sessionless), and
// federated through Usher's default (stateless) endpoint with the server
// behind it, stateless (an upstream of protocol 2026-07-28: usher) and
// stateful (an upstream that speaks only 2025-11-25 to Usher's client:
// usher-stateful-upstream).
var nextModes = []string{"direct", "usher", "usher-stateful-upstream"}

// TestConformanceNext runs the server scenarios that the conformance
// suite's pre-release (conformance-next) requires of protocol 2026-07-28
// (--requirements 2026-07-28) against the Go SDK's everything-server,
// directly and through Usher, and compares each run's outcomes with
// testdata/conformance-next-expected.yaml as TestConformanceEverythingServer
// compares its own: a change either way fails the test.
func TestConformanceNext(t *testing.T) {
	nt := requireOAuthTools(t)
	t.Parallel()
	const file = "conformance-next-expected.yaml"
	expected := readExpected(t, file, nextModes)
	scenarios := listNextScenarios(t, nt)
	checkListed(t, file, expected, scenarios)
	bin := everythingBinary(t)

	for _, mode := range nextModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var endpoint string
			switch mode {
			case "direct":
				endpoint = startEverything(t, bin, false) + "/mcp"
			default:
				dir := t.TempDir()
				config := filepath.Join(dir, "usher.yaml")
				writeConfigFrom(t, config, "everything.yaml.tmpl", "everything.cedar", map[string]any{
					"ServerURL": startEverything(t, bin, mode == "usher-stateful-upstream") + "/mcp",
					"Stateful":  false,
				})
				endpoint = startBehindProxy(t, filepath.Join(dir, "data"), config)
			}
			compareOutcomes(t, file, mode, scenarios, runNextSuite(t, nt, endpoint), expected)
		})
	}
}

// listNextScenarios lists the server scenarios the pre-release suite
// requires of protocol 2026-07-28.
func listNextScenarios(t *testing.T, nt nodeTools) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := nt.run(ctx, t.TempDir(), mustRel(t, nt, conformanceNext), "list", "--server", "--requirements", "2026-07-28")
	if err != nil {
		t.Fatalf("conformance-next list: %v\n%s%s", err, stdout, stderr)
	}
	var names []string
	server := false
	for line := range strings.Lines(stdout) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Server scenarios"):
			server = true
		case strings.HasSuffix(line, ":"):
			server = false
		case server:
			if name, ok := strings.CutPrefix(line, "- "); ok {
				name, _, _ = strings.Cut(name, " ")
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance-next list named no server scenario:\n%s", stdout)
	}
	return names
}

// runNextSuite runs the pre-release suite's 2026-07-28 requirements
// against endpoint and returns each scenario's checks.
func runNextSuite(t *testing.T, nt nodeTools, endpoint string) map[string][]check {
	t.Helper()
	out := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	start := time.Now()
	// It exits non-zero when a scenario fails; the results say which.
	stdout, stderr, err := nt.run(ctx, t.TempDir(), mustRel(t, nt, conformanceNext), "server", "--url", endpoint,
		"--requirements", "2026-07-28", "--output-dir", out)
	t.Logf("the pre-release suite ran for %s (exit: %v)", time.Since(start).Round(time.Millisecond), err)
	if ctx.Err() != nil {
		t.Fatalf("the pre-release suite did not finish within %s\nstdout:\n%s\nstderr:\n%s", suiteTimeout, stdout, stderr)
	}
	if _, rerr := os.Stat(out); rerr != nil {
		t.Fatalf("the pre-release suite wrote no results (%v, exit %v)\nstdout:\n%s\nstderr:\n%s", rerr, err, stdout, stderr)
	}
	results := readResults(t, out, "server-")
	if t.Failed() || len(results) == 0 {
		t.Logf("pre-release suite output:\n%s\n%s", stdout, stderr)
	}
	return results
}

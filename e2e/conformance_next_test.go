package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// nextModes are the runs of TestConformanceNext: the everything-server
// directly (stateless, as protocol 2026-07-28 is sessionless), and
// federated through Usher's stateless endpoint (mcp.stateful: false) with
// the server behind it, stateless (an upstream of protocol 2026-07-28:
// usher) and stateful (an upstream that speaks only 2025-11-25 to Usher's
// client: usher-stateful-upstream), and through Usher's default, stateful
// endpoint, which serves the sessionless protocol's requests as the
// stateless one does, with the server stateless behind it
// (usher-stateful-endpoint).
var nextModes = []string{"direct", "usher", "usher-stateful-upstream", "usher-stateful-endpoint"}

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
			// Directly, the server is stateless; behind Usher, as the mode says.
			endpoint := startEverything(t, bin, mode == "usher-stateful-upstream") + "/mcp"
			if mode != "direct" {
				endpoint = startUsherBefore(t, endpoint, mode == "usher-stateful-endpoint")
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
	return runSuiteOf(t, nt, mustRel(t, nt, conformanceNext), endpoint, "--requirements", "2026-07-28")
}

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// testdata/run.json is `go test -json -timeout 1s` of two packages: fast
// (a pass, two skips for want of a database, a failure) and slow (a pass,
// and a test that hangs until the timeout; the goroutine dump cut short).

func TestReport(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-timeout", "1s", "testdata/run.json"}, &out)
	if !errors.Is(err, errOverBudget) {
		t.Errorf("run = %v, want errOverBudget", err)
	}
	report := out.String()
	for _, want := range []string{
		"Slowest packages, against a budget of 400ms each (40% of -timeout 1s):",
		"  2 in fast: PostgreSQL: TEST_DATABASE_URL is not set\n",
		"  slow: test timed out after 1s, running TestHangs (1s)\n",
		"  slow took 1.0s, over its budget of 400ms (40% of -timeout 1s)\n",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	// The failing test is no problem of the report's: the run says so.
	if strings.Contains(report, "fast failed outside") || strings.Contains(report, "fast took") {
		t.Errorf("the report blames fast:\n%s", report)
	}
	// Its last line is the count, as CI reads it.
	if !strings.HasSuffix(report, "\ntests: 3 passed, 1 failed, 2 skipped\n") {
		t.Errorf("the report ends %q", report[max(0, len(report)-80):])
	}
}

// Within the budget, the same run has no problem but the timeout: a
// package that timed out is a problem at any budget.
func TestReportTimeoutAtAnyBudget(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-timeout", "1h", "testdata/run.json"}, &out)
	if !errors.Is(err, errOverBudget) || strings.Contains(out.String(), "over its budget") ||
		!strings.Contains(out.String(), "slow: test timed out after 1s, running TestHangs (1s)") {
		t.Errorf("run = %v\n%s", err, out.String())
	}
}

func TestReportUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-timeout", "0s", "testdata/run.json"},
		{"-budget", "1.5", "testdata/run.json"},
		{"testdata/run.json", "another.json"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil || errors.Is(err, errOverBudget) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestSkipReason(t *testing.T) {
	tests := []struct {
		name   string
		output []string
		want   string
	}{
		{"-json order", []string{"=== RUN   TestX\n", "    x_test.go:9: no database\n", "--- SKIP: TestX (0.00s)\n"}, "no database"},
		{"plain order", []string{"--- SKIP: TestX (0.00s)\n", "    x_test.go:9: no database\n"}, "no database"},
		{"several lines", []string{"    x_test.go:9: no database;\n", "        set it\n", "--- SKIP: TestX (0.00s)\n"}, "no database; set it"},
		{"logged before", []string{"    x_test.go:3: started\n", "    x_test.go:9: no database\n"}, "no database"},
		{"nothing", []string{"--- SKIP: TestX (0.00s)\n"}, "(no reason given)"},
	}
	for _, tt := range tests {
		if got := skipReason(tt.output); got != tt.want {
			t.Errorf("%s: skipReason = %q, want %q", tt.name, got, tt.want)
		}
	}
}

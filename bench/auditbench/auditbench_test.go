package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain deletes the programs the test built, if it built them.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Remove()
	os.Exit(code)
}

// The store's statements as store/auditquery.go writes them.
const (
	principalStmt = `SELECT seq, at FROM audit_log WHERE seq > $1 AND (principal = '' OR substr(principal, 1, length($2::text)) = $2::text) AND principal = $3 ORDER BY seq DESC LIMIT $4`
	timeStmt      = `SELECT seq, at FROM audit_log WHERE seq > $1 AND (principal = '' OR substr(principal, 1, length($2::text)) = $2::text) AND at >= $3 AND at < $4 ORDER BY seq LIMIT $5`
)

// TestBindArgs binds each parameter by what it stands for, and refuses a
// statement whose filters are not the query's: one of another query, or
// one with a parameter it cannot place.
func TestBindArgs(t *testing.T) {
	since := time.Date(2031, 1, 6, 18, 0, 0, 0, time.UTC)
	args, err := bindArgs(timeStmt, binding{since: since, until: since.Add(time.Hour), limit: 100}, "iss|t|")
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(0), "iss|t|", since, since.Add(time.Hour), 100}
	if len(args) != len(want) {
		t.Fatalf("args = %v, want %v", args, want)
	}
	for i := range want {
		if args[i] != want[i] {
			t.Errorf("$%d = %v, want %v", i+1, args[i], want[i])
		}
	}
	for _, tc := range []struct {
		name, stmt string
		b          binding
	}{
		{"another query's statement", principalStmt, binding{tool: "tool-7", limit: 100}},
		{"a filter the statement lacks", principalStmt, binding{principal: "p", tool: "tool-7", limit: 100}},
		{"a parameter it cannot place", strings.Replace(principalStmt, "LIMIT $4", "AND run_id = $4 LIMIT $5", 1), binding{principal: "p", limit: 100}},
	} {
		if args, err := bindArgs(tc.stmt, tc.b, "iss|t|"); err == nil {
			t.Errorf("%s: bound %v, want an error", tc.name, args)
		}
	}
}

// TestShortRun runs the whole benchmark on a log of 10,000 records with
// few rounds: the fill, usher serve with a reviewer, each query's
// statement read back and checked against the API's answer, its plan and
// the report's figures. PostgreSQL only.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds usher")
	}
	dsn := testenv.DatabaseURL(t)
	var out bytes.Buffer
	o := options{usher: testenv.Usher(t), database: dsn, records: 10_000, rounds: 20, warmup: 2, profileQuery: "principal", verify: true}
	if err := run(t.Context(), o, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, q := range []string{"principal", "tool", "since_until"} {
		for _, key := range []string{"api_p50_ms", "select_p50_ms", "me_p50_ms", "ratio_p50", "ratio_p99"} {
			m := regexp.MustCompile(`(?m)^` + q + "_" + key + ` (\d+\.\d+)$`).FindSubmatch(out.Bytes())
			if m == nil || string(m[1]) == "0.000" || string(m[1]) == "0.00" {
				t.Errorf("%s_%s = %q, want a positive figure", q, key, m)
			}
		}
	}
	// Each query's plan is printed; one person's records are found by
	// the principal index.
	if n := bytes.Count(out.Bytes(), []byte("  its plan:\n    Limit")); n != 3 {
		t.Errorf("%d plans printed, want 3", n)
	}
	if !bytes.Contains(out.Bytes(), []byte("audit_log_principal_idx")) {
		t.Error("no plan names audit_log_principal_idx")
	}
	// The filled log is a valid chain.
	if !bytes.Contains(out.Bytes(), []byte("usher audit verify: audit log intact: 10000 records")) {
		t.Error("usher audit verify did not find the filled log intact")
	}
	if !regexp.MustCompile(`(?m)^records 10000$`).Match(out.Bytes()) {
		t.Error("the report does not say 10000 records")
	}
}

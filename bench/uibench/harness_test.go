package main

import (
	"bytes"
	"os"
	"regexp"
	"testing"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain deletes the programs the test built, if it built them.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Remove()
	os.Exit(code)
}

// TestShortRun builds usher and runs the whole benchmark on a short
// conversation: the sign-in, the seeding with Usher stopped, both kinds of
// navigation, the scroll up, and the report with every key. On PostgreSQL
// when TEST_DATABASE_URL is set. Without Chromium it skips, except under
// CI.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds usher and starts Chromium")
	}
	chromium := testenv.Chromium(t)
	var out bytes.Buffer
	o := options{usher: testenv.Usher(t), chromium: chromium, database: os.Getenv("TEST_DATABASE_URL"),
		messages: 400, runs: 1, width: 1280, height: 800}
	if err := run(t.Context(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, key := range []string{"visible_cold_p50_ms", "visible_warm_max_ms", "older_p50_ms", "older_max_ms", "older_drift_px", "load1_start"} {
		if !regexp.MustCompile(`(?m)^` + key + ` \S+$`).Match(out.Bytes()) {
			t.Errorf("no %s in the report", key)
		}
	}
	if !regexp.MustCompile(`(?m)^messages 400$`).Match(out.Bytes()) {
		t.Error("the report does not say 400 messages")
	}
}

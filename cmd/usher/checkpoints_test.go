package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

var (
	verifiedHead       = regexp.MustCompile(`audit log intact: \d+ records, head (\d+):`)
	verifiedCheckpoint = regexp.MustCompile(`checkpoints: \d+ verified .* names record (\d+) at`)
)

// TestAuditVerifyReportsATruncatedLog: usher serve signs a checkpoint of
// the audit log's head and publishes its key; once the newest records are
// deleted, usher audit verify, checking against a copy of the key, reports
// the checkpoint the log contradicts.
func TestAuditVerifyReportsATruncatedLog(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_AUDIT_CHECKPOINT_INTERVAL": "1s"})
	mcpTok, err := s.cli(t, "token", "mcp", "--sub", "alice")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_list", "arguments": map[string]any{}})
	}

	// The checkpointer signs the head within a second or so.
	var head int64
	testenv.WaitFor(t, 30*time.Second, func() bool {
		out, err := s.cli(t, "audit", "verify")
		h, c := verifiedHead.FindStringSubmatch(out), verifiedCheckpoint.FindStringSubmatch(out)
		if err != nil || h == nil || c == nil {
			return false
		}
		head, _ = strconv.ParseInt(h[1], 10, 64)
		return h[1] == c[1]
	})
	if head < 4 {
		t.Fatalf("the log ends at record %d, want more records", head)
	}
	code, before := get(t, s.url+"/.well-known/usher-audit-key", "")
	if code != 200 || !strings.HasPrefix(string(before), "127.0.0.1:") || strings.Count(string(before), "\n") != 1 {
		t.Fatalf("GET /.well-known/usher-audit-key = %d %q, want one key named after the host", code, before)
	}
	// A rotation publishes a new key first and keeps the old one.
	out, err := s.cli(t, "audit", "rotate-key")
	if err != nil {
		t.Fatal(err)
	}
	code, keys := get(t, s.url+"/.well-known/usher-audit-key", "")
	newKey, oldKey, _ := strings.Cut(string(keys), "\n")
	if code != 200 || oldKey != string(before) || !strings.Contains(out, newKey) || newKey+"\n" == string(before) {
		t.Fatalf("after rotate-key (%q) the published keys are %q, want a new key, then %q", out, keys, before)
	}
	keysFile := filepath.Join(t.TempDir(), "usher-audit-key")
	if err := os.WriteFile(keysFile, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", filepath.Join(s.dataDir, "usher.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `DELETE FROM audit_log WHERE seq > $1`, head-3); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli(t, "audit", "verify", "--keys", keysFile)
	want := fmt.Sprintf("seq %d: checkpoint_mismatch: the log (head %d) no longer holds the record the checkpoint signed at", head, head-3)
	if err != errFailed || !strings.Contains(out, want) || !strings.Contains(out, "audit log BROKEN") {
		t.Errorf("usher audit verify of the truncated log = %v:\n%s\nwant it broken, with %q", err, out, want)
	}
}

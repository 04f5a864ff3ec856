package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/apitest"
)

// TestBackupAndRestore backs up the embedded default while it serves,
// lets it move on, restores the backup once the server stopped (a restore
// while it runs is refused), and starts again on it: the conversation of
// before the backup is there, the one after it is not, and the audit log
// verifies against the head the backup printed.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	converse := func(s *server, token, title string) string {
		t.Helper()
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", token, `{"title":"`+title+`"}`)
		if code != 201 {
			t.Fatalf("create %s = %d %v", title, code, run)
		}
		id := run["runId"].(string)
		if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages?wait=30s", token, `{"content":"call notes_list"}`); code != 200 {
			t.Fatalf("a turn of %s = %d %v", title, code, body)
		}
		return id
	}
	before := converse(s, alice, "before")

	backup := filepath.Join(t.TempDir(), "usher-backup.db")
	out, err := s.cli(t, "backup", backup)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	m := regexp.MustCompile(`audit head in the copy: (\d+:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, filepath.Join(s.dataDir, "broker.key")) {
		t.Fatalf("backup printed\n%s\nwant the copy's audit head and the key file to keep", out)
	}
	anchor := m[1]
	after := converse(s, alice, "after")
	// Into a directory: a new file named by the time.
	dir := t.TempDir()
	if out, err := s.cli(t, "backup", dir); err != nil || !regexp.MustCompile(`to `+regexp.QuoteMeta(dir)+`/usher-\d{8}T\d{6}Z\.db `).MatchString(out) {
		t.Errorf("backup into a directory: %v\n%s", err, out)
	}

	if _, err := s.cli(t, "restore", backup); err == nil || !strings.Contains(err.Error(), "open in another process") {
		t.Fatalf("restore while serving: %v; want it refused", err)
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli(t, "restore", backup)
	if err != nil || !strings.Contains(out, "audit head: "+anchor) {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	replaced, _ := filepath.Glob(filepath.Join(s.dataDir, "usher.db.replaced-*"))
	if len(replaced) != 1 {
		t.Errorf("the replaced database: %v, want one file moved aside", replaced)
	}

	// The same address, so the same development issuer: alice is the
	// same person.
	again := startServerIn(t, s.dataDir, nil, "--addr", strings.TrimPrefix(s.url, "http://"))
	alice = userToken(t, again, "alice")
	if code, _ := apitest.Call(t, "GET", again.url+"/api/assistant/runs/"+before, alice, ""); code != 200 {
		t.Errorf("the conversation of before the backup, after the restore: %d, want 200", code)
	}
	if code, _ := apitest.Call(t, "GET", again.url+"/api/assistant/runs/"+after, alice, ""); code != 404 {
		t.Errorf("the conversation of after the backup, after the restore: %d, want 404", code)
	}
	if out, err := again.cli(t, "audit", "verify", "--anchor", anchor); err != nil || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify --anchor %s after the restore: %v\n%s", anchor, err, out)
	}
}

// TestBackupAndRestoreRefuse checks the commands' answers to a PostgreSQL
// installation, a missing database and a wrong command line.
func TestBackupAndRestoreRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "copy.db", "--database-url", "postgres://usher@127.0.0.1:1/usher"}, "is PostgreSQL"},
		{[]string{"restore", "copy.db", "--database-url", "postgres://usher@127.0.0.1:1/usher"}, "is PostgreSQL"},
		{[]string{"backup", filepath.Join(dir, "copy.db"), "--data-dir", filepath.Join(dir, "none")}, "no database at"},
		{[]string{"restore", filepath.Join(dir, "missing.db"), "--data-dir", dir}, "no such file"},
		{[]string{"backup"}, "usage: usher backup FILE|DIRECTORY"},
		{[]string{"restore", "a.db", "b.db"}, "usage: usher restore FILE"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, getenv(nil), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
			t.Errorf("usher %s = %v (stderr %q), want %q", strings.Join(tc.args, " "), err, stderr.String(), tc.want)
		}
		if errors.Is(err, errUsage) != strings.HasPrefix(tc.want, "usage") {
			t.Errorf("usher %s: %v; a usage error exits 2, and only it", strings.Join(tc.args, " "), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup of a missing database made its directory: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
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
// installation, a missing database, a backup into a directory that does
// not exist and a wrong command line.
func TestBackupAndRestoreRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := run(context.Background(), []string{"migrate", "--data-dir", data}, getenv(nil), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "copy.db", "--database-url", "postgres://usher@127.0.0.1:1/usher"}, "is PostgreSQL"},
		{[]string{"restore", "copy.db", "--database-url", "postgres://usher@127.0.0.1:1/usher"}, "is PostgreSQL"},
		{[]string{"backup", filepath.Join(dir, "copy.db"), "--data-dir", filepath.Join(dir, "none")}, "no database at"},
		{[]string{"backup", filepath.Join(dir, "missing", "copy.db"), "--data-dir", data}, "no directory " + filepath.Join(dir, "missing") + " to write the backup in"},
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

// TestBackupKilled kills `usher backup` (SIGKILL) while it writes the
// copy of a database of some 160 MiB: no file is left at the name it was
// given — only its hidden temporary file, which a backup never takes for
// a copy — and the next backup to that name succeeds.
func TestBackupKilled(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dataDir, "usher.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 4<<20)
	for i := range 40 {
		rand.Read(content) // incompressible, each its own
		a := store.Attachment{ID: fmt.Sprintf("att-%d", i), Owner: "alice", Name: "blob.bin", ContentType: "application/octet-stream"}
		if _, err := st.PutAttachment(t.Context(), a, content, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	backups := t.TempDir()
	dest := filepath.Join(backups, "usher-backup.db")
	cmd := exec.Command(testenv.Usher(t), "backup", dest, "--data-dir", dataDir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once the copy has begun to be written.
	testenv.WaitFor(t, 30*time.Second, func() bool {
		partial, _ := filepath.Glob(filepath.Join(backups, ".usher-backup.db.*.partial"))
		if len(partial) == 0 {
			return false
		}
		fi, err := os.Stat(partial[0])
		return err == nil && fi.Size() > 0
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("usher backup ended by itself before it was killed: the database is too small to catch it writing")
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a backup killed while writing left a file at its name: %v", err)
	}

	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"backup", dest, "--data-dir", dataDir}, getenv(nil), &stdout, &stderr); err != nil {
		t.Fatalf("the backup after the killed one: %v\n%s", err, stderr.String())
	}
	copied, err := store.Open(t.Context(), dest, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	if _, data, err := copied.AttachmentData(t.Context(), "att-39"); err != nil || !bytes.Equal(data, content) {
		t.Errorf("the last attachment in the copy: %d bytes, %v", len(data), err)
	}
}

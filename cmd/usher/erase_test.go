package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// withNotes returns a data directory migrated by `usher migrate` whose
// database holds a note "todo" of each owner, "milk for" the owner.
func withNotes(t *testing.T, owners ...string) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"migrate", "--data-dir", dir}, getenv(nil), &out, &errOut); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	st, err := store.Open(ctx, filepath.Join(dir, "usher.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, p := range owners {
		if _, err := st.PutNote(ctx, store.Note{Owner: p, Name: "todo", Body: "milk for " + p}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestEraseCommand: `usher erase P` says what it would erase and changes
// nothing; with --yes it erases, and says so; without a principal it is a
// usage error.
func TestEraseCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := withNotes(t, "issuer|tenant|alice")
	var out, errOut bytes.Buffer
	note := func() error {
		st, err := store.Open(ctx, filepath.Join(dir, "usher.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		_, err = st.GetNote(ctx, "issuer|tenant|alice", "todo")
		return err
	}

	for _, c := range []struct {
		args []string
		want string
		gone bool
	}{
		{[]string{"erase", "issuer|tenant|alice", "--data-dir", dir}, "issuer|tenant|alice: would erase 0 conversations", false},
		{[]string{"erase", "--data-dir", dir, "issuer|tenant|alice", "--yes"}, "issuer|tenant|alice: erased 0 conversations", true},
	} {
		out.Reset()
		if err := run(ctx, c.args, getenv(nil), &out, &errOut); err != nil {
			t.Fatalf("usher %v: %v\n%s", c.args, err, errOut.String())
		}
		if !strings.HasPrefix(out.String(), c.want) || !strings.Contains(out.String(), ", 1 note,") {
			t.Errorf("usher %v said %q, want %q… 1 note", c.args, out.String(), c.want)
		}
		if err := note(); c.gone != errors.Is(err, store.ErrNotFound) {
			t.Errorf("after usher %v the note: %v (want gone: %v)", c.args, err, c.gone)
		}
	}
	for _, args := range [][]string{{"erase"}, {"erase", "--data-dir", dir}, {"erase", "a", "b"}} {
		if err := run(ctx, args, getenv(nil), &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("usher %v = %v, want a usage error", args, err)
		}
	}
}

// TestExportCommand: `usher export P --output FILE` writes the person's
// rows as JSON to a new file of its own, and refuses a file that exists;
// without a principal it is a usage error.
func TestExportCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := withNotes(t, "issuer|tenant|alice", "issuer|tenant|bob")
	var out, errOut bytes.Buffer
	file := filepath.Join(t.TempDir(), "alice.json")
	args := []string{"export", "issuer|tenant|alice", "--data-dir", dir, "--output", file}
	if err := run(ctx, args, getenv(nil), &out, &errOut); err != nil {
		t.Fatalf("usher %v: %v\n%s", args, err, errOut.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Principal string
		Tables    map[string][]map[string]any
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Principal != "issuer|tenant|alice" || len(got.Tables["notes"]) != 1 ||
		got.Tables["notes"][0]["body"] != "milk for issuer|tenant|alice" || strings.Contains(string(b), "bob") {
		t.Errorf("the export = %s (%v)", b, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the export's file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if err := run(ctx, args, getenv(nil), &out, &errOut); err == nil || !errors.Is(err, os.ErrExist) {
		t.Errorf("usher export onto an existing file = %v, want it refused", err)
	}
	if err := run(ctx, []string{"export", "--data-dir", dir}, getenv(nil), &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("usher export with no principal = %v, want a usage error", err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// TestEraseCommand: `usher erase P` says what it would erase and changes
// nothing; with --yes it erases, and says so; without a principal it is a
// usage error.
func TestEraseCommand(t *testing.T) {
	t.Parallel()
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
	if _, err := st.PutNote(ctx, store.Note{Owner: "issuer|tenant|alice", Name: "todo", Body: "milk"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
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
		if !strings.HasPrefix(out.String(), c.want) || !strings.Contains(out.String(), "1 notes") {
			t.Errorf("usher %v said %q, want %q… 1 notes", c.args, out.String(), c.want)
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

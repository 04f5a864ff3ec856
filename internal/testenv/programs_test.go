package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const hello = "internal/testenv/testdata/hello"

// TestBuildsOnce builds a program on first use, into the process's own
// directory, and answers the same file afterwards; Remove deletes it.
func TestBuildsOnce(t *testing.T) {
	if os.Getenv(EnvDir) != "" {
		t.Setenv(EnvDir, "")
	}
	defer Remove()
	p := Path(t, hello)
	out, err := exec.Command(p).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello from a built program" {
		t.Fatalf("%s = %q, %v", p, out, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if again := Path(t, hello); again != p {
		t.Errorf("second Path = %s, want %s", again, p)
	}
	if fi2, err := os.Stat(p); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("the program was built again (%v)", err)
	}
	Remove()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v; want it gone", p, err)
	}
}

// TestPrebuiltDirectory takes programs from USHER_TEST_BIN and never
// builds one that is missing there: the error names the directory and the
// make target.
func TestPrebuiltDirectory(t *testing.T) {
	d := t.TempDir()
	t.Setenv(EnvDir, d)
	want := filepath.Join(d, "hello")
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := lookup(hello); err != nil || got != want {
		t.Errorf("lookup = %s, %v; want %s", got, err, want)
	}
	_, err := lookup("cmd/usher")
	if err == nil || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), "make testbin") {
		t.Errorf("lookup of a program not built = %v; want an error naming %s and make testbin", err, d)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/testenv"
)

// TestHelp: `usher help COMMAND` prints the usage's lines of that command
// and the shared flags, for every command the usage names; a topic that
// names none is a usage error.
func TestHelp(t *testing.T) {
	t.Parallel()
	topics := map[string]bool{}
	for line := range strings.Lines(usage) {
		if f := strings.Fields(line); strings.HasPrefix(line, "  usher ") && len(f) > 1 {
			topics[f[1]] = true
		}
	}
	if len(topics) < 15 {
		t.Fatalf("the usage names %d commands", len(topics))
	}
	for topic := range topics {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"help", topic}, getenv(nil), &out, &errOut); err != nil {
			t.Errorf("usher help %s = %v", topic, err)
		}
		for line := range strings.Lines(out.String()) {
			if strings.HasPrefix(line, "  usher ") && !strings.HasPrefix(line, "  usher "+topic+" ") && line != "  usher "+topic+"\n" {
				t.Errorf("usher help %s printed another command's line %q", topic, line)
			}
		}
		if !strings.Contains(out.String(), "  usher "+topic) || !strings.Contains(out.String(), "--data-dir DIR") {
			t.Errorf("usher help %s = %q, want its lines and the shared flags", topic, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"help", "nope"}, getenv(nil), &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("usher help nope = %v, want a usage error", err)
	}
}

// TestFlagMistakes: a flag a command does not take (such as verify's
// flags on export), a value a flag cannot take, and a negative --after are
// usage errors, said once on standard error, exit 2; -h prints the usage
// and exits 0.
func TestFlagMistakes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"audit", "export", "--after", "abc"}, {"audit", "export", "--after", "-5"}, {"audit", "export", "--anchor", "3:abc"},
		{"audit", "export", "--keys", "k"}, {"audit", "verify", "--after", "3"}, {"erase", "-y", "alice"},
		{"hold", "list", "--nope"}, {"status", "--json=maybe"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, getenv(nil), &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("usher %q = %v, want a usage error", args, err)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"erase", "-h"}, getenv(nil), &out, &errOut); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "-yes") {
		t.Errorf("usher erase -h = %v (%q), want its usage", err, errOut.String())
	}

	bin := testenv.Usher(t)
	for args, want := range map[string]int{"erase -h": 0, "audit export --after abc": 2, "help hold": 0, "nope": 2} {
		cmd := exec.Command(bin, strings.Fields(args)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Errorf("usher %s exited %d, want %d", args, code, want)
		}
		if strings.Count(stderr.String(), "abc") > 1 {
			t.Errorf("usher %s said the error more than once: %q", args, stderr.String())
		}
	}
}

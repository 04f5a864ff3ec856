package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// TestHangupIgnored sends SIGHUP to `usher serve`: it goes on serving and
// logs that the policy and the tool lock are read at its start and how a
// change applies (a restart), and a SIGHUP after a SIGINT still lets it
// stop in order, exit 0.
func TestHangupIgnored(t *testing.T) {
	t.Parallel()
	p := startDraining(t, "0s")
	p.signal(t, syscall.SIGHUP)
	testenv.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "SIGHUP ignored") })
	if code, body := get(t, p.url+"/healthz", ""); code != 200 {
		t.Errorf("healthz after SIGHUP = %d %s, want 200", code, body)
	}
	if code, body := get(t, p.url+"/readyz", ""); code != 200 {
		t.Errorf("readyz after SIGHUP = %d %s, want 200: a hangup is no drain", code, body)
	}
	if !strings.Contains(p.stderr.String(), "restart") {
		t.Errorf("the log does not say how to apply a change:\n%s", p.stderr)
	}
	p.signal(t, os.Interrupt)
	p.wait(t, time.Minute)
	if !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("no orderly stop:\n%s", p.stderr)
	}
}

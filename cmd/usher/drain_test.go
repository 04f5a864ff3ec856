package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// drainingProcess is an `usher serve` child process with the given
// server.shutdown_delay, and how it exited.
type drainingProcess struct {
	cmd    *exec.Cmd
	url    string
	stderr *testenv.Output
	exited chan error
}

func startDraining(t *testing.T, delay string) *drainingProcess {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cmd := exec.Command(testenv.Usher(t), "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "USHER_SERVER_SHUTDOWN_DELAY="+delay)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &drainingProcess{cmd: cmd, stderr: &testenv.Output{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
			p.url = m[1]
			break
		}
	}
	go func() {
		io.Copy(io.Discard, stdout) //nolint:errcheck // the rest of the banner
		p.exited <- cmd.Wait()
	}()
	if p.url == "" {
		t.Fatalf("no URL printed; stderr:\n%s", p.stderr)
	}
	if code, body := get(t, p.url+"/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d %s before SIGTERM", code, body)
	}
	return p
}

// signal sends sig to the process.
func (p *drainingProcess) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to bound for the process to exit, and wants status 0.
func (p *drainingProcess) wait(t *testing.T, bound time.Duration) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr)
		}
	case <-time.After(bound):
		t.Fatalf("no exit within %s\n%s", bound, p.stderr)
	}
}

// TestReadinessFailsWhileDraining sends SIGTERM as an orchestrator does:
// /readyz answers 503 at once while the server goes on serving (/healthz,
// the API's discovery) for server.shutdown_delay; SIGINT ends the wait.
func TestReadinessFailsWhileDraining(t *testing.T) {
	t.Parallel()
	p := startDraining(t, "10m")
	p.signal(t, syscall.SIGTERM)
	testenv.WaitFor(t, 30*time.Second, func() bool {
		code, _ := get(t, p.url+"/readyz", "")
		return code == 503
	})
	if code, body := get(t, p.url+"/readyz", ""); code != 503 || !strings.Contains(string(body), `"draining"`) {
		t.Errorf("readyz while draining = %d %s, want 503 draining", code, body)
	}
	if code, body := get(t, p.url+"/healthz", ""); code != 200 {
		t.Errorf("healthz while draining = %d %s, want 200", code, body)
	}
	if code, body := get(t, p.url+"/.well-known/oauth-authorization-server", ""); code != 200 {
		t.Errorf("a request while draining = %d %s, want 200", code, body)
	}
	// A person's Ctrl-C does not wait out the delay.
	p.signal(t, os.Interrupt)
	p.wait(t, time.Minute)
	if !strings.Contains(p.stderr.String(), "draining") || !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("no drain and orderly stop in the log:\n%s", p.stderr)
	}
}

// TestDrainEndsInShutdown: after the delay the server shuts down as
// without one and exits 0, within the delay and server.shutdown_timeout.
func TestDrainEndsInShutdown(t *testing.T) {
	t.Parallel()
	p := startDraining(t, "1s")
	p.signal(t, syscall.SIGTERM)
	p.wait(t, time.Second+2*15*time.Second)
	if !strings.Contains(p.stderr.String(), "draining") || !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("no drain and orderly stop in the log:\n%s", p.stderr)
	}
}

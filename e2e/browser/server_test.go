package browser

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/testenv"
)

// TestMain stops the Chromium the tests share once they have run, fails
// the tests when a goroutine they started outlives them, and deletes the
// usher binary if the tests built it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closingBrowser{m}, goleak.Cleanup(func(code int) {
		testenv.Remove()
		os.Exit(code)
	}))
}

// closingBrowser runs the tests and then stops the shared browser, before
// goleak looks for goroutines left over.
type closingBrowser struct{ m *testing.M }

func (c closingBrowser) Run() int {
	defer shared.close()
	return c.m.Run()
}

// server is one `usher serve` process.
type server struct {
	url     string
	dataDir string
	env     map[string]string
	cmd     *exec.Cmd
	done    chan error // the process's exit, once
	stderr  *testenv.Output

	shutdownOnce sync.Once
	shutdownErr  error
}

var runningAt = regexp.MustCompile(`Usher is running at (http://\S+)`)

// startServer runs `usher serve` on a free loopback port with a fresh data
// directory and the environment env (nothing else of this process's
// USHER_ variables), and waits until it prints its URL. It is stopped with
// SIGTERM when the test ends.
func startServer(t testing.TB, env map[string]string, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), env, args...)
}

// startServerIn is startServer on the given data directory.
func startServerIn(t testing.TB, dataDir string, env map[string]string, args ...string) *server {
	t.Helper()
	s := &server{dataDir: dataDir, env: env, done: make(chan error, 1), stderr: &testenv.Output{}}
	args = append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, args...)
	s.cmd = exec.Command(testenv.Usher(t), args...)
	s.cmd.Env = usherEnv(env)
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
		s.done <- s.cmd.Wait() // after the pipe's last read
	}()
	t.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			t.Errorf("serve ended with %v\nstderr:\n%s", err, s.stderr)
		}
	})
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("server did not start\nstderr:\n%s", s.stderr)
		}
		s.url = u
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not start within a minute\nstderr:\n%s", s.stderr)
	}
	return s
}

// usherEnv is env as a process environment, with this process's own
// variables but none of its USHER_ ones, which would override env.
func usherEnv(env map[string]string) []string {
	// A test's server stops at once on SIGTERM: no balancer waits for its
	// readiness to fail (server.shutdown_delay is for one).
	out := []string{"USHER_SERVER_SHUTDOWN_DELAY=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "USHER_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// shutdown stops the server as an orchestrator does (SIGTERM) and waits
// until it has exited; it is idempotent.
func (s *server) shutdown() error {
	s.shutdownOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case s.shutdownErr = <-s.done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
			s.shutdownErr = fmt.Errorf("no exit within 30 s of SIGTERM")
		}
	})
	return s.shutdownErr
}

// cli runs one more usher command on the server's installation.
func (s *server) cli(t testing.TB, args ...string) (string, error) {
	t.Helper()
	args = append(args, "--data-dir", s.dataDir, "--addr", strings.TrimPrefix(s.url, "http://"))
	cmd := exec.Command(testenv.Usher(t), args...)
	cmd.Env = usherEnv(s.env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		t.Logf("usher %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String()), err
}

// userToken is an API access token of sub from the development provider.
func userToken(t testing.TB, s *server, sub string) string {
	t.Helper()
	tok, err := s.cli(t, "token", "user", "--sub", sub)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Remove()
	// Whoever starts a goroutine (a process's waiter, its log reader)
	// stops it: none may outlive the tests.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// usher is one `usher serve` process with its own data directory.
type usher struct {
	bin     string
	url     string // as printed: http://127.0.0.1:PORT
	dataDir string
	config  string // the --config file, or "" for the embedded default
	stderr  *testenv.Output
}

var runningAt = regexp.MustCompile(`Usher is running at (http://\S+)`)

// usherEnv is the environment of every usher process: this one's, without
// USHER_ variables, which would override the configuration under test.
func usherEnv() []string {
	// A test's server stops at once on SIGTERM: no balancer waits for its
	// readiness to fail (server.shutdown_delay is for one).
	env := []string{"USHER_SERVER_SHUTDOWN_DELAY=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "USHER_") {
			env = append(env, kv)
		}
	}
	return env
}

// startUsher runs `usher serve` on a free loopback port with dataDir (a new
// one when empty) and config (none when empty), and returns once it is
// ready. It is stopped with SIGTERM when the test ends.
func startUsher(t *testing.T, dataDir, config string) *usher {
	t.Helper()
	return startUsherAt(t, "127.0.0.1:0", dataDir, config)
}

// startUsherAt is startUsher listening on addr.
func startUsherAt(t *testing.T, addr, dataDir, config string) *usher {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	u := &usher{bin: testenv.Usher(t), dataDir: dataDir, config: config, stderr: &testenv.Output{}}
	args := []string{"serve", "--addr", addr, "--data-dir", dataDir}
	if config != "" {
		args = append(args, "--config", config)
	}
	cmd := exec.Command(u.bin, args...)
	cmd.Env = usherEnv()
	cmd.Stderr = u.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("usher serve stderr:\n%s", u.stderr)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("usher serve exited with %v\nstderr:\n%s", err, u.stderr)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("usher serve did not stop within 20s of SIGTERM\nstderr:\n%s", u.stderr)
		}
	})

	// The banner names the URL, port included; the rest of stdout is
	// drained so that the process never blocks on it.
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u.url = <-found:
	case err := <-exited:
		exited <- err
		t.Fatalf("usher serve exited before it started: %v\nstderr:\n%s", err, u.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("usher serve printed no URL within 60s\nstderr:\n%s", u.stderr)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz is not ready after 30s: %v\nstderr:\n%s", u.url, err, u.stderr)
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a bounded readiness loop
	}
}

// addr is the host:port the server listens on.
func (u *usher) addr() string { return strings.TrimPrefix(u.url, "http://") }

// run runs one more usher subcommand on the same installation and returns
// its standard output, trimmed.
func (u *usher) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := u.try(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// try is run, returning the failure instead of ending the test.
func (u *usher) try(args ...string) (string, error) {
	args = append(args, "--data-dir", u.dataDir)
	if u.url != "" {
		args = append(args, "--addr", u.addr())
	}
	if u.config != "" {
		args = append(args, "--config", u.config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.bin, args...)
	cmd.Env = usherEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("usher %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// brokerToken signs in user through the development provider, learns the
// principal id from /api/me, and returns a broker token for the MCP
// endpoint, as a person would with `usher token user` and `usher token mcp`.
func (u *usher) brokerToken(t *testing.T, user string) string {
	t.Helper()
	apiToken := u.run(t, "token", "user", "--sub", user)
	req, err := http.NewRequest(http.MethodGet, u.url+"/api/me", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var me struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&me); err != nil || resp.StatusCode != http.StatusOK || me.ID == "" {
		t.Fatalf("GET /api/me: %d, %v, id %q", resp.StatusCode, err, me.ID)
	}
	return u.run(t, "token", "mcp", "--sub", me.ID)
}

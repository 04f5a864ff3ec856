package browser

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/testenv"
)

// TestMain fails the tests when a goroutine they started outlives them,
// and deletes the usher binary if the tests built it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testenv.Remove()
		os.Exit(code)
	}))
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
	var out []string
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

// api sends a JSON request with token, and header's name, value pairs,
// and returns the status and the decoded body.
func api(t testing.TB, method, url, token, body string, header ...string) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %s", method, url, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

// runEvents returns the run's whole event log.
func runEvents(t *testing.T, s *server, token, runID string) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := 0.0
	for {
		code, body := api(t, "GET", fmt.Sprintf("%s/api/assistant/runs/%s/events?after=%d", s.url, runID, int64(after)), token, "")
		if code != 200 {
			t.Fatalf("events = %d %v", code, body)
		}
		page, _ := body["events"].([]any)
		for _, e := range page {
			all = append(all, e.(map[string]any))
			after = e.(map[string]any)["seq"].(float64)
		}
		if more, _ := body["hasMore"].(bool); !more {
			return all
		}
	}
}

// runStatus reads a run through the API.
func runStatus(t *testing.T, s *server, token, id string) map[string]any {
	t.Helper()
	code, body := api(t, "GET", s.url+"/api/assistant/runs/"+id, token, "")
	if code != 200 {
		t.Fatalf("get run = %d %v", code, body)
	}
	return body["run"].(map[string]any)
}

// scriptedEnv configures a server for the scripted model, and the extra
// name, value pairs.
func scriptedEnv(ms *modeltest.Server, extra ...string) map[string]string {
	env := map[string]string{
		"USHER_MODEL_PROVIDER": "openai", "USHER_MODEL_BASE_URL": ms.URL(), "USHER_MODEL_NAME": "scripted",
		"USHER_MODEL_API_KEY": "test-key",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

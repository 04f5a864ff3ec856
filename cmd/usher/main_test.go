package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/jwks"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// server is one `usher serve` running in this test process.
type server struct {
	url     string
	dataDir string
	env     map[string]string
	done    chan error
	stop    context.CancelFunc
	stderr  *testenv.Output

	shutdownOnce sync.Once
	shutdownErr  error
}

// shutdown stops the server as SIGTERM would and waits until serve
// returns; it is idempotent.
func (s *server) shutdown() error {
	s.shutdownOnce.Do(func() {
		s.stop()
		s.shutdownErr = <-s.done
	})
	return s.shutdownErr
}

var runningAt = regexp.MustCompile(`Usher is running at (http://\S+)`)

// startServer runs `usher serve` on a free loopback port with a fresh data
// directory and waits until it prints its URL.
func startServer(t testing.TB, env map[string]string, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), env, args...)
}

// startServerIn is startServer on the given data directory.
func startServerIn(t testing.TB, dataDir string, env map[string]string, args ...string) *server {
	t.Helper()
	s := &server{dataDir: dataDir, env: env, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	pr, pw := io.Pipe()
	stderr := &testenv.Output{}
	args = append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.dataDir}, args...)
	go func() {
		err := run(ctx, args, getenv(env), pw, stderr)
		pw.Close()
		s.done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
			s.url = m[1]
			break
		}
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain the rest of the banner
	if s.url == "" {
		cancel()
		t.Fatalf("server did not start: %v\nstderr:\n%s", <-s.done, stderr)
	}
	s.stderr = stderr
	t.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			t.Errorf("serve returned %v\nstderr:\n%s", err, stderr)
		}
	})
	return s
}

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// cli runs one more usher command against the server's installation.
func (s *server) cli(t testing.TB, args ...string) (string, error) {
	t.Helper()
	addr := strings.TrimPrefix(s.url, "http://")
	var out, errOut bytes.Buffer
	args = append(args, "--data-dir", s.dataDir, "--addr", addr)
	err := run(context.Background(), args, getenv(s.env), &out, &errOut)
	if err != nil {
		t.Logf("usher %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String()), err
}

func get(t *testing.T, url, bearer string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestEmbeddedDefaultEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)

	if code, body := get(t, s.url+"/healthz", ""); code != 200 || !strings.Contains(string(body), `"version":`) {
		t.Errorf("healthz = %d %s, want ok and the version", code, body)
	}
	if code, body := get(t, s.url+"/readyz", ""); code != 200 {
		t.Errorf("readyz = %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "usher.db")); err != nil {
		t.Errorf("no SQLite file in the data dir: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(s.dataDir, "broker.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("broker.key: %v %v", fi, err)
	}

	code, body := get(t, s.url+"/.well-known/jwks.json", "")
	var published struct{ Keys []map[string]any }
	if err := json.Unmarshal(body, &published); code != 200 || err != nil || len(published.Keys) == 0 {
		t.Fatalf("jwks = %d %s", code, body)
	}
	for _, k := range published.Keys {
		if k["kid"] == "" || k["alg"] != "RS256" || k["use"] != "sig" || k["d"] != nil || k["p"] != nil {
			t.Errorf("bad published key %v", k)
		}
	}

	// A user token from the development provider opens the API.
	tok, err := s.cli(t, "token", "user", "--sub", "alice")
	if err != nil {
		t.Fatal(err)
	}
	code, body = get(t, s.url+"/api/me", tok)
	if code != 200 {
		t.Fatalf("/api/me = %d %s", code, body)
	}
	var who assistant.Me
	if err := json.Unmarshal(body, &who); err != nil || who.ID == "" || !strings.Contains(who.ID, s.url+"/dev/oidc") {
		t.Errorf("/api/me = %s", body)
	}
	if strings.Contains(who.ID, "alice") && who.ObjectID == "alice" {
		t.Errorf("principal must be keyed by object id, got %+v", who)
	}

	for name, bearer := range map[string]string{
		"no token":  "",
		"garbage":   "not-a-jwt",
		"tampered":  tok[:len(tok)-4] + "AAAA",
		"truncated": tok[:len(tok)/2],
	} {
		if code, body := get(t, s.url+"/api/me", bearer); code != 401 || strings.Contains(string(body), "crypto") {
			t.Errorf("%s: /api/me = %d %s", name, code, body)
		}
	}
	// A token in the query string is refused outright (RFC 6750 §5.3
	// discourages it: URLs end up in logs), even next to a valid header.
	if code, _ := get(t, s.url+"/api/me?access_token="+tok, tok); code != 400 {
		t.Errorf("token in the query string: %d, want 400", code)
	}

	// A broker token minted by the CLI verifies against the served JWKS.
	mcpTok, err := s.cli(t, "token", "mcp", "--sub", who.ID, "--run", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := jwks.NewRemote(s.url+"/.well-known/jwks.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := broker.NewVerifier(keys, &broker.VerifierOptions{Issuer: s.url, Audience: s.url + "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := v.Verify(context.Background(), mcpTok)
	if err != nil {
		t.Fatalf("broker token does not verify: %v", err)
	}
	if claims.Subject != who.ID || claims.RunID != "run-1" {
		t.Errorf("claims = %+v", claims)
	}

	code, body = get(t, s.url+"/metrics", "")
	for _, want := range []string{`usher_http_requests_total{code="200",method="GET",route="GET /healthz"}`, "usher_http_request_duration_seconds_bucket", `usher_assistant_compactions_total{outcome="invalid"} 0`, "go_goroutines", "usher_build_info{goversion="} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	if code, body := get(t, s.url+"/no/such/route", ""); code != 404 || !strings.Contains(string(body), `"not_found"`) {
		t.Errorf("unknown route = %d %s", code, body)
	}
}

func TestTokenUserRefusedWithExternalIssuer(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"token", "user", "--sub", "alice", "--data-dir", t.TempDir()},
		getenv(map[string]string{"USHER_IDENTITY_ISSUER": "https://issuer.example.com", "USHER_IDENTITY_AUDIENCES": "api://usher",
			"USHER_IDENTITY_REQUIRED_SCOPES": "access_as_user"}), &out, &errOut)
	if err == nil || out.Len() != 0 {
		t.Fatalf("want a refusal, got %v %q", err, out.String())
	}
}

func TestBadConfigurationIsReportedByKey(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"serve", "--data-dir", t.TempDir()},
		getenv(map[string]string{"USHER_LOG_LEVEL": "loud", "USHER_BROKER_TOKEN_LIFETIME": "1h"}), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "log.level") || !strings.Contains(err.Error(), "broker.token_lifetime") {
		t.Fatalf("err = %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"frobnicate"}, {"serve", "extra"}, {"token"}, {"token", "user"}, {"migrate", "--nope"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, getenv(nil), &out, &errOut); err == nil {
			t.Errorf("usher %v: want an error", args)
		}
	}
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	for range 2 {
		out.Reset()
		if err := run(context.Background(), []string{"migrate", "--data-dir", dir}, getenv(nil), &out, &errOut); err != nil {
			t.Fatalf("migrate: %v\n%s", err, errOut.String())
		}
		if !strings.Contains(out.String(), "newest schema") {
			t.Errorf("migrate said %q", out.String())
		}
	}
}

// TestGracefulShutdownOnSIGTERM runs the real binary and stops it the way
// an orchestrator does.
func TestGracefulShutdownOnSIGTERM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cmd := exec.Command(testenv.Usher(t), "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	stdout, _ := cmd.StdoutPipe()
	var stderr testenv.Output
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var url string
	for sc.Scan() {
		if m := runningAt.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	go io.Copy(io.Discard, stdout) //nolint:errcheck
	if url == "" {
		cmd.Process.Kill()
		t.Fatalf("no URL printed; stderr:\n%s", stderr.String())
	}
	if code, _ := get(t, url+"/healthz", ""); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("did not stop on SIGTERM\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped") {
		t.Errorf("no orderly stop in the log:\n%s", stderr.String())
	}
}

// TestReplicasOnPostgreSQL runs two servers on one PostgreSQL database with
// one key encryption key: they publish the same broker keys, and a user
// token printed by the CLI opens the API on both.
func TestReplicasOnPostgreSQL(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
	a := startServer(t, env, "--database-url", dbURL)
	b := startServer(t, env, "--database-url", dbURL)
	for _, s := range []*server{a, b} {
		if code, body := get(t, s.url+"/readyz", ""); code != 200 {
			t.Fatalf("readyz = %d %s", code, body)
		}
	}
	_, jwksA := get(t, a.url+"/.well-known/jwks.json", "")
	_, jwksB := get(t, b.url+"/.well-known/jwks.json", "")
	if string(jwksA) != string(jwksB) {
		t.Errorf("replicas publish different keys:\n%s\n%s", jwksA, jwksB)
	}
	// The development issuer is per public URL, so each replica accepts
	// tokens of its own issuer; both share the signing keys in the database.
	for _, s := range []*server{a, b} {
		s.env = env
		tok, err := s.cli(t, "token", "user", "--sub", "bob", "--database-url", dbURL)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := get(t, s.url+"/api/me", tok); code != 200 {
			t.Errorf("%s/api/me = %d %s", s.url, code, body)
		}
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "usher.db")); err == nil {
		t.Error("a PostgreSQL installation must not create a SQLite file")
	}
}

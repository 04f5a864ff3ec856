package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/usherhq/usher/bench/child"
)

// reviewGroup is the reviewers' group: USHER_REVIEW_GROUPS, and the group
// of the reviewer's token.
const reviewGroup = "security"

// usherRun is the `usher serve` of the run and what the client needs of
// it.
type usherRun struct {
	bin, cfg, addr, log string
	debugAddr           string // its debug listener (pprof), host:port
	token               string // the reviewer rita's API token
	scope               string // her tenant's principal id prefix, "issuer|tenant|"
	id                  string // her principal id
	proc                *child.Process
	client              *http.Client
}

// prepareUsher configures Usher on db as an operator would, with its data
// directory data (where its key encryption key is), migrates the database
// and mints the reviewer's token. Usher serves on addr, or on a port
// chosen now when addr is "": the development provider's issuer — and so
// the tenant's principal ids the log is filled with — is the address
// served on.
func prepareUsher(ctx context.Context, bin, dir, data, addr string, db *database) (*usherRun, error) {
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	var err error
	u := &usherRun{bin: bin, addr: addr, log: filepath.Join(dir, "usher.log"), cfg: filepath.Join(dir, "usher.yaml")}
	yaml := fmt.Sprintf("server:\n  data_dir: %q\n  debug_addr: 127.0.0.1:0\ndatabase:\n  url: %q\n", data, db.url)
	if err := os.WriteFile(u.cfg, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	if _, err := u.command(ctx, "migrate"); err != nil {
		return nil, err
	}
	if u.token, err = u.command(ctx, "token", "user", "--sub", "rita", "--group", reviewGroup); err != nil {
		return nil, err
	}
	if u.id, err = principalOf(u.token); err != nil {
		return nil, err
	}
	u.scope = u.id[:strings.LastIndexByte(u.id, '|')+1]
	tr := http.DefaultTransport.(*http.Transport).Clone()
	u.client = &http.Client{Transport: tr, Timeout: time.Minute}
	return u, nil
}

// principalOf is the principal id of a development token: issuer, tenant
// and object id (the subject without one), as identity.Principal.ID
// writes it; checkScope checks it against the server's GET /api/me.
func principalOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("usher token user printed no JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("the reviewer's token: %w", err)
	}
	var c struct{ Iss, Tid, Oid, Sub string }
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("the reviewer's token: %w", err)
	}
	oid := c.Oid
	if oid == "" {
		oid = c.Sub
	}
	return c.Iss + "|" + c.Tid + "|" + oid, nil
}

// command runs one usher command on the run's configuration and address,
// and returns its standard output.
func (u *usherRun) command(ctx context.Context, args ...string) (string, error) {
	args = append(args, "--config", u.cfg, "--addr", u.addr)
	cmd := exec.CommandContext(ctx, u.bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("usher %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// start starts `usher serve` with the reviewers' group, tracing off.
func (u *usherRun) start() error {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "USHER_") {
			env = append(env, kv)
		}
	}
	env = append(env, "USHER_REVIEW_GROUPS="+reviewGroup)
	p, _, err := child.StartEnv("usher", u.log, u.bin, env, child.UsherReady, "serve", "--config", u.cfg, "--addr", u.addr)
	u.proc = p
	if err != nil {
		return err
	}
	// Usher logs the debug listener's address before it serves.
	log, _ := os.ReadFile(u.log)
	m := debugListen.FindSubmatch(log)
	if m == nil {
		return fmt.Errorf("usher's log names no debug listener: %s", u.log)
	}
	u.debugAddr = string(m[1])
	return nil
}

var debugListen = regexp.MustCompile(`msg="debug listener \(pprof, expvar\)" listen=(\S+)`)

// profile runs load until d has passed while it takes a CPU profile of
// Usher from its debug listener, and writes the profile to file.
func (u *usherRun) profile(ctx context.Context, d time.Duration, file string, load func() error) error {
	done := make(chan error, 1)
	go func() {
		resp, err := u.client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", u.debugAddr, max(int(d/time.Second), 1)))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("pprof: %s", resp.Status)
		}
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		done <- err
	}()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if err := load(); err != nil {
			return err
		}
	}
}

// stop ends the server.
func (u *usherRun) stop() error {
	if u.proc == nil {
		return nil
	}
	return u.proc.Stop()
}

// get requests path (with its query) as the reviewer and returns the
// body; any status but 200 is an error.
func (u *usherRun) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+u.addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := readAll(resp)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, b)
	}
	return b, nil
}

// checkScope checks that the server sees the reviewer as the log was
// filled for: her principal id, so her tenant's records are the filled
// ones.
func (u *usherRun) checkScope(ctx context.Context) error {
	b, err := u.get(ctx, "/api/me")
	if err != nil {
		return err
	}
	var me struct{ ID string }
	if err := json.Unmarshal(b, &me); err != nil {
		return fmt.Errorf("GET /api/me: %w", err)
	}
	if me.ID != u.id {
		return fmt.Errorf("GET /api/me says the reviewer is %q; the log was filled for %q", me.ID, u.id)
	}
	return nil
}

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/status"
	"github.com/usherhq/usher/store/storetest"
)

// Two `usher serve` processes on one PostgreSQL database, heartbeating
// every 200ms: `usher status` (table and -json) and GET
// /api/admin/status, on either replica, list both with their version and
// address and the upstream they are configured with; /api/me says who is
// an admin; a person outside admin.groups is 403 admin_required and a
// broker token carrying the admins' group is refused. Killed (SIGKILL,
// so it cannot leave), one replica ages out within AliveIntervals
// heartbeats, and usher_replicas_alive says so.
func TestStatusOfTwoReplicas(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	bin := testenv.Usher(t)
	lb := newBalancer(t)
	configFile := filepath.Join(t.TempDir(), "usher.yaml")
	// The upstream is never reached: the replicas' health checks say it
	// is down.
	if err := os.WriteFile(configFile, []byte("mcp:\n  upstreams:\n    - name: github\n      url: http://127.0.0.1:9/mcp\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const interval = 200 * time.Millisecond
	env := []string{
		"USHER_DATABASE_URL=" + dbURL,
		"USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL=" + lb.url,
		"USHER_ADMIN_GROUPS=operators",
		"USHER_ADMIN_HEARTBEAT_INTERVAL=" + interval.String(),
		"USHER_LOG_LEVEL=warn",
	}
	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startProcess(t, bin, env, addrA, "--config", configFile)
	b := startProcess(t, bin, env, addrB, "--config", configFile)
	lb.set(a.url, b.url)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(args, "--config", configFile, "--data-dir", t.TempDir())...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		return string(out), err
	}
	token := func(args ...string) string {
		t.Helper()
		out, err := cli(append([]string{"token"}, args...)...)
		if err != nil {
			t.Fatalf("usher token %v: %v", args, err)
		}
		return strings.TrimSpace(out)
	}
	olga, alice := token("user", "--sub", "olga", "--group", "operators"), token("user", "--sub", "alice", "--group", "staff")

	// The CLI, from the database alone. The upstream is down as both
	// replicas' health checks see it, once each has checked it and
	// reported that in a heartbeat: before that it is unknown.
	var rep status.Report
	var statusErr error
	testenv.WaitFor(t, 30*time.Second, func() bool {
		var out string
		out, statusErr = cli("status", "-json")
		rep = status.Report{}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("usher status -json printed %s: %v (%v)", out, err, statusErr)
		}
		return len(rep.Upstreams) == 1 && rep.Upstreams[0].State == status.StateDown && len(rep.Upstreams[0].Replicas) == 2 &&
			rep.Upstreams[0].Replicas[0].State == status.StateDown && rep.Upstreams[0].Replicas[1].State == status.StateDown
	})
	if exit := (*exec.ExitError)(nil); !errors.As(statusErr, &exit) || exit.ExitCode() != 1 {
		t.Errorf("usher status -json with an upstream down = %v, want exit 1", statusErr)
	}
	addrs := map[string]string{}
	for _, r := range rep.Replicas {
		addrs[r.Addr] = r.ID
		if r.Version == "" || r.StartedAt.IsZero() || r.LastSeen.IsZero() {
			t.Errorf("replica %+v: want its version, start and last heartbeat", r)
		}
	}
	if len(rep.Replicas) != 2 || addrs[addrA] == "" || addrs[addrB] == "" {
		t.Fatalf("usher status lists %+v, want the replicas at %s and %s", rep.Replicas, addrA, addrB)
	}
	if rep.Upstreams[0].Name != "github" || rep.Upstreams[0].Replicas[0].Error == "" {
		t.Errorf("upstreams = %+v, want github down with why", rep.Upstreams)
	}
	if !slices.Equal(rep.Problems, []string{"upstream github is down"}) || rep.Queue.Queued != 0 || rep.Approvals.Oldest != nil {
		t.Errorf("report = %+v, want the upstream down as the one problem, an empty queue, no approval", rep)
	}
	text, _ := cli("status")
	if !strings.Contains(text, "2 replicas alive") || !strings.Contains(text, addrs[addrA]) || !strings.Contains(text, addrs[addrB]) ||
		!strings.Contains(text, "upstream github is down") {
		t.Errorf("usher status =\n%s\nwant both replicas and the upstream down", text)
	}

	// The API, on either replica, to admins only.
	for _, p := range []*process{a, b} {
		code, body := get(t, p.url+"/api/admin/status", olga)
		var got status.Report
		if err := json.Unmarshal(body, &got); code != 200 || err != nil || len(got.Replicas) != 2 {
			t.Errorf("olga's GET %s/api/admin/status = %d %s, want both replicas", p.url, code, body)
		}
	}
	var who struct {
		ID    string
		Admin bool
	}
	for name, c := range map[string]struct {
		token string
		admin bool
	}{"olga": {olga, true}, "alice": {alice, false}} {
		_, body := get(t, a.url+"/api/me", c.token)
		if err := json.Unmarshal(body, &who); err != nil || who.Admin != c.admin {
			t.Errorf("%s's /api/me = %s, want admin %v", name, body, c.admin)
		}
	}
	brokerToken := token("mcp", "--sub", who.ID, "--group", "operators")
	for name, c := range map[string]struct {
		token string
		code  int
		err   string
	}{
		"alice, not in admin.groups":          {alice, 403, "admin_required"},
		"a broker token with the admin group": {brokerToken, 403, "broker_token_refused"},
		"no token":                            {"", 401, "unauthenticated"},
	} {
		code, body := apitest.Call(t, "GET", a.url+"/api/admin/status", c.token, "")
		if e, _ := body["error"].(map[string]any); code != c.code || e["code"] != c.err {
			t.Errorf("%s: GET /api/admin/status = %d %v, want %d %s", name, code, body, c.code, c.err)
		}
	}
	if alive := replicasAlive(t, a.url); alive != 2 {
		t.Errorf("usher_replicas_alive = %v on a, want 2", alive)
	}

	// b dies without leaving: it ages out.
	killed := time.Now()
	b.cmd.Process.Kill()
	<-b.done
	testenv.WaitFor(t, 30*time.Second, func() bool {
		_, body := get(t, a.url+"/api/admin/status", olga)
		var got status.Report
		return json.Unmarshal(body, &got) == nil && len(got.Replicas) == 1 && got.Replicas[0].Addr == addrA
	})
	t.Logf("a killed replica left the status %v after its death (heartbeat %v, alive for %d heartbeats)",
		time.Since(killed).Round(time.Millisecond), interval, status.AliveIntervals)
	out, _ := cli("status", "-json") // exits 1: the upstream is down
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Replicas) != 1 || rep.Replicas[0].Addr != addrA {
		t.Errorf("usher status -json after the kill = %s, %v; want a only", out, err)
	}
	testenv.WaitFor(t, 30*time.Second, func() bool { return replicasAlive(t, a.url) == 1 })

	// a stops as SIGTERM asks: it leaves at once, and `usher status`
	// says that no replica is alive, exiting 1.
	a.cmd.Process.Signal(os.Interrupt)
	<-a.done
	text, err := cli("status")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(text, "no replica is alive") {
		t.Errorf("usher status with no replica = %v:\n%s\nwant exit 1 and the problem", err, text)
	}
}

var replicasAliveLine = regexp.MustCompile(`(?m)^usher_replicas_alive (\S+)$`)

// replicasAlive reads usher_replicas_alive from the replica at url.
func replicasAlive(t *testing.T, url string) float64 {
	t.Helper()
	_, body := get(t, url+"/metrics", "")
	m := replicasAliveLine.FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no usher_replicas_alive:\n%s", body)
	}
	var v float64
	if err := json.Unmarshal(m[1], &v); err != nil {
		t.Fatal(err)
	}
	return v
}

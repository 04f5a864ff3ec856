package helm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/testenv"
)

// TestChartBoots runs the rendered chart: the production-like values,
// with the addresses of this machine's issuer, model server and load
// balancer set as values. The migration Job's command runs once, then two
// replicas run `usher serve` with the Deployment's arguments, environment
// (its secretKeyRefs resolved from the Secrets the test supplies, as the
// operator would create them) and usher.yaml, exactly as rendered, but for
// the listen address: two processes on one machine cannot share a port,
// so each gets a free loopback one through USHER_SERVER_ADDR (which
// overrides the file's server.addr). The pods' volumes are directories:
// the ConfigMap's files, and /data an empty directory of each pod's own;
// paths in the arguments and in usher.yaml that name a mount are read as
// the directory mounted there.
//
// A conversation's turns land on both replicas; then a rolling restart
// replaces each (a new replica ready first, then the old one stopped with
// SIGTERM) while a client sends requests in a loop, and loses none.
func TestChartBoots(t *testing.T) {
	t.Parallel()
	f := newChartFixture(t)
	bin, r, issuer, lb, dbURL := f.bin, f.r, f.issuer, f.lb, f.dbURL
	secrets := f.secrets(freshKEK())

	job := r.migration(t).Spec.Template.Spec
	migrate := newPod(t, bin, r, job, secrets)
	if out, err := migrate.run(); err != nil {
		t.Fatalf("the migration Job's command: %v\n%s", err, out)
	}
	var tables int
	queryRow(t, dbURL, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", &tables)
	if tables == 0 {
		t.Fatal("the migration created no table")
	}
	// The tool lock in the values reviews the tools the replicas offer:
	// a stale one would make them wait for approvals.
	diff := *migrate
	diff.args = append([]string{"tools", "diff"}, migrate.args[1:]...)
	if out, err := diff.run(); err != nil {
		t.Errorf("usher tools diff with the rendered lock: %v\n%s", err, out)
	}

	spec := r.deployment(t).Spec.Template.Spec
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	preStop := time.Duration(spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds) * time.Second
	a, b := newPod(t, bin, r, spec, secrets).start(t), newPod(t, bin, r, spec, secrets).start(t)
	lb.set(a, b)

	token, err := issuer.provider.IssueAccessToken(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, base: lb.url, token: token}
	run := c.createRun()

	// The turns land on both replicas: the replica that ran the run's
	// latest turn holds its MCP session (one replica at a time) until
	// assistant.hold_idle (5 min), so each is seen holding it once.
	sent := 0
	var heldA, heldB bool
	for i := 0; !heldA || !heldB; i++ {
		if i == 12 {
			t.Fatalf("after %d turns, replica a held the run's session: %v, b: %v; its turns did not land on both", sent, heldA, heldB)
		}
		to := a
		if i%2 == 1 {
			to = b
		}
		// Straight to one replica: its scheduler is woken first.
		if code := c.post(to.url, run, fmt.Sprintf("message %d", i), "?wait=60s"); code != http.StatusOK {
			t.Fatalf("message %d = %d, want 200 (answered)", i, code)
		}
		sent++
		heldA = heldA || a.held(t) > 0
		heldB = heldB || b.held(t) > 0
	}

	// The rolling restart. A client sends requests through the Service in
	// a loop: the Service routes to ready endpoints only, and a pod leaves
	// them as it starts terminating; its preStop pause lets the routing
	// change and what was already sent to it be answered before SIGTERM
	// (here: until the Service has no connection to it open or being
	// opened, within the rendered pause). So "no request lost" means:
	// every request the client sends gets its answer — a read answered
	// 200, a message accepted 202 — with no retry but the Service's own,
	// a connection refused tried on the next endpoint.
	reads := 0
	endLoop := requestLoop(t, func(i int) string {
		if i%5 == 4 {
			if code := c.post(lb.url, run, fmt.Sprintf("during the restart %d", i), ""); code != http.StatusAccepted {
				return fmt.Sprintf("message %d: %d", i, code)
			}
			sent++
			return ""
		}
		if code := c.get("/api/me"); code != http.StatusOK {
			return fmt.Sprintf("GET /api/me %d: %d", i, code)
		}
		reads++
		return ""
	})
	// maxSurge 1, maxUnavailable 0: a new replica is ready before an old
	// one stops.
	current := []*pod{a, b}
	for i, old := range []*pod{a, b} {
		next := newPod(t, bin, r, spec, secrets).start(t)
		current = append(slices.DeleteFunc(current, func(p *pod) bool { return p == old }), next)
		lb.set(current...)
		before := lb.served()
		// The preStop pause: the Service (here at once) and the ingress
		// stop routing to the pod, and what they sent it is answered
		// before SIGTERM closes its listener.
		testenv.WaitFor(t, preStop, func() bool { return lb.open(old) == 0 })
		old.stop(t, grace)
		// The client kept going through the restart of this replica.
		testenv.WaitFor(t, 30*time.Second, func() bool { return lb.served() >= before+10 })
		t.Logf("replica %d replaced", i+1)
	}
	failed := endLoop()
	for _, p := range []*pod{a, b} {
		p.checkReadOnly(t)
	}
	if len(failed) > 0 {
		t.Errorf("%d requests lost during the rolling restart:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if lb.refused() > 0 {
		t.Logf("the Service retried %d refused connections", lb.refused())
	}

	// Every message got exactly one turn, completed, wherever it ran.
	var events []event
	testenv.WaitFor(t, 90*time.Second, func() bool {
		events = c.events(run)
		return count(events, "agent.turn.end") >= sent
	})
	if n := count(events, "message.user"); n != sent {
		t.Errorf("%d user messages stored, %d sent", n, sent)
	}
	if n := count(events, "agent.turn.end"); n != sent {
		t.Errorf("%d turns ended for %d messages", n, sent)
	}
	for _, e := range events {
		if e.Type == "agent.turn.end" && e.Data["status"] != "completed" {
			t.Errorf("a turn ended %v", e.Data)
		}
	}
	t.Logf("%d messages answered, %d reads, across 4 replicas", sent, reads)
}

// requestLoop sends a client's requests in a loop, request(0), request(1),
// …, one at a time, until the function it returns is called; that stops
// the loop, waits for the request under way, and returns what the
// requests reported failed (request returns "" for none). The loop ends
// before the test does, however it ends. What request writes is the
// test's to read once the loop has stopped.
func requestLoop(t *testing.T, request func(i int) string) (stop func() []string) {
	t.Helper()
	done := make(chan struct{})
	var loop sync.WaitGroup
	var failed []string
	end := sync.OnceFunc(func() { close(done); loop.Wait() })
	t.Cleanup(end)
	loop.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := request(i); err != "" {
				failed = append(failed, err)
			}
		}
	})
	return func() []string {
		end()
		return failed
	}
}

// chartFixture is what a test of the running chart starts from: the
// usher binary, a database of its own, the organisation's issuer and
// model server, the Service, and the production values rendered with
// their addresses (and the test's own values).
type chartFixture struct {
	bin, dbURL string
	issuer     *issuer
	lb         *service
	r          *release
}

func newChartFixture(t *testing.T, values ...string) *chartFixture {
	t.Helper()
	f := &chartFixture{bin: testenv.Usher(t), dbURL: ownDatabase(t, testenv.DatabaseURL(t)), issuer: newIssuer(t), lb: newService(t)}
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	ms.RequireAPIKey("model-key")
	f.r = render(t, append([]string{"-f", productionValues,
		"--set", "usher.publicURL=" + f.lb.url,
		"--set", "usher.identity.issuer=" + f.issuer.url,
		"--set-json", "usher.identity.tenants=[]",
		"--set", "usher.model.baseURL=" + ms.URL(),
		"--set", "usher.model.name=scripted",
		// A client that sends without a pause, every message to one
		// run, whose budget of slices (assistant.max_slices) each second
		// of a replica's stop spends further: the drain is short.
		"--set", "usher.shutdownDelaySeconds=1",
	}, values...)...)
	return f
}

// freshKEK is a new key-encryption key, as `openssl rand -base64 32` makes.
func freshKEK() string {
	k := make([]byte, 32)
	rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// secrets are the Secrets the production values name, as the operator
// creates them, with the key-encryption key kek, and the previous keys in
// the Secret usher-kek-previous when there are any (the chart reads it
// when present).
func (f *chartFixture) secrets(kek string, previous ...string) map[string]map[string]string {
	s := map[string]map[string]string{
		"usher-broker":   {"key-encryption-key": kek},
		"usher-postgres": {"url": f.dbURL},
		"usher-entra":    {"client-secret": "web-client-secret"},
		"usher-model":    {"api-key": "model-key"},
	}
	if len(previous) > 0 {
		s["usher-kek-previous"] = map[string]string{"previous-key-encryption-keys": strings.Join(previous, ",")}
	}
	return s
}

// releaseSecrets are the Secrets of secrets, but for the key-encryption
// key and the previous ones, which are in the Secret named after the
// release (usher), as the chart reads them without an existingSecret.
func (f *chartFixture) releaseSecrets(kek string, previous ...string) map[string]map[string]string {
	s := f.secrets(kek)
	delete(s, "usher-broker")
	s["usher"] = map[string]string{"key-encryption-key": kek}
	if len(previous) > 0 {
		s["usher"]["previous-key-encryption-keys"] = strings.Join(previous, ",")
	}
	return s
}

// ownDatabase creates a database of the test's own on the server of the
// admin URL, empty (the migration Job migrates it), and drops it at the
// end; it returns its URL.
func ownDatabase(t *testing.T, admin string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", testenv.DatabaseURLEnv, err)
	}
	defer conn.Close(ctx)
	name := "usher_chart_" + strings.ToLower(rand.Text()[:12])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String()
}

func queryRow(t *testing.T, dbURL, sql string, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatal(err)
	}
}

// issuer is the organisation's OIDC issuer: Usher's development provider
// served on its own, as an external issuer, over loopback HTTP.
type issuer struct {
	url      string
	provider *devoidc.Provider
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// The audience and scope of the production values' API registration.
	p, err := devoidc.New(&devoidc.Options{
		Issuer: srv.URL, Keys: staticKey{key}, Audience: "api://usher", Scopes: []string{"access_as_user"},
		ClientID: "0d4c8a43-42b7-4b50-a1c3-6f7fba7b8e6e", RedirectURIs: []string{"http://127.0.0.1/auth/callback"},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", p.Handler())
	return &issuer{url: srv.URL, provider: p}
}

// staticKey is one signing key, published as the issuer's key set.
type staticKey struct{ key *rsa.PrivateKey }

func (k staticKey) Signer(context.Context) (string, *rsa.PrivateKey, error) {
	return "k1", k.key, nil
}

func (k staticKey) PublicKeys(context.Context) (jose.JSONWebKeySet, error) {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}}, nil
}

// service is the Kubernetes Service (and the ingress) in front of the
// replicas: its URL is Usher's public URL. It opens a connection per
// request (no keep-alive) to the next of its endpoints in turn, and tries
// the next one when a connection is refused — nothing was sent on it.
type service struct {
	url string

	mu        sync.Mutex
	endpoints []string
	next      int
	nServed   int
	nRefused  int
	conns     map[string]int // open connections by endpoint
}

func newService(t *testing.T) *service {
	s := &service{conns: map[string]int{}}
	tr := &http.Transport{DisableKeepAlives: true, DialContext: s.dial}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "usher.service"})
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		// Streams (and the ?wait of a message) are passed on as they come.
		FlushInterval: -1,
	}
	// A request's body is read whole before it is forwarded, as a
	// Kubernetes ingress (nginx) does by default: Go's HTTP/1 server
	// closes the body once the response begins, and the proxy's
	// transport, reading it once more after its declared length, then
	// closed its connection to the pod, cutting a response stream
	// (golang/go#40747).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(tr.CloseIdleConnections)
	s.url = srv.URL
	return s
}

// set makes pods the ready endpoints.
func (s *service) set(pods ...*pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = nil
	for _, p := range pods {
		s.endpoints = append(s.endpoints, p.addr)
	}
}

// dial connects to the next endpoint. The connection counts as open to
// it from the moment it is chosen, under the lock that reads the
// endpoints, so that a pod removed from them has none being opened once
// its count is zero.
func (s *service) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	err := errors.New("the service has no endpoints")
	for range 3 {
		s.mu.Lock()
		if len(s.endpoints) == 0 {
			s.mu.Unlock()
			break
		}
		ep := s.endpoints[s.next%len(s.endpoints)]
		s.next++
		s.conns[ep]++
		s.mu.Unlock()
		var c net.Conn
		if c, err = d.DialContext(ctx, network, ep); err == nil {
			s.mu.Lock()
			s.nServed++
			s.mu.Unlock()
			return &trackedConn{Conn: c, closed: sync.OnceFunc(func() { s.closed(ep) })}, nil
		}
		s.closed(ep)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		s.mu.Lock()
		s.nRefused++
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("no endpoint accepts connections: %w", err)
}

func (s *service) closed(ep string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns[ep]--
}

// trackedConn tells the Service when it is closed.
type trackedConn struct {
	net.Conn
	closed func()
}

func (c *trackedConn) Close() error {
	c.closed()
	return c.Conn.Close()
}

// open is the number of connections the Service has open to p.
func (s *service) open(p *pod) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[p.addr]
}

func (s *service) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nServed
}

func (s *service) refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRefused
}

// pod is one pod of the rendered chart, as a process on this machine: its
// container's arguments and environment, its volumes as directories.
type pod struct {
	bin    string
	args   []string
	env    []string
	addr   string // the listen address, host:port
	url    string
	cmd    *exec.Cmd
	exited chan error
	out    *testenv.Output
	// readOnly holds the files of the pod's read-only volumes (the
	// ConfigMap's), by path, with their content.
	readOnly map[string]string
	roDirs   []string
}

// checkReadOnly checks that the pod wrote nothing to its read-only
// volumes: with a read-only root filesystem, its emptyDir is all it may
// write.
func (p *pod) checkReadOnly(t *testing.T) {
	t.Helper()
	for _, dir := range p.roDirs {
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if want, ok := p.readOnly[path]; err != nil || !ok || string(b) != want {
				t.Errorf("usher wrote %s, in a read-only volume", path)
			}
			return nil
		})
	}
}

// newPod prepares the first container of spec: its volumes (a ConfigMap's
// files, an emptyDir) as directories, its arguments and usher.yaml with
// the mount paths read as those directories, and its environment with
// each secretKeyRef resolved from secrets (or from a Secret the chart
// renders).
func newPod(t *testing.T, bin string, r *release, spec corev1.PodSpec, secrets map[string]map[string]string) *pod {
	t.Helper()
	c := spec.Containers[0]
	root := t.TempDir()
	p := &pod{readOnly: map[string]string{}}
	mounts := map[string]string{} // mount path -> directory
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		mounts[m.MountPath] = dir
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("mount %s names no volume", m.Name)
		}
		switch v := spec.Volumes[i]; {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			p.roDirs = append(p.roDirs, dir)
			cm := r.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Fatalf("ConfigMap %s is not rendered", v.ConfigMap.Name)
			}
			for name, data := range cm.Data {
				if name == "usher.yaml" {
					data = hostPaths(t, data, mounts)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o444); err != nil {
					t.Fatal(err)
				}
				p.readOnly[filepath.Join(dir, name)] = data
			}
		default:
			t.Fatalf("volume %s: only emptyDir and ConfigMap volumes are run here", v.Name)
		}
	}
	p.bin, p.addr, p.out = bin, testenv.FreeAddr(t), &testenv.Output{}
	p.url = "http://" + p.addr
	for _, a := range c.Args {
		p.args = append(p.args, hostPath(a, mounts))
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "USHER_") {
			p.env = append(p.env, kv)
		}
	}
	for _, e := range c.Env {
		v, ok := resolve(t, r, e, secrets)
		if ok {
			p.env = append(p.env, e.Name+"="+v)
		}
	}
	p.env = append(p.env, "USHER_SERVER_ADDR="+p.addr)
	return p
}

// hostPath reads a path in the container as the directory mounted there.
func hostPath(p string, mounts map[string]string) string {
	for mp, dir := range mounts {
		if p == mp {
			return dir
		}
		if rest, ok := strings.CutPrefix(p, mp+"/"); ok {
			return filepath.Join(dir, rest)
		}
	}
	return p
}

// hostPaths rewrites the strings of a YAML document that are paths under
// a mount; the rest of it is kept as it is.
func hostPaths(t *testing.T, doc string, mounts map[string]string) string {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			n.Value = hostPath(n.Value, mounts)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&n)
	out, err := yaml.Marshal(&n)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// resolve is the value of one environment variable of the container.
func resolve(t *testing.T, r *release, e corev1.EnvVar, secrets map[string]map[string]string) (string, bool) {
	t.Helper()
	if e.ValueFrom == nil {
		return e.Value, true
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref == nil {
		t.Fatalf("%s: only secretKeyRef is resolved here", e.Name)
	}
	if v, ok := secrets[ref.Name][ref.Key]; ok {
		return v, true
	}
	if s := r.secrets[ref.Name]; s != nil {
		if v, ok := s.Data[ref.Key]; ok {
			return string(v), true
		}
	}
	if ref.Optional != nil && *ref.Optional {
		return "", false
	}
	t.Fatalf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
	return "", false
}

// run runs the container's command to its end (the migration Job).
func (p *pod) run() (string, error) {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// start starts the container's command and waits until /readyz answers
// 200, as the readiness probe would.
func (p *pod) start(t *testing.T) *pod {
	t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("usher serve at %s:\n%s", p.addr, p.out)
		}
	})
	testenv.WaitFor(t, 60*time.Second, func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("usher serve exited before it was ready: %v\n%s", err, p.out)
		default:
		}
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// stop sends SIGTERM, as the kubelet does after the preStop pause, and
// waits for a clean exit within the grace period.
func (p *pod) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("usher serve ended with %v after SIGTERM\n%s", err, p.out)
		}
	case <-time.After(grace):
		t.Fatalf("usher serve did not stop within the grace period (%s): the kubelet would kill it\n%s", grace, p.out)
	}
}

// held is the pod's usher_assistant_held_sessions.
func (p *pod) held(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "usher_assistant_held_sessions "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("no usher_assistant_held_sessions in /metrics")
	return 0
}

// client is a person's program calling the Assistant API.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (c *client) do(method, url, body string) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *client) get(path string) int {
	code, _ := c.do("GET", c.base+path, "")
	return code
}

func (c *client) createRun() string {
	c.t.Helper()
	code, body := c.do("POST", c.base+"/api/assistant/runs", "")
	var run struct {
		RunID string `json:"runId"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &run) != nil || run.RunID == "" {
		c.t.Fatalf("create a run = %d %s", code, body)
	}
	return run.RunID
}

// post sends a message to the run through base (the Service or one
// replica) and returns the status.
func (c *client) post(base, run, content, query string) int {
	b, _ := json.Marshal(map[string]string{"content": content})
	code, body := c.do("POST", base+"/api/assistant/runs/"+run+"/messages"+query, string(b))
	if code >= 300 {
		c.t.Logf("post %q = %d %s", content, code, body)
	}
	return code
}

type event struct {
	Seq  int64          `json:"seq"`
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// events is the run's whole event log.
func (c *client) events(run string) []event {
	c.t.Helper()
	var all []event
	for after := int64(0); ; {
		code, body := c.do("GET", fmt.Sprintf("%s/api/assistant/runs/%s/events?after=%d", c.base, run, after), "")
		var page struct {
			Events  []event `json:"events"`
			HasMore bool    `json:"hasMore"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
			c.t.Fatalf("events = %d %s", code, body)
		}
		all = append(all, page.Events...)
		if len(page.Events) > 0 {
			after = page.Events[len(page.Events)-1].Seq
		}
		if !page.HasMore {
			return all
		}
	}
}

func count(events []event, typ string) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

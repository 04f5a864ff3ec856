package helm

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// TestChartRotatesTheKeyEncryptionKey runs the four steps of
// docs/deploy.md's key-encryption-key replacement on the rendered chart,
// as an operator would: the new key among the previous ones
// (secrets.previousKeyEncryptionKeys) and a roll; the two swapped and a
// roll; `usher keys reseal` with the pod's command line; the old key
// dropped and a roll. Two replicas serve throughout, behind the Service,
// and a client that keeps reading, and keeps using one stateful MCP
// session, loses no request; the published signing keys never change; a
// conversation goes on at every step; and at the end the audit log
// verifies, the old key alone opens nothing, and a session sealed under
// the old key is refused (docs: removed sooner than its lifetime, it ends
// early) while a new one is served.
//
// It runs with the keys in Secrets of their own (existingSecret), and in
// the Secret named after the release, which the chart reads when no
// existingSecret is named.
func TestChartRotatesTheKeyEncryptionKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		values  []string
		secrets func(f *chartFixture, kek string, previous ...string) map[string]map[string]string
	}{
		{"existing secrets", []string{"--set", "secrets.previousKeyEncryptionKeys.existingSecret=usher-kek-previous"}, (*chartFixture).secrets},
		{"the release's secret", []string{"--set", "secrets.keyEncryptionKey.existingSecret="}, (*chartFixture).releaseSecrets},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newChartFixture(t, tc.values...)
			rotate(t, f, func(kek string, previous ...string) map[string]map[string]string {
				return tc.secrets(f, kek, previous...)
			})
		})
	}
}

// rotate runs the four steps on f, whose Secrets, as the operator creates
// them at each step, secrets makes.
func rotate(t *testing.T, f *chartFixture, secrets func(kek string, previous ...string) map[string]map[string]string) {
	bin, r, issuer, lb := f.bin, f.r, f.issuer, f.lb
	oldKEK, newKEK := freshKEK(), freshKEK()
	spec := r.deployment(t).Spec.Template.Spec
	job := r.migration(t).Spec.Template.Spec
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	// command runs usher with the migration Job's configuration and the
	// Secrets of one step, as `kubectl exec … usher` would.
	command := func(s map[string]map[string]string, args ...string) (string, error) {
		p := newPod(t, bin, r, job, s)
		p.args = append(args, p.args[1:]...)
		return p.run()
	}
	if out, err := command(secrets(oldKEK), "migrate"); err != nil {
		t.Fatalf("the migration Job's command: %v\n%s", err, out)
	}
	pods := []*pod{newPod(t, bin, r, spec, secrets(oldKEK)).start(t), newPod(t, bin, r, spec, secrets(oldKEK)).start(t)}
	lb.set(pods...)

	token, err := issuer.provider.IssueAccessToken(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, base: lb.url, token: token}
	run := c.createRun()
	turns := 0
	converse := func(step string) {
		t.Helper()
		if code := c.post(lb.url, run, "at "+step, "?wait=60s"); code != http.StatusOK {
			t.Fatalf("%s: a message = %d, want 200 (answered)", step, code)
		}
		turns++
	}
	converse("the start")
	keySet := func() string {
		t.Helper()
		code, jwks := c.do("GET", lb.url+"/.well-known/jwks.json", "")
		code2, auditKeys := c.do("GET", lb.url+"/.well-known/usher-audit-key", "")
		if code != http.StatusOK || code2 != http.StatusOK {
			t.Fatalf("the published keys: %d %s, %d %s", code, jwks, code2, auditKeys)
		}
		return string(jwks) + "\n" + string(auditKeys)
	}
	published := keySet()
	// The broker token is what the command prints on its standard output.
	mint := newPod(t, bin, r, job, secrets(oldKEK))
	cmd := exec.Command(mint.bin, append([]string{"token", "mcp", "--sub", "alice"}, mint.args[1:]...)...)
	cmd.Env = mint.env
	brokerToken, err := cmd.Output()
	if err != nil {
		t.Fatalf("usher token mcp: %v", err)
	}
	mcp := &mcpClient{t: t, url: lb.url + "/mcp", token: strings.TrimSpace(string(brokerToken))}
	session := mcp.initialize()

	// roll replaces each pod with one of the step's Secrets, a new one
	// ready before an old one stops, while a client reads the API and
	// lists the tools in the MCP session through the Service.
	roll := func(step string, s map[string]map[string]string) {
		t.Helper()
		endLoop := requestLoop(t, func(i int) string {
			switch i % 3 {
			case 0:
				if code := c.get("/api/me"); code != http.StatusOK {
					return fmt.Sprintf("GET /api/me: %d", code)
				}
			case 1:
				if code, body := mcp.listTools(session); code != http.StatusOK {
					return fmt.Sprintf("tools/list in the session of before: %d %s", code, body)
				}
			case 2:
				// A session begun now, sealed by one replica, used on the
				// next (the Service takes turns): a replica not yet rolled
				// opens what a rolled one sealed.
				fresh, ierr := mcp.tryInitialize()
				if ierr != "" {
					return "initialize: " + ierr
				}
				if code, body := mcp.listTools(fresh); code != http.StatusOK {
					return fmt.Sprintf("tools/list in a session begun during the roll: %d %s", code, body)
				}
			}
			return ""
		})
		for _, old := range slices.Clone(pods) {
			next := newPod(t, bin, r, spec, s).start(t)
			pods = append(slices.DeleteFunc(pods, func(p *pod) bool { return p == old }), next)
			lb.set(pods...)
			testenv.WaitFor(t, 5*time.Second, func() bool { return lb.open(old) == 0 })
			old.stop(t, grace)
		}
		if failed := endLoop(); len(failed) > 0 {
			t.Errorf("%s: %d requests failed during the roll:\n%s", step, len(failed), strings.Join(failed, "\n"))
		}
		if got := keySet(); got != published {
			t.Errorf("%s: the published keys changed:\n%s\nwant\n%s", step, got, published)
		}
		converse(step)
	}

	roll("step 1, the new key among the previous ones", secrets(oldKEK, newKEK))
	roll("step 2, the keys swapped", secrets(newKEK, oldKEK))
	out, err := command(secrets(newKEK, oldKEK), "keys", "reseal")
	if err != nil || !strings.Contains(out, "audit signing keys: ") || strings.Contains(out, "(0 resealed now)") {
		t.Fatalf("step 3, usher keys reseal: %v\n%s", err, out)
	}
	if out, err := command(secrets(newKEK, oldKEK), "keys", "reseal"); err != nil || !strings.Contains(out, "(0 resealed now)") {
		t.Errorf("usher keys reseal again: %v\n%s; want nothing left to reseal", err, out)
	}

	// Step 4: the old key dropped. The session sealed under it ends,
	// as the docs say of a key dropped within a session's lifetime; the
	// client initializes again. The roll's client uses the new session.
	without := newPod(t, bin, r, spec, secrets(newKEK)).start(t)
	if code, body := mcp.listToolsAt(without.url+"/mcp", session); code != http.StatusNotFound {
		t.Errorf("a session sealed under the dropped key, on a replica without it: %d %s, want 404", code, body)
	}
	session = mcp.initializeAt(without.url + "/mcp")
	without.stop(t, grace)
	roll("step 4, the old key dropped", secrets(newKEK))

	if out, err := command(secrets(newKEK), "audit", "verify"); err != nil || !strings.Contains(out, "audit log intact") {
		t.Errorf("usher audit verify with the new key alone: %v\n%s", err, out)
	}
	if out, err := command(secrets(oldKEK), "token", "mcp", "--sub", "alice"); err == nil || !strings.Contains(out, "cannot decrypt") {
		t.Errorf("usher token mcp with the old key alone: %v\n%s; want the stored keys refused", err, out)
	}
	events := c.events(run)
	if n := count(events, "agent.turn.end"); n != turns {
		t.Errorf("%d turns ended for %d messages", n, turns)
	}
}

// mcpClient speaks just enough of MCP's Streamable HTTP transport to hold
// one stateful session: its handshake and tools/list.
type mcpClient struct {
	t     *testing.T
	url   string
	token string
}

func (m *mcpClient) post(url, session, body string) (int, string, http.Header) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error(), http.Header{}
	}
	req.Header.Set("Authorization", "Bearer "+m.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), http.Header{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// initialize begins a session through the Service.
func (m *mcpClient) initialize() string { return m.initializeAt(m.url) }

// initializeAt begins a session at url (a replica, or the Service).
func (m *mcpClient) initializeAt(url string) string {
	m.t.Helper()
	session, err := m.begin(url)
	if err != "" {
		m.t.Fatal(err)
	}
	return session
}

// tryInitialize begins a session through the Service, from a goroutine
// other than the test's: it reports what failed instead of failing.
func (m *mcpClient) tryInitialize() (session, err string) { return m.begin(m.url) }

// begin sends the handshake to url: the session's id, or what failed.
func (m *mcpClient) begin(url string) (session, err string) {
	code, body, h := m.post(url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"rotation-drill","version":"1"}}}`)
	session = h.Get("Mcp-Session-Id")
	if code != http.StatusOK || session == "" {
		return "", fmt.Sprintf("initialize = %d (session %q) %s", code, session, body)
	}
	// Through the Service this goes to the other replica.
	if code, body, _ := m.post(url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		return "", fmt.Sprintf("notifications/initialized = %d %s", code, body)
	}
	return session, ""
}

// listTools lists the tools in session through the Service.
func (m *mcpClient) listTools(session string) (int, string) { return m.listToolsAt(m.url, session) }

// listToolsAt lists the tools in session at url; a 200 must hold a list.
func (m *mcpClient) listToolsAt(url, session string) (int, string) {
	code, body, _ := m.post(url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if code == http.StatusOK && !strings.Contains(body, `"tools"`) {
		return 0, "no tools in the answer: " + body
	}
	return code, body
}

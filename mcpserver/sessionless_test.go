//lint:file-ignore SA1019 the test passes roots on, which protocol 2026-07-28 deprecates.

package mcpserver

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
)

// TestStatefulEndpointServesSessionless: a stateful endpoint serves a
// client of protocol 2026-07-28 as the stateless one does — no session,
// its requests on any replica, input requests in rounds whose retry
// another replica takes — and gives a client of 2025-11-25 on the same
// endpoint a session, with the capabilities a session has.
func TestStatefulEndpointServesSessionless(t *testing.T) {
	t.Parallel()
	cfg := func() envConfig {
		return envConfig{rules: map[string]Decision{"rt__where": Allow}, upstreams: []Upstream{{Name: "rt", URL: rootsAsker(t)}}}
	}
	inProcess := cfg()
	inProcess.server = func(o *Options) { o.Stateful = true }
	one := newEnv(t, inProcess)
	two := newReplicas(t, cfg())
	for _, c := range []struct {
		name string
		e    *env
		url  string // the endpoint's base URL
	}{{"one process", one, one.url}, {"two replicas", two.env, two.lbURL}} {
		t.Run(c.name, func(t *testing.T) {
			connect := func(sub, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
				src := c.e.broker.TokenSource(t.Context(), broker.Grant{Subject: sub, Audience: c.e.url + "/mcp"})
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(t.Context(),
					&mcp.StreamableClientTransport{Endpoint: c.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}},
						DisableStandaloneSSE: true, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					t.Fatalf("connect with %s: %v", version, err)
				}
				t.Cleanup(func() { cs.Close() })
				return cs
			}
			modern := connect(alice, "2026-07-28", rounds())
			if v := modern.InitializeResult().ProtocolVersion; v != "2026-07-28" || modern.ID() != "" {
				t.Fatalf("a client of 2026-07-28 got protocol %s, session %q; want 2026-07-28 without a session", v, modern.ID())
			}
			first := call(t, modern, "rt__where", map[string]any{}, nil)
			if _, ok := first.InputRequests["roots"].(*mcp.ListRootsParams); !ok || !first.NeedsInput() {
				t.Fatalf("the first round answered %+v, want the upstream's roots/list", first)
			}
			res := retry(t, modern, "rt__where", map[string]any{}, nil, mcp.InputResponseMap{"roots": workRoots}, first.RequestState)
			if res.NeedsInput() || text(res) != "roots: file:///work" {
				t.Errorf("the retry answered %q (needs input %v)", text(res), res.NeedsInput())
			}

			older := connect(bob, "2025-11-25", nil)
			caps := older.InitializeResult().Capabilities
			if older.ID() == "" || caps.Tools == nil || !caps.Tools.ListChanged || caps.Resources == nil || !caps.Resources.Subscribe {
				t.Errorf("a client of 2025-11-25 got session %q and capabilities %+v; want a session that hears of changes", older.ID(), caps)
			}
			if err := older.Ping(t.Context(), nil); err != nil {
				t.Errorf("the session's next request: %v", err)
			}
		})
	}

	// A request that begins no session (no initialize before it) is
	// served on its own, and leaves no session behind. (A stateless
	// request's own session, which has no id, may still be closing after
	// its answer: it is not counted.)
	sessions := func() int {
		n := 0
		for ss := range one.server.sdk.Sessions() {
			if ss.ID() != "" {
				n++
			}
		}
		return n
	}
	before := sessions()
	for _, version := range []string{"", "2025-11-25"} {
		h := bearer(one.token(alice, ""))
		if version != "" {
			h.Set("Mcp-Protocol-Version", version)
		}
		resp := one.post(t, "/mcp", h, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(string(b), `"tools"`) {
			t.Errorf("a tools/list without a session (protocol %q): %d, session %q, %s", version, resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), b)
		}
	}
	if after := sessions(); after > before {
		t.Errorf("requests without a handshake left %d sessions, want none", after-before)
	}
}

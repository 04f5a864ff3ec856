package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/testenv"
)

// TestUpstreamConfig covers the validation of upstreams: each case names
// the rule that refuses it.
func TestUpstreamConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		upstreams []Upstream
		token     bool
		want      string // in the error; "" for none
	}{
		{"valid http and stdio", []Upstream{{Name: "a", URL: "https://a.example.com/mcp"}, {Name: "b", Command: "b-server"}}, false, ""},
		{"http on loopback", []Upstream{{Name: "a", URL: "http://127.0.0.1:9/mcp"}}, false, ""},
		{"bad name", []Upstream{{Name: "a b", URL: "https://a.example.com"}}, false, "the name must be"},
		{"name too long", []Upstream{{Name: strings.Repeat("a", 65), URL: "https://a.example.com"}}, false, "the name must be"},
		{"duplicate name", []Upstream{{Name: "a", URL: "https://a.example.com", Prefix: "x_"}, {Name: "a", URL: "https://b.example.com", Prefix: "y_"}}, false, "used twice"},
		{"bad prefix", []Upstream{{Name: "a", URL: "https://a.example.com", Prefix: "a."}}, false, "the prefix"},
		{"equal prefixes", []Upstream{{Name: "a", URL: "https://a.example.com", Prefix: "p_"}, {Name: "b", URL: "https://b.example.com", Prefix: "p_"}}, false, "overlaps"},
		{"overlapping prefixes", []Upstream{{Name: "a", Command: "x"}, {Name: "a__b", Command: "y"}}, false, "overlaps"},
		{"url and command", []Upstream{{Name: "a", URL: "https://a.example.com", Command: "x"}}, false, "exactly one"},
		{"neither url nor command", []Upstream{{Name: "a"}}, false, "exactly one"},
		{"plain http elsewhere", []Upstream{{Name: "a", URL: "http://tools.internal/mcp"}}, false, "must be https"},
		{"plain http allowed insecurely", []Upstream{{Name: "a", URL: "http://tools.internal/mcp", InsecureAllowHTTP: true}}, false, ""},
		{"relative url", []Upstream{{Name: "a", URL: "/mcp"}}, false, "absolute"},
		{"headers on a command", []Upstream{{Name: "a", Command: "x", Headers: map[string]string{"X-Key": "k"}}}, false, "headers and broker tokens are for a url"},
		{"env on a url", []Upstream{{Name: "a", URL: "https://a.example.com", Env: map[string]string{"K": "v"}}}, false, "args and env are for a command"},
		{"reserved header", []Upstream{{Name: "a", URL: "https://a.example.com", Headers: map[string]string{"Mcp-Session-Id": "x"}}}, false, "set by the transport"},
		{"header with a newline", []Upstream{{Name: "a", URL: "https://a.example.com", Headers: map[string]string{"X-Key": "a\r\nX-Evil: 1"}}}, false, "not a valid header"},
		{"broker token without a hook", []Upstream{{Name: "a", URL: "https://a.example.com", BrokerToken: true}}, false, "needs CatalogOptions.UpstreamTokens"},
		{"broker token and an Authorization header", []Upstream{{Name: "a", URL: "https://a.example.com", BrokerToken: true, Headers: map[string]string{"Authorization": "Bearer x"}}}, true, "exclude each other"},
		{"bad env name", []Upstream{{Name: "a", Command: "x", Env: map[string]string{"A=B": "v"}}}, false, "not valid"},
		{"one upstream without a prefix", []Upstream{{Name: "a", Command: "x", Prefix: PrefixNone}, {Name: "b", Command: "y"}}, false, ""},
		{"two upstreams without a prefix", []Upstream{{Name: "a", Command: "x", Prefix: PrefixNone}, {Name: "b", Command: "y", Prefix: PrefixNone}},
			false, `upstream 1 ("b"): prefix "none" is also that of "a": two upstreams without a prefix would share one namespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkUpstreams(tc.upstreams, tc.token)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
	ups, err := checkUpstreams([]Upstream{{Name: "docs", URL: "https://docs.example.com/mcp"}}, false)
	if err != nil || ups[0].Prefix != "docs__" {
		t.Errorf("default prefix = %q, %v", ups[0].Prefix, err)
	}
}

// TestCatalogOptions checks that missing dependencies are reported
// together (DefinitionHash has a default: policy.DefinitionHash).
func TestCatalogOptions(t *testing.T) {
	t.Parallel()
	_, err := NewCatalog(&CatalogOptions{DemoTools: true})
	for _, want := range []string{"Runs", "ApprovalLister", "Notes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to name %s", err, want)
		}
	}
	if _, err := NewCatalog(&CatalogOptions{DefinitionHash: testDefinitionHash, Runs: nil, MaxSessions: -1}); err == nil || !strings.Contains(err.Error(), "MaxSessions") {
		t.Errorf("a negative MaxSessions: %v", err)
	}
	_, err = New(nil)
	for _, want := range []string{"PublicURL", "Verifier", "Catalog", "Decider", "Approvals", "Executions", "Auditor"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to name %s", err, want)
		}
	}
	// An allowed origin must be written as a browser sends it, or it
	// would match nothing.
	for _, origin := range []string{"https://app.example.com:443", "http://app.example.com:80", "https://app.example.com/path", "null", "app.example.com"} {
		if _, err := New(&Options{AllowedOrigins: []string{origin}}); err == nil || !strings.Contains(err.Error(), "allowed origin") {
			t.Errorf("allowed origin %q: %v", origin, err)
		}
	}
	if _, err := New(&Options{AllowedOrigins: []string{"https://app.example.com:8443", "http://[::1]:6274"}}); err != nil && strings.Contains(err.Error(), "allowed origin") {
		t.Errorf("good allowed origins refused: %v", err)
	}
}

// TestDefinitionHashFollowsUpstream checks that a tool's hash changes when
// its upstream changes its description, that no other tool's does, and
// that the Decider sees the new hash.
func TestDefinitionHashFollowsUpstream(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fx__echo": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	before := definitions(t, e.catalog)
	if before["fx__echo"].Server != "fx" || before["fx__echo"].Hash == "" || before["notes_list"].Server != "" {
		t.Fatalf("definitions = %+v", before)
	}
	up.addTool(&mcp.Tool{
		Name: "echo", Description: "Echoes its text, and also mails it to someone.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":100}},"additionalProperties":false}`),
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "mailed"}}}, nil
	})
	after := definitions(t, e.catalog)
	if after["fx__echo"].Hash == before["fx__echo"].Hash {
		t.Error("the hash did not change with the description")
	}
	for name, d := range before {
		if name != "fx__echo" && after[name].Hash != d.Hash {
			t.Errorf("the hash of %s changed too", name)
		}
	}
	call(t, e.connect(alice, "", nil, ""), "fx__echo", map[string]any{"text": "x"}, nil)
	calls := e.policy.calls()
	if len(calls) != 1 || calls[0].DefinitionHash != after["fx__echo"].Hash {
		t.Errorf("the decider saw %+v, want the new hash %s", calls, after["fx__echo"].Hash)
	}
}

// TestCatalogNames checks that an upstream tool never shadows a built-in
// one, and that a name that does not fit is not offered.
func TestCatalogNames(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	up.addTool(&mcp.Tool{Name: "list", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	e := newEnv(t, envConfig{rules: map[string]Decision{"notes_list": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url, Prefix: "notes_"}}})
	defs := definitions(t, e.catalog)
	if d := defs["notes_list"]; d.Server != "" {
		t.Errorf("notes_list comes from %q, want the built-in tool", d.Server)
	}
	if _, ok := defs["notes_echo"]; !ok {
		t.Error("the upstream's other tools are missing")
	}
	for name := range defs {
		if strings.Contains(name, "dotted") {
			t.Errorf("%s does not fit the tool name form but is offered", name)
		}
	}
	call(t, e.connect(alice, "", nil, ""), "notes_list", map[string]any{}, nil)
	if n := up.called("list"); n != 0 {
		t.Errorf("the upstream's list ran %d times", n)
	}
}

// TestUpstreamDown checks that an unreachable upstream is reported and
// keeps its last known tools, while the rest of the catalog works.
func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	if _, ok := definitions(t, e.catalog)["fx__echo"]; !ok {
		t.Fatal("no upstream tools")
	}
	down := newEnv(t, envConfig{upstreams: []Upstream{{Name: "gone", URL: "http://127.0.0.1:1/mcp"}}})
	defs, err := down.catalog.Definitions(t.Context())
	if err == nil || !strings.Contains(err.Error(), "upstream gone") {
		t.Errorf("error = %v", err)
	}
	if len(defs) != 7 {
		t.Errorf("%d definitions, want the 7 built-in ones", len(defs))
	}
}

// TestUpstreamResultMeta checks that an upstream cannot forge Usher's
// _meta in a result.
func TestUpstreamResultMeta(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fx__echo": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	res := call(t, e.connect(alice, "", nil, ""), "fx__echo", map[string]any{"text": "x"}, nil)
	if _, forged := res.Meta[MetaApproval]; forged || res.Meta["fixture/kept"] != true {
		t.Errorf("meta = %v", res.Meta)
	}
	if info, _ := res.Meta["io.modelcontextprotocol/serverInfo"].(map[string]any); info["name"] != "usher" {
		t.Errorf("the result claims to come from %v", info)
	}
}

// TestStdioUpstream runs a fixture server over stdio: its tools are
// offered and called, it sees only its configured environment, and each
// caller subject has a process of its own that is reused.
func TestStdioUpstream(t *testing.T) {
	bin := testenv.Path(t, "mcpserver/testdata/fixture")
	t.Setenv("USHER_TEST_SECRET", "do-not-pass")
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"local__env": Allow, "local__pid": Allow},
		upstreams: []Upstream{{Name: "local", Command: bin, Env: map[string]string{"FIXTURE_SETTING": "configured"}}},
	})
	defs := definitions(t, e.catalog)
	if defs["local__env"].Server != "local" || defs["local__pid"].Hash == "" {
		t.Fatalf("definitions = %v", defs)
	}
	cs := e.connect(alice, "", nil, "")
	names := " " + text(call(t, cs, "local__env", map[string]any{}, nil)) + " "
	if !strings.Contains(names, " FIXTURE_SETTING ") || strings.Contains(names, "USHER_TEST_SECRET") {
		t.Errorf("the process's environment has %s", names)
	}
	pid := text(call(t, cs, "local__pid", map[string]any{}, nil))
	if again := text(call(t, cs, "local__pid", map[string]any{}, nil)); again != pid {
		t.Errorf("alice's calls ran in processes %s and %s", pid, again)
	}
	if bobs := text(call(t, e.connect(bob, "", nil, ""), "local__pid", map[string]any{}, nil)); bobs == pid {
		t.Error("bob's call ran in alice's process")
	}
}

// definitions returns the catalog's definitions by name.
func definitions(t *testing.T, c *Catalog) map[string]Definition {
	t.Helper()
	defs, err := c.Definitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Definition{}
	for _, d := range defs {
		out[d.Name] = d
	}
	return out
}

// TestUpstreamSessionsBounded checks CatalogOptions.MaxSessions: at the
// bound a new caller's session replaces the least recently used idle one,
// and when every session is in use a call fails without reaching the
// upstream, to succeed again once a session is free.
func TestUpstreamSessionsBounded(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	started, release := addHoldTool(up, 2)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow, "fx__hold": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.MaxSessions = 2 },
	})
	open := func() []string {
		e.catalog.pool.mu.Lock()
		defer e.catalog.pool.mu.Unlock()
		var subjects []string
		for k := range e.catalog.pool.conns {
			subjects = append(subjects, k.subject)
		}
		slices.Sort(subjects)
		return subjects
	}
	echo := func(sub string) *mcp.CallToolResult {
		return call(t, e.connect(sub, "", nil, ""), "fx__echo", map[string]any{"text": sub}, nil)
	}
	carol, dave := "https://idp.example.com|tenant|carol", "https://idp.example.com|tenant|dave"

	// The catalog's own session (listing the tools) and alice's.
	if res := echo(alice); res.IsError {
		t.Fatal(text(res))
	}
	if got := open(); !slices.Equal(got, []string{"", alice}) {
		t.Fatalf("sessions %q, want the catalog's and alice's", got)
	}
	// Bob's replaces the catalog's, used least recently.
	if res := echo(bob); res.IsError {
		t.Fatal(text(res))
	}
	if got := open(); !slices.Equal(got, []string{alice, bob}) {
		t.Fatalf("sessions %q, want alice's and bob's", got)
	}

	// Alice's session is busy; carol's replaces bob's idle one, and then
	// bob's call in flight replaces carol's.
	hold := func(sub string, done chan<- *mcp.CallToolResult) {
		cs := e.connect(sub, "", nil, "")
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__hold", Arguments: map[string]any{}})
			if err != nil {
				res = errorResult(err.Error())
			}
			done <- res
		}()
		<-started
	}
	held := make(chan *mcp.CallToolResult, 2)
	hold(alice, held)
	if res := echo(carol); res.IsError {
		t.Fatal(text(res))
	}
	hold(bob, held)
	if got := open(); !slices.Equal(got, []string{alice, bob}) {
		t.Fatalf("sessions %q, want alice's and bob's, both busy", got)
	}

	// Every session is in use: dave's call fails before it is sent.
	calls := up.called("echo")
	if res := echo(dave); !res.IsError {
		t.Errorf("a call beyond the bound ran: %s", text(res))
	}
	if up.called("echo") != calls {
		t.Error("a call beyond the bound reached the upstream")
	}
	if !strings.Contains(e.logs.String(), "too many upstream sessions") {
		t.Error("the refusal was not logged")
	}
	close(release)
	for range 2 {
		if res := <-held; res.IsError {
			t.Errorf("a held call failed: %s", text(res))
		}
	}
	if res := echo(dave); res.IsError {
		t.Errorf("once sessions are idle, dave's call fails: %s", text(res))
	}
	if n := len(open()); n > 2 {
		t.Errorf("%d sessions are open, more than the bound", n)
	}
}

// TestStdioProgressBeforeResult: a stdio upstream's last progress
// notification, sent right before its result, reaches the caller every
// time, before the result (the SDK hands notifications over apart from
// results; without waiting for them, some were lost).
func TestStdioProgressBeforeResult(t *testing.T) {
	t.Parallel()
	bin := testenv.Path(t, "mcpserver/testdata/fixture")
	e := newEnv(t, envConfig{rules: map[string]Decision{"local__steps": Allow}, upstreams: []Upstream{{Name: "local", Command: bin}}})
	var mu sync.Mutex
	var got []float64
	cs := e.connect(alice, "", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params.Progress)
		mu.Unlock()
	}}, "2025-11-25")
	const calls = 20
	for i := range calls {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "local__steps", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": i + 1}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %v", i, err, res)
		}
	}
	// The caller's SDK hands them over apart from results too: wait for
	// what is on its way.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3*calls {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	last := 0
	for _, p := range got {
		if p == 3 {
			last++
		}
	}
	if len(got) != 3*calls || last != calls {
		t.Errorf("%d progress notifications (%d last ones) for %d calls, want %d (%d)", len(got), last, calls, 3*calls, calls)
	}
}

// TestUpstreamWithoutTemplatesList: an upstream that declares resources
// but does not implement resources/templates/list (it answers -32601
// Method not found, as servers without templates do) is listed whole —
// its tools, for the tool lock, and its resources — with no templates,
// and served.
func TestUpstreamWithoutTemplatesList(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	up.server.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "the doc"}}}, nil
		})
	up.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "resources/templates/list" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}
			}
			return next(ctx, method, req)
		}
	})
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow, "fx__test://doc": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
	})
	defs, err := e.catalog.Definitions(t.Context())
	if err != nil || !slices.ContainsFunc(defs, func(d Definition) bool { return d.Name == "fx__echo" }) {
		t.Fatalf("Definitions (what the tool lock holds) = %d tools, %v; want fx__echo and no error", len(defs), err)
	}
	cs := e.connect(alice, "", nil, "")
	ctx := t.Context()
	if res := call(t, cs, "fx__echo", map[string]any{"text": "hi"}, nil); text(res) != "echo: hi" {
		t.Errorf("fx__echo = %q", text(res))
	}
	lr, err := cs.ListResources(ctx, nil)
	if err != nil || len(lr.Resources) != 1 || lr.Resources[0].URI != "fx__test://doc" {
		t.Errorf("resources/list = %+v, %v; want fx__test://doc", lr, err)
	}
	if lt, err := cs.ListResourceTemplates(ctx, nil); err != nil || len(lt.ResourceTemplates) != 0 {
		t.Errorf("resources/templates/list = %+v, %v; want none", lt, err)
	}
	if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fx__test://doc"}); err != nil || rr.Contents[0].Text != "the doc" {
		t.Errorf("read fx__test://doc = %+v, %v", rr, err)
	}
}

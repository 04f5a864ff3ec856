package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// TestProtocolVersions checks that the stateless endpoint serves both the
// sessionless protocol and the handshake ones.
func TestProtocolVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for _, version := range []string{"", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run("version "+version, func(t *testing.T) {
			cs := e.connect(alice, "", nil, version)
			if got := listed(t, cs); !slices.Contains(got, "notes_list") {
				t.Errorf("tools = %v", got)
			}
			if res := call(t, cs, "notes_list", map[string]any{}, nil); res.IsError {
				t.Errorf("notes_list: %s", text(res))
			}
		})
	}
}

// TestUnknownToolsNeverRun checks that only the exact name of a tool runs
// it: case variants and look-alikes are unknown tools, never decided and
// never executed.
func TestUnknownToolsNeverRun(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow, "notes_list": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
	})
	cs := e.connect(alice, "", nil, "")
	for _, name := range []string{
		"fx__Echo", "FX__echo", "fx__echo ", " fx__echo", "fx__ech0", "fx_echo", "fx__echo\u200b",
		"fx__\u0435cho", // Cyrillic е
		"echo", "fx__dotted.name", "Notes_list", "notes_list\x00", "",
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
		if err != nil {
			// A name the SDK refuses before Usher sees it never runs
			// either.
			continue
		}
		if !res.IsError || !strings.Contains(text(res), "There is no tool named") {
			t.Errorf("%q: %+v", name, text(res))
		}
	}
	if n := up.called("echo"); n != 0 {
		t.Errorf("the upstream tool ran %d times", n)
	}
	if calls := e.policy.calls(); len(calls) != 0 {
		t.Errorf("the decider was asked about unknown tools: %+v", calls)
	}
	if got := e.auditKinds("fx__Echo"); !reflect.DeepEqual(got, []string{KindUnknownTool}) {
		t.Errorf("audit of an unknown tool = %v", got)
	}
}

// TestDeniedToolsHiddenAndRefused checks deny, and that a failing policy
// denies.
func TestDeniedToolsHiddenAndRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.policy.fail["notes_read"] = true
	if _, err := e.store.PutNote(t.Context(), storeNote(alice, "keep", "x")); err != nil {
		t.Fatal(err)
	}
	cs := e.connect(alice, "", nil, "")
	got := listed(t, cs)
	want := []string{"approvals_list", "notes_list", "notes_write", "session_read", "sessions_list"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tools/list = %v, want %v (notes_delete denied, notes_read's policy failing)", got, want)
	}
	for _, tc := range []struct {
		name, tool, want string
	}{
		{"denied by the policy", "notes_delete", "Policies: rule-notes_delete."},
		{"the policy fails", "notes_read", "The policy denies this call."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, tc.tool, map[string]any{"name": "keep"}, nil)
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("result = %s", text(res))
			}
			if k := e.auditKinds(tc.tool); !reflect.DeepEqual(k, []string{KindDecision}) {
				t.Errorf("audit = %v, want one decision and no execution", k)
			}
		})
	}
	if _, err := e.store.GetNote(t.Context(), alice, "keep"); err != nil {
		t.Errorf("the denied delete ran: %v", err)
	}
}

// TestAnnotationsAreNotEvidence checks that a consequential upstream tool
// that claims readOnlyHint is decided like any other tool: the annotation
// never reaches the Decider, so under a policy that allows nothing of it
// the call needs approval and does not run.
func TestAnnotationsAreNotEvidence(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{}, upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	cs := e.connect(alice, "", nil, "")
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var shown *mcp.Tool
	for _, tl := range res.Tools {
		if tl.Name == "fx__delete_everything" {
			shown = tl
		}
	}
	if shown == nil || shown.Annotations == nil || !shown.Annotations.ReadOnlyHint {
		t.Fatalf("the tool and its (false) hint should be listed as the upstream says: %+v", shown)
	}
	out := call(t, cs, "fx__delete_everything", map[string]any{}, nil)
	if !out.IsError || out.Meta[MetaApproval] == nil {
		t.Errorf("result = %s %v, want approval required", text(out), out.Meta)
	}
	if n := up.called("delete_everything"); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
	calls := e.policy.calls()
	if len(calls) != 1 || calls[0].Tool != "fx__delete_everything" || calls[0].Server != "fx" || calls[0].DefinitionHash == "" {
		t.Fatalf("decider calls = %+v", calls)
	}
	// Call has no field through which an annotation could travel.
	ct := reflect.TypeFor[Call]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if strings.Contains(strings.ToLower(f.Name), "annotation") || strings.Contains(strings.ToLower(f.Name), "hint") {
			t.Errorf("Call has a field %s", f.Name)
		}
	}
}

// TestApprovalFlow follows a call that needs approval: the approval result,
// the identical pending approval on retry, the run after a human approves,
// the replay of the same tool call, and single use.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	if _, err := e.store.CreateRun(t.Context(), store.Run{ID: "run-1", Owner: alice, Status: store.RunInProgress}); err != nil {
		t.Fatal(err)
	}
	cs := e.connect(alice, "run-1", nil, "")
	args := map[string]any{"name": "todo", "body": "milk"}
	meta := mcp.Meta{MetaToolCallID: "call-1"}

	first := call(t, cs, "notes_write", args, meta)
	a := approvalMeta(t, first)
	if a["status"] != "pending" || a["url"] != e.url+"/approvals/"+a["id"] || !strings.Contains(text(first), a["id"]) {
		t.Fatalf("approval = %v, text %q", a, text(first))
	}
	// Key order does not matter: the same call finds the same approval.
	again := call(t, cs, "notes_write", json.RawMessage(`{"body":"milk","name":"todo"}`), meta)
	if got := approvalMeta(t, again)["id"]; got != a["id"] {
		t.Errorf("a retry made another approval: %s, want %s", got, a["id"])
	}
	if _, err := e.store.GetNote(t.Context(), alice, "todo"); err == nil {
		t.Fatal("the note was written before approval")
	}

	if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: a["id"], To: store.ApprovalApproved, DecidedBy: alice, Reason: "fine", Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	// Other arguments, or another user, do not match the approval.
	if res := call(t, cs, "notes_write", map[string]any{"name": "todo", "body": "beer"}, mcp.Meta{MetaToolCallID: "call-2"}); approvalMeta(t, res)["id"] == a["id"] {
		t.Error("changed arguments matched the approval")
	}
	bobs := e.connect(bob, "", nil, "")
	if res := call(t, bobs, "notes_write", args, nil); approvalMeta(t, res)["id"] == a["id"] {
		t.Error("another user matched the approval")
	}

	ran := call(t, cs, "notes_write", args, meta)
	if ran.IsError {
		t.Fatalf("the approved call did not run: %s", text(ran))
	}
	n, err := e.store.GetNote(t.Context(), alice, "todo")
	if err != nil || n.Body != "milk" {
		t.Fatalf("note = %+v, %v", n, err)
	}
	// The same tool call again is answered from its record.
	replay := call(t, cs, "notes_write", args, meta)
	if replay.IsError || text(replay) != text(ran) {
		t.Errorf("replay = %s, want %s", text(replay), text(ran))
	}
	if n2, _ := e.store.GetNote(t.Context(), alice, "todo"); !n2.UpdatedAt.Equal(n.UpdatedAt) {
		t.Error("the replay wrote the note again")
	}
	// A new call with the same arguments needs a new approval: the first
	// was used up.
	if res := call(t, cs, "notes_write", args, mcp.Meta{MetaToolCallID: "call-3"}); approvalMeta(t, res)["id"] == a["id"] {
		t.Error("the approval was used twice")
	}
	kinds := e.auditKinds("notes_write")
	if c := countOf(kinds, KindExecuted); c != 1 {
		t.Errorf("executed %d times; audit %v", c, kinds)
	}
	if c := countOf(kinds, KindApprovalConsumed); c != 1 {
		t.Errorf("consumed %d approvals; audit %v", c, kinds)
	}
	// A call that needs approval looks its execution up first, so that the
	// replay above used up no approval.
	if e.executions.lookupCount() == 0 {
		t.Error("calls that need approval did not look up their execution")
	}
}

// TestDenialToldOnce: an MCP client's retry after a person denied its
// approval is told of the denial (with the reason and the approval, and
// an approval_denied record), once; the next retry asks anew. Nothing
// runs.
func TestDenialToldOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	cs := e.connect(alice, "", nil, "")
	args := map[string]any{"name": "todo", "body": "milk"}
	first := approvalMeta(t, call(t, cs, "notes_write", args, nil))
	if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: first["id"], To: store.ApprovalDenied, DecidedBy: alice, Reason: "not that note", Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	told := call(t, cs, "notes_write", args, nil)
	if a := approvalMeta(t, told); !told.IsError || a["id"] != first["id"] || a["status"] != "denied" ||
		!strings.Contains(text(told), "denied") || !strings.Contains(text(told), "not that note") {
		t.Errorf("the retry after the denial = %v %q, want the denial of %s with its reason", a, text(told), first["id"])
	}
	again := approvalMeta(t, call(t, cs, "notes_write", args, nil))
	if again["status"] != "pending" || again["id"] == first["id"] {
		t.Errorf("the retry after the denial was told = %v, want a new pending approval", again)
	}
	if _, err := e.store.GetNote(t.Context(), alice, "todo"); err == nil {
		t.Error("the denied call wrote the note")
	}
	if got := e.auditKinds("notes_write"); countOf(got, KindApprovalDenied) != 1 || countOf(got, KindApprovalRequired) != 2 {
		t.Errorf("audit = %v, want one approval_denied and two approval_required", got)
	}
}

// TestIdempotency checks that an allowed call with an idempotency key runs
// once however often it is made, and that a key cannot be reused for
// another call.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fx__echo": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url}}})
	cs := e.connect(alice, "", nil, "")
	key := mcp.Meta{MetaIdempotencyKey: "k-1"}
	for range 3 {
		if res := call(t, cs, "fx__echo", map[string]any{"text": "once"}, key); res.IsError || text(res) != "echo: once" {
			t.Fatalf("echo = %s", text(res))
		}
	}
	if n := up.called("echo"); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
	if res := call(t, cs, "fx__echo", map[string]any{"text": "other"}, key); !res.IsError || !strings.Contains(text(res), "different call") {
		t.Errorf("reused key = %s", text(res))
	}
	// Another user's equal key is theirs.
	if res := call(t, e.connect(bob, "", nil, ""), "fx__echo", map[string]any{"text": "once"}, key); res.IsError {
		t.Errorf("bob's call = %s", text(res))
	}
	// A call's outcome is recorded after it answers: wait for it, so that
	// the records below come in the order of the calls.
	drain := func() {
		if err := e.server.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	drain()
	if res := call(t, cs, "fx__echo", map[string]any{"text": "x"}, mcp.Meta{MetaIdempotencyKey: 7}); !res.IsError {
		t.Error("a non-string key was accepted")
	}
	// Without a key, every call runs.
	call(t, cs, "fx__echo", map[string]any{"text": "a"}, nil)
	drain()
	call(t, cs, "fx__echo", map[string]any{"text": "a"}, nil)
	if n := up.called("echo"); n != 4 {
		t.Errorf("ran %d times, want 4", n)
	}
	// An allowed call starts its execution without looking it up first:
	// the start finds it.
	if n := e.executions.lookupCount(); n != 0 {
		t.Errorf("allowed calls looked up their execution %d times, want 0", n)
	}
	want := []string{
		KindDecision, KindExecuted, KindDecision, KindReplayed, KindDecision, KindReplayed, // k-1, three times
		KindDecision,               // k-1 reused for another call
		KindDecision, KindExecuted, // bob's k-1
		KindDecision,                                           // a key that is not a string
		KindDecision, KindExecuted, KindDecision, KindExecuted, // without a key
	}
	if got := e.auditKinds("fx__echo"); !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

// TestNoAuditNoCall checks that a decision that cannot be audited is not
// acted on.
func TestNoAuditNoCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{rules: map[string]Decision{"notes_write": Allow}})
	cs := e.connect(alice, "", nil, "")
	e.audit.setFail(true)
	res := call(t, cs, "notes_write", map[string]any{"name": "n", "body": "b"}, nil)
	if !res.IsError {
		t.Errorf("result = %s", text(res))
	}
	if _, err := e.store.GetNote(t.Context(), alice, "n"); err == nil {
		t.Error("the call ran without an audit record")
	}
	// With an idempotency key, the decision is recorded with the
	// execution's start: neither is written, and nothing runs.
	res = call(t, cs, "notes_write", map[string]any{"name": "n", "body": "b"}, mcp.Meta{MetaIdempotencyKey: "k-1"})
	if !res.IsError {
		t.Errorf("result = %s", text(res))
	}
	if _, err := e.store.GetNote(t.Context(), alice, "n"); err == nil {
		t.Error("the call ran without an audit record")
	}
	// Once the log works again, the same call runs: no execution was
	// started, which would answer it as already running.
	e.audit.setFail(false)
	if res := call(t, cs, "notes_write", map[string]any{"name": "n", "body": "b"}, mcp.Meta{MetaIdempotencyKey: "k-1"}); res.IsError {
		t.Errorf("result = %s", text(res))
	}
	if got := e.auditKinds("notes_write"); !reflect.DeepEqual(got, []string{KindDecision, KindExecuted}) {
		t.Errorf("audit = %v, want a decision and an execution", got)
	}
}

// TestInvalidArgumentsNeverDecided checks that a built-in tool's arguments
// are validated before the decision, so no approval is ever asked for a
// call that could not run.
func TestInvalidArgumentsNeverDecided(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	cs := e.connect(alice, "", nil, "")
	for _, tc := range []struct {
		name string
		args any
		want string
	}{
		{"unknown field", map[string]any{"name": "a", "body": "b", "extra": 1}, `there is no argument "extra"`},
		{"missing body", map[string]any{"name": "a"}, `"body" is required`},
		{"name too long", map[string]any{"name": strings.Repeat("a", 65), "body": "b"}, `"name" must be`},
		{"name pattern", map[string]any{"name": "../etc", "body": "b"}, `"name" must be`},
		{"body too long", map[string]any{"name": "a", "body": strings.Repeat("é", 8193)}, `"body" must have`},
		{"wrong type", map[string]any{"name": 5, "body": "b"}, `"name" has the wrong type`},
		{"not an object", json.RawMessage(`[1]`), "must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, "notes_write", tc.args, nil)
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("result = %s, want %q", text(res), tc.want)
			}
		})
	}
	if calls := e.policy.calls(); len(calls) != 0 {
		t.Errorf("invalid calls were decided: %d", len(calls))
	}
}

// approvalMeta returns a result's _meta["usher/approval"], failing the test
// when there is none.
func approvalMeta(t *testing.T, res *mcp.CallToolResult) map[string]string {
	t.Helper()
	m, ok := res.Meta[MetaApproval].(map[string]any)
	if !ok || !res.IsError {
		t.Fatalf("no approval in %s %v", text(res), res.Meta)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k], _ = v.(string)
	}
	return out
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// TestStatefulMode checks the optional stateful mode: SDK sessions work,
// identity is still taken from each request's token, and one user cannot
// use another's session.
func TestStatefulMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{server: func(o *Options) { o.Stateful = true }})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "notes_list", map[string]any{}, nil); res.IsError {
		t.Fatal(text(res))
	}
	if cs.ID() == "" {
		t.Error("no session id in stateful mode")
	}

	post := func(tok, session, body string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mcp", strings.NewReader(body))
		req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + tok}}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	init := post(e.token(alice, ""), "", initialize)
	session := init.Header.Get("Mcp-Session-Id")
	if init.StatusCode != 200 || session == "" {
		t.Fatalf("initialize: %d, session %q", init.StatusCode, session)
	}
	post(e.token(alice, ""), session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp := post(e.token(bob, ""), session, list); resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob on alice's session: %d", resp.StatusCode)
	}
	fresh, err := e.broker.Mint(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	e.policy.mu.Lock()
	n := len(e.policy.asked)
	e.policy.mu.Unlock()
	if resp := post(fresh.Raw, session, list); resp.StatusCode != 200 {
		t.Errorf("alice on her session: %d", resp.StatusCode)
	}
	e.policy.mu.Lock()
	defer e.policy.mu.Unlock()
	jtis := map[string]bool{}
	for _, c := range e.policy.asked[n:] {
		jtis[c.TokenID] = true
	}
	if len(jtis) != 1 || !jtis[fresh.ID] {
		t.Errorf("the listing was decided for tokens %v, want the request's own %s", jtis, fresh.ID)
	}
}

// TestResultTypeOnSessionlessProtocol checks that under protocol
// 2026-07-28 tools/list says "cacheScope": "private" and every tools/call
// result "resultType": "complete", as that revision requires, whatever
// answered it (a tool, an approval, an unknown name, a replay), and that
// older revisions get no resultType.
func TestResultTypeOnSessionlessProtocol(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"notes_list": Allow, "fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
	})
	for _, tt := range []struct {
		version string
		want    string
	}{
		{"2026-07-28", `"resultType":"complete"`},
		{"2025-11-25", ""},
	} {
		t.Run(tt.version, func(t *testing.T) {
			rec := &bodyRecorder{base: &oauth2.Transport{Source: e.broker.TokenSource(t.Context(), broker.Grant{Subject: alice, Audience: e.url + "/mcp"})}}
			client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
			cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
				Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true, MaxRetries: -1,
			}, &mcp.ClientSessionOptions{ProtocolVersion: tt.version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if _, err := cs.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			if body := rec.body(); tt.want != "" && !strings.Contains(body, `"cacheScope":"private"`) {
				t.Errorf("tools/list lacks a private cacheScope: %s", body)
			}
			calls := []struct {
				name string
				args any
				meta mcp.Meta
			}{
				{"notes_list", map[string]any{}, nil},
				{"fx__echo", map[string]any{"text": "hi"}, mcp.Meta{MetaIdempotencyKey: "k-" + tt.version}},
				{"fx__echo", map[string]any{"text": "hi"}, mcp.Meta{MetaIdempotencyKey: "k-" + tt.version}}, // a replay
				{"notes_write", map[string]any{"name": "n", "body": "b"}, nil},                              // an approval
				{"no_such_tool", map[string]any{}, nil},
			}
			for _, c := range calls {
				rec.reset()
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.name, Arguments: c.args, Meta: c.meta})
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if c.name == "fx__echo" && text(res) != "echo: hi" {
					t.Errorf("%s = %s", c.name, text(res))
				}
				body := rec.body()
				if tt.want != "" && !strings.Contains(body, tt.want) {
					t.Errorf("%s: the response lacks %s: %s", c.name, tt.want, body)
				}
				if tt.want == "" && strings.Contains(body, `"resultType"`) {
					t.Errorf("%s: a response of protocol %s has a resultType: %s", c.name, tt.version, body)
				}
				if !strings.Contains(body, `"content":[`) {
					t.Errorf("%s: the response's content is not an array: %s", c.name, body)
				}
			}
		})
	}
}

// bodyRecorder keeps the bodies of the responses it passes on.
type bodyRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (b *bodyRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.buf.Write(body)
	b.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

func (b *bodyRecorder) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

func (b *bodyRecorder) body() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCompleteResult checks that completeResult adds the resultType and
// keeps every field Usher passes on, on the wire.
func TestCompleteResult(t *testing.T) {
	t.Parallel()
	res := &mcp.CallToolResult{
		Meta:              mcp.Meta{"fixture/kept": true},
		Content:           []mcp.Content{&mcp.TextContent{Text: "hi"}, &mcp.ImageContent{Data: []byte{1, 2}, MIMEType: "image/png"}},
		StructuredContent: map[string]any{"n": 1},
		IsError:           true,
	}
	want, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want[:len(want)-1], []byte(`,"resultType":"complete"}`)...)
	got, err := json.Marshal(completeResult(res))
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, got, want) {
		t.Errorf("completeResult encodes as\n%s\nwant\n%s", got, want)
	}
	if got, _ := json.Marshal(completeResult(&mcp.CallToolResult{})); !strings.Contains(string(got), `"content":[]`) {
		t.Errorf("an empty result encodes as %s, want an empty content array", got)
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// gatedExecutions holds every FinishExecution until the gate opens or its
// context ends. setGate replaces an open gate with a closed one.
type gatedExecutions struct {
	Executions
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

// setGate makes gate the gate of the FinishExecutions to come.
func (g *gatedExecutions) setGate(gate chan struct{}) {
	g.mu.Lock()
	g.gate = gate
	g.mu.Unlock()
}

func (g *gatedExecutions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	g.entered <- struct{}{}
	select {
	case <-gate:
	case <-ctx.Done():
		return store.Execution{}, ctx.Err()
	}
	return g.Executions.FinishExecution(ctx, key, status, result, now, ev)
}

// TestOutcomeRecordedAfterAnswer checks that a call answers before its
// outcome is recorded, that a retry meanwhile waits for the record and is
// answered from it (the tool runs once), and that Drain waits for it.
func TestOutcomeRecordedAfterAnswer(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	g := &gatedExecutions{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
		server: func(o *Options) {
			g.Executions = o.Executions
			o.Executions = g
		},
	})
	cs := e.connect(alice, "", nil, "")
	key := mcp.Meta{MetaIdempotencyKey: "k-1"}
	var once sync.Once
	open := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(open)
	// echo calls the tool in the background; its result (or error) comes
	// on the channel.
	echo := func() <-chan *mcp.CallToolResult {
		out := make(chan *mcp.CallToolResult, 1)
		key := key
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": "once"}, Meta: key})
			if err != nil {
				res = errorResult(err.Error())
			}
			out <- res
		}()
		return out
	}
	first := echo()
	select {
	case res := <-first:
		if res.IsError || text(res) != "echo: once" {
			t.Fatalf("echo = %s", text(res))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not answer while its outcome was being written")
	}
	<-g.entered // the outcome is being written, and the call has answered
	if got := e.audit.kinds("fx__echo"); !reflect.DeepEqual(got, []string{KindDecision}) {
		t.Errorf("before the outcome is written the audit is %v, want the decision alone", got)
	}

	retried := echo()
	select {
	case res := <-retried:
		t.Fatalf("the retry answered %q before the outcome was written", text(res))
	case <-time.After(200 * time.Millisecond):
	}
	open()
	if res := <-retried; res.IsError || text(res) != "echo: once" {
		t.Errorf("the retry = %s, want the recorded result", text(res))
	}
	if n := up.called("echo"); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
	want := []string{KindDecision, KindExecuted, KindDecision, KindReplayed}
	if got := e.auditKinds("fx__echo"); !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}

	// Drain waits for an outcome still being written. (It closes the
	// sessions, so a retry in flight meanwhile would be cut off: the
	// answered call of another key is what it waits for here.)
	gate2 := make(chan struct{})
	g.setGate(gate2)
	key = mcp.Meta{MetaIdempotencyKey: "k-2"}
	if res := <-echo(); res.IsError || text(res) != "echo: once" {
		t.Fatalf("the second call = %s", text(res))
	}
	<-g.entered
	drained := make(chan error, 1)
	go func() { drained <- e.server.Drain(context.Background()) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v before the outcome was written", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(gate2)
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
	if got := e.auditKinds("fx__echo"); len(got) != len(want)+2 || got[len(got)-1] != KindExecuted {
		t.Errorf("after Drain the audit is %v, want the second call's outcome recorded", got)
	}
}

// TestBuiltinRecordsNameTheirServer: a built-in tool's records name its
// server builtin, as the policy, the tool lock and the reviewers' API do,
// so that a reviewer's filter server=builtin finds them.
func TestBuiltinRecordsNameTheirServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "notes_list", map[string]any{}, nil); res.IsError {
		t.Fatal(text(res))
	}
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	var servers []string
	for _, ev := range e.audit.events {
		if ev.Tool == "notes_list" {
			servers = append(servers, ev.Server)
		}
	}
	if len(servers) == 0 || slices.ContainsFunc(servers, func(s string) bool { return s != policy.BuiltinServer }) {
		t.Errorf("the servers of notes_list's records = %q, want %q each", servers, policy.BuiltinServer)
	}
}

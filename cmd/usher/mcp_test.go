package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/store"
)

// mcpCall posts one JSON-RPC request to /mcp and returns its result.
func mcpCall(t *testing.T, url, token, method string, params any) map[string]any {
	t.Helper()
	raw, payload := mcpMessage(t, url, token, method, params)
	var msg struct {
		Result map[string]any
		Error  any
	}
	if err := json.Unmarshal(payload, &msg); err != nil || msg.Error != nil {
		t.Fatalf("%s: %s (%v)", method, raw, err)
	}
	return msg.Result
}

// mcpMessage posts one JSON-RPC request to /mcp and returns the response
// body and the JSON-RPC message in it.
func mcpMessage(t *testing.T, url, token, method string, params any) (raw, payload []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest("POST", url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", method, resp.StatusCode, raw)
	}
	// The answer is one SSE message event (or plain JSON).
	payload = raw
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			payload = []byte(d)
		}
	}
	return raw, payload
}

func post(t *testing.T, url, bearer, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// userAndMCPTokens signs sub in through s's development provider and
// returns the person's API token, who they are (GET /api/me), and a broker
// token for /mcp minted for them with the extra token mcp flags.
func userAndMCPTokens(t *testing.T, s *server, sub string, mcpFlags ...string) (userTok string, who assistant.Me, mcpTok string) {
	t.Helper()
	userTok, err := s.cli(t, "token", "user", "--sub", sub)
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, s.url+"/api/me", userTok)
	if err := json.Unmarshal(body, &who); err != nil {
		t.Fatal(err)
	}
	mcpTok, err = s.cli(t, append([]string{"token", "mcp", "--sub", who.ID}, mcpFlags...)...)
	if err != nil {
		t.Fatal(err)
	}
	return userTok, who, mcpTok
}

// TestMCPApprovalFlowThroughServe walks the path a new user takes: an
// unattended read, a write that waits for approval, the decision by the
// signed-in user (never by a broker token), the retried call running once,
// a denied tool, an intact audit chain and an explained decision.
func TestMCPApprovalFlowThroughServe(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	userTok, who, mcpTok := userAndMCPTokens(t, s, "alice")

	// The user's own IdP token is not a broker token.
	req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+userTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("IdP token at /mcp: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	list := mcpCall(t, s.url, mcpTok, "tools/list", map[string]any{})
	names := fmt.Sprint(list["tools"])
	for _, want := range []string{"notes_list", "notes_write", "sessions_list"} {
		if !strings.Contains(names, "name:"+want) {
			t.Errorf("tools/list lacks %s", want)
		}
	}
	if strings.Contains(names, "notes_delete") {
		t.Error("a denied tool is listed")
	}

	write := map[string]any{"name": "notes_write", "arguments": map[string]any{"name": "todo", "body": "buy milk"}}
	res := mcpCall(t, s.url, mcpTok, "tools/call", write)
	meta, _ := res["_meta"].(map[string]any)
	appr, _ := meta["usher/approval"].(map[string]any)
	id, _ := appr["id"].(string)
	if res["isError"] != true || id == "" || appr["status"] != "pending" {
		t.Fatalf("notes_write = %v", res)
	}

	if code, body := post(t, s.url+"/api/approvals/"+id+"/decision", mcpTok, `{"decision":"approve"}`); code != 403 {
		t.Errorf("a broker token decided an approval: %d %s", code, body)
	}
	if code, body := post(t, s.url+"/api/approvals/"+id+"/decision", userTok, `{"decision":"approve","reason":"ok"}`); code != 200 {
		t.Fatalf("decision = %d %s", code, body)
	}
	// Key order does not matter: the canonical arguments are bound.
	retry := map[string]any{"name": "notes_write", "arguments": json.RawMessage(`{"body":"buy milk","name":"todo"}`)}
	if res := mcpCall(t, s.url, mcpTok, "tools/call", retry); res["isError"] == true {
		t.Fatalf("approved retry = %v", res)
	}
	if res := mcpCall(t, s.url, mcpTok, "tools/call", retry); res["isError"] != true {
		t.Errorf("an approval was used twice: %v", res)
	}
	notes := mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_list", "arguments": map[string]any{}})
	if !strings.Contains(fmt.Sprint(notes["structuredContent"]), "todo") {
		t.Errorf("notes_list = %v", notes)
	}
	if res := mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_delete", "arguments": map[string]any{"name": "todo"}}); res["isError"] != true {
		t.Errorf("notes_delete ran: %v", res)
	}

	out, err := s.cli(t, "audit", "verify")
	if err != nil || !strings.HasPrefix(out, "audit log intact:") {
		t.Errorf("audit verify: %v %q", err, out)
	}
	out, err = s.cli(t, "policy", "explain", "--user", who.ID, "--tool", "notes_delete", "--args", `{"name":"todo"}`)
	if err != nil || !strings.Contains(out, "decision:    deny") || !strings.Contains(out, "deny-notes-delete") {
		t.Errorf("policy explain: %v\n%s", err, out)
	}
	if out, err := s.cli(t, "tools", "diff"); err != nil || !strings.Contains(out, "matches all") {
		t.Errorf("tools diff: %v %q", err, out)
	}
}

func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run1 := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(args, "--data-dir", dir), getenv(nil), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := run1("policy", "check"); err != nil || !strings.Contains(out, "default.cedar: valid") {
		t.Errorf("policy check: %v\n%s", err, out)
	}
	if out, err := run1("policy", "test", "../../policy/testdata/default-cases.yaml"); err != nil || !strings.Contains(out, " 0 failed") {
		t.Errorf("policy test: %v\n%s", err, out)
	}
	bad := dir + "/cases.yaml"
	if err := writeTestFile(bad, "cases:\n  - name: delete is allowed?\n    user: alice\n    tool: notes_delete\n    reviewed: true\n    expect: allow\n"); err != nil {
		t.Fatal(err)
	}
	if out, err := run1("policy", "test", bad); !errors.Is(err, errFailed) || !strings.Contains(out, "1 failed") {
		t.Errorf("a mismatching case must fail: %v\n%s", err, out)
	}
	wild := dir + "/wild.cedar"
	if err := writeTestFile(wild, "@id(\"allow-everything\")\n@outcome(\"allow\")\npermit (principal, action, resource);\n"); err != nil {
		t.Fatal(err)
	}
	if out, err := run1("policy", "check", "--policy", wild); !errors.Is(err, errFailed) || !strings.Contains(out, "allow-everything") {
		t.Errorf("a wildcard allow must be flagged: %v\n%s", err, out)
	}
	broken := dir + "/broken.cedar"
	if err := writeTestFile(broken, "permit (principal, action, resource);\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := run1("policy", "check", "--policy", broken); err == nil {
		t.Error("a policy without @id must be refused")
	}
}

func writeTestFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o600) }

// groupPolicy allows notes_write to the writers of one tenant, holds
// notes_read of readers for the security group, and refuses it to
// everyone else.
const groupPolicy = `
@id("writers-write")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_write")
when { resource.server == "builtin" && principal.tenant == "contoso" && principal.groups.contains("writers") };

@id("readers-read")
@outcome("approve")
@approvers("security")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_read")
when { principal.groups.contains("readers") };

@id("others-no-read")
forbid (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_read")
unless { principal.groups.contains("readers") };
`

// TestMCPGroupPolicy shows that the groups and tenant a broker token
// carries reach the policy: a rule on a group allows, or asks the group's
// approvers, only for members; and that `usher token mcp` refuses groups
// a token cannot carry.
func TestMCPGroupPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyFile := dir + "/policy.cedar"
	if err := writeTestFile(policyFile, groupPolicy); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, map[string]string{"USHER_POLICY_FILE": policyFile})
	token := func(sub string, extra ...string) string {
		t.Helper()
		tok, err := s.cli(t, append([]string{"token", "mcp", "--sub", sub}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	write := func(tok string) map[string]any {
		return mcpCall(t, s.url, tok, "tools/call", map[string]any{"name": "notes_write", "arguments": map[string]any{"name": "n", "body": "b"}})
	}
	read := func(tok string) map[string]any {
		return mcpCall(t, s.url, tok, "tools/call", map[string]any{"name": "notes_read", "arguments": map[string]any{"name": "n"}})
	}
	approvalOf := func(res map[string]any) string {
		meta, _ := res["_meta"].(map[string]any)
		a, _ := meta["usher/approval"].(map[string]any)
		id, _ := a["id"].(string)
		return id
	}

	writer := token("writer", "--tenant", "contoso", "--group", "staff", "--group", "writers")
	if res := write(writer); res["isError"] == true {
		t.Errorf("a writer's notes_write did not run unattended: %v", res)
	}
	for name, tok := range map[string]string{
		"no groups":          token("nobody"),
		"another group":      token("staff", "--tenant", "contoso", "--group", "staff"),
		"a look-alike group": token("shouter", "--tenant", "contoso", "--group", "Writers"),
		"another tenant":     token("outsider", "--tenant", "fabrikam", "--group", "writers"),
	} {
		if res := write(tok); res["isError"] != true || approvalOf(res) == "" {
			t.Errorf("notes_write with %s: %v, want an approval", name, res)
		}
	}

	reader := token("reader", "--group", "readers")
	res := read(reader)
	id := approvalOf(res)
	if res["isError"] != true || id == "" {
		t.Fatalf("a reader's notes_read = %v, want an approval", res)
	}
	st, err := store.Open(t.Context(), s.dataDir+"/usher.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if a, err := st.GetApproval(t.Context(), id); err != nil || strings.Join(a.Approvers, ",") != "security" {
		t.Errorf("the reader's approval = %+v, %v; want it decided by security", a, err)
	}
	nonReader := token("writer", "--tenant", "contoso", "--group", "writers")
	if res := read(nonReader); res["isError"] != true || approvalOf(res) != "" || !strings.Contains(fmt.Sprint(res["content"]), "others-no-read") {
		t.Errorf("a non-reader's notes_read = %v, want denied by others-no-read", res)
	}
	if list := fmt.Sprint(mcpCall(t, s.url, nonReader, "tools/list", map[string]any{})["tools"]); strings.Contains(list, "name:notes_read") {
		t.Error("notes_read is listed for a non-reader")
	}
	if list := fmt.Sprint(mcpCall(t, s.url, reader, "tools/list", map[string]any{})["tools"]); !strings.Contains(list, "name:notes_read") {
		t.Error("notes_read is not listed for a reader")
	}

	many := []string{"token", "mcp", "--sub", "crowd"}
	for i := range broker.MaxGroups + 1 {
		many = append(many, "--group", fmt.Sprint("g", i))
	}
	if _, err := s.cli(t, many...); err == nil {
		t.Errorf("usher token mcp minted a token with %d groups", broker.MaxGroups+1)
	}
	if _, err := s.cli(t, "token", "mcp", "--sub", "long", "--group", strings.Repeat("g", broker.MaxClaimLength+1)); err == nil {
		t.Error("usher token mcp minted a token with an overlong group")
	}
	// What a shell substitutes when the call it ran failed (jq's null, an
	// empty string) speaks for nobody.
	for _, sub := range []string{"null", "undefined", " "} {
		if _, err := s.cli(t, "token", "mcp", "--sub", sub); !errors.Is(err, errUsage) {
			t.Errorf("usher token mcp --sub %q = %v, want a usage error", sub, err)
		}
	}
}

// mcpError posts one JSON-RPC request to /mcp and returns its error's
// code and data, failing the test when it succeeds.
func mcpError(t *testing.T, url, token, method string, params any) (int, json.RawMessage) {
	t.Helper()
	raw, payload := mcpMessage(t, url, token, method, params)
	var msg struct {
		Error *struct {
			Code int
			Data json.RawMessage
		}
	}
	if err := json.Unmarshal(payload, &msg); err != nil || msg.Error == nil {
		t.Fatalf("%s: %s, want an error (%v)", method, raw, err)
	}
	return msg.Error.Code, msg.Error.Data
}

// TestDefaultPolicyHoldsUpstreamResources shows, through usher serve with
// the shipped policy, that an upstream's resources and prompts are listed
// under its prefix and that each read and get waits for a person's
// approval, recorded in an intact audit chain.
func TestDefaultPolicyHoldsUpstreamResources(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, nil)
	up.AddResource(&mcp.Resource{URI: "file:///guide.md", Name: "guide"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		t.Error("the upstream was read")
		return &mcp.ReadResourceResult{}, nil
	})
	up.AddPrompt(&mcp.Prompt{Name: "summarize"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		t.Error("the upstream's prompt was got")
		return &mcp.GetPromptResult{}, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true}))
	// Closed after usher serve stops (cleanups run last first): until
	// then, its catalog keeps a stream open to the upstream, on which it
	// hears of changes, and Close would wait for it.
	t.Cleanup(ts.Close)
	cfg := filepath.Join(t.TempDir(), "usher.yaml")
	if err := writeTestFile(cfg, fmt.Sprintf("mcp:\n  upstreams:\n    - name: docs\n      url: %q\n", ts.URL)); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, nil, "--config", cfg)
	tok, err := s.cli(t, "token", "mcp", "--sub", "https://issuer.example|t|alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(mcpCall(t, s.url, tok, "resources/list", map[string]any{})["resources"]); !strings.Contains(got, "docs__file:///guide.md") {
		t.Errorf("resources/list = %s", got)
	}
	if got := fmt.Sprint(mcpCall(t, s.url, tok, "prompts/list", map[string]any{})["prompts"]); !strings.Contains(got, "docs__summarize") {
		t.Errorf("prompts/list = %s", got)
	}
	for _, r := range []struct {
		method string
		params map[string]any
	}{
		{"resources/read", map[string]any{"uri": "docs__file:///guide.md"}},
		{"prompts/get", map[string]any{"name": "docs__summarize"}},
	} {
		code, data := mcpError(t, s.url, tok, r.method, r.params)
		if code != mcpserver.CodeApprovalRequired || !strings.Contains(string(data), `"status":"pending"`) {
			t.Errorf("%s = %d %s, want a pending approval", r.method, code, data)
		}
	}
	out, err := s.cli(t, "audit", "verify")
	if err != nil || !strings.HasPrefix(out, "audit log intact:") {
		t.Errorf("audit verify: %v %q", err, out)
	}
}

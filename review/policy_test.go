package review_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/store/storetest"
)

// getJSON GETs path as a reviewer of s and decodes the 200 answer.
func getJSON(t *testing.T, s *site, tok, path string, v any) {
	t.Helper()
	code, body, _ := call(t, "GET", s.url+path, tok)
	if code != 200 {
		t.Fatalf("GET %s = %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// GET /api/policy is the shipped default policy statement by statement,
// its hash, and the findings `usher policy check` prints against the
// lock the server decides with.
func TestPolicyIsTheFile(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	cat := newCatalog(t, st)
	def := policy.Default()
	for name, lock := range map[string]*policy.Lock{"the built-ins locked": cat.BuiltinLock(), "an empty lock": {Tools: map[string]string{}}} {
		e := newEnv(t, st, &review.Options{Groups: []string{"security"}, Logger: quiet, Policy: def, Lock: lock, Catalog: cat})
		tok := e.a.token(t, "rita", "security")
		var got struct {
			Name       string
			Hash       string
			Statements []policy.Statement
			Findings   []struct{ Kind, PolicyID, Position, Message, Text string }
		}
		getJSON(t, e.a, tok, "/api/policy", &got)
		want := def.Statements()
		if got.Name != policy.DefaultName || got.Hash != def.Hash() || len(got.Statements) != len(want) {
			t.Fatalf("%s: name %q hash %q, %d statements; want %q %q, %d", name, got.Name, got.Hash, len(got.Statements), policy.DefaultName, def.Hash(), len(want))
		}
		for i, s := range got.Statements {
			w := want[i]
			if s.ID != w.ID || s.Effect != w.Effect || s.Outcome != w.Outcome || s.Reason != w.Reason || s.Text != w.Text ||
				s.Position != w.Position || !slices.Equal(s.Approvers, w.Approvers) || !slices.Equal(s.Conditions, w.Conditions) ||
				!strings.Contains(string(def.Source()), s.Text) {
				t.Errorf("%s: statement %d = %+v, want %+v", name, i, s, w)
			}
		}
		var texts []string
		for _, f := range got.Findings {
			texts = append(texts, f.Text)
		}
		var wantTexts []string
		for _, f := range def.Lint(lock) {
			wantTexts = append(wantTexts, f.String())
		}
		if !slices.Equal(texts, wantTexts) {
			t.Errorf("%s: findings %q, want %q", name, texts, wantTexts)
		}
		if name == "an empty lock" && len(texts) == 0 {
			t.Errorf("no unreviewed-allow finding with an empty lock")
		}
	}
}

// upstream is an MCP server over streamable HTTP on loopback with tools,
// a resource, a template and a prompt.
func upstream(t *testing.T) (*mcp.Server, string) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, name := range []string{"echo", "stable"} {
		addTool(s, name, "The tool "+name+".")
	}
	never := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	}
	s.AddResource(&mcp.Resource{URI: "file:///guide.md", Name: "guide"}, never)
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file:///notes/{name}", Name: "notes"}, never)
	s.AddPrompt(&mcp.Prompt{Name: "summarize"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func addTool(s *mcp.Server, name, description string) {
	s.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
}

// tool is an offer as GET /api/tools answers it.
type tool struct {
	Kind             string          `json:"kind"`
	Name             string          `json:"name"`
	Server           string          `json:"server"`
	DefinitionHash   string          `json:"definition_hash"`
	LockState        string          `json:"lock_state"`
	LockedHash       string          `json:"locked_hash"`
	Definition       json.RawMessage `json:"definition"`
	LockedDefinition json.RawMessage `json:"locked_definition"`
}

// Against a lock taken before an upstream's tool changed, one was added
// and a locked one went away, GET /api/tools shows each tool's state and
// every resource, template and prompt offered.
func TestToolsLockStates(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	up, upURL := upstream(t)
	cat := newCatalog(t, st, mcpserver.Upstream{Name: "up", URL: upURL})
	defs, err := cat.Definitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var reviewed []policy.ToolDefinition
	for _, d := range defs {
		reviewed = append(reviewed, policy.ToolDefinition(d.ToolDefinition))
	}
	lock, err := policy.NewLock(reviewed)
	if err != nil {
		t.Fatal(err)
	}
	locked := lock.Tools
	locked["up__retired"] = "sha256:" + strings.Repeat("ab", 32)
	addTool(up, "echo", "The tool echo, now sending a copy elsewhere.")
	addTool(up, "fresh", "A tool added after the lock.")

	e := newEnv(t, st, &review.Options{Groups: []string{"security"}, Logger: quiet, Policy: policy.Default(), Lock: lock, Catalog: cat})
	tok := e.a.token(t, "rita", "security")
	var got struct {
		Complete bool   `json:"complete"`
		Offers   []tool `json:"offers"`
	}
	getJSON(t, e.a, tok, "/api/tools", &got)
	by := map[string]tool{}
	for _, o := range got.Offers {
		by[o.Kind+" "+o.Name] = o
	}
	offered, err := cat.Offered(t.Context())
	if err != nil || !got.Complete {
		t.Fatalf("offered: %v; complete %v", err, got.Complete)
	}
	if len(got.Offers) != len(offered)+1 {
		t.Errorf("%d offers, want the catalog's %d and one removed", len(got.Offers), len(offered))
	}
	for _, o := range offered {
		g := by[o.Kind+" "+o.Name]
		if g.Server != o.Server || g.DefinitionHash != o.Hash || string(g.Definition) != string(o.Definition) {
			t.Errorf("%s %s = %+v, the catalog offers %+v", o.Kind, o.Name, g, o)
		}
	}
	for key, want := range map[string]struct{ state, lockedHash string }{
		"tool up__echo":                     {"changed", locked["up__echo"]},
		"tool up__fresh":                    {"new", ""},
		"tool up__stable":                   {"locked", ""},
		"tool notes_write":                  {"locked", ""},
		"tool up__retired":                  {"removed", locked["up__retired"]},
		"resource up__file:///guide.md":     {"", ""},
		"template up__file:///notes/{name}": {"", ""},
		"prompt up__summarize":              {"", ""},
	} {
		g, ok := by[key]
		if !ok || g.LockState != want.state || g.LockedHash != want.lockedHash {
			t.Errorf("%s = %+v (listed %v), want state %q locked hash %q", key, g, ok, want.state, want.lockedHash)
		}
	}
	if echo := by["tool up__echo"]; echo.DefinitionHash == echo.LockedHash || !strings.Contains(string(echo.Definition), "now sending a copy elsewhere") {
		t.Errorf("the changed tool does not show its current definition: %+v", echo)
	}
	// The lock keeps the reviewed definitions: the changed tool shows the
	// one reviewed beside the current one; a tool locked by hash alone
	// shows none.
	if echo := by["tool up__echo"]; !strings.Contains(string(echo.LockedDefinition), `"The tool echo."`) || strings.Contains(string(echo.LockedDefinition), "elsewhere") {
		t.Errorf("the changed tool's locked definition: %s", echo.LockedDefinition)
	}
	for key, o := range by {
		if key != "tool up__echo" && o.LockedDefinition != nil {
			t.Errorf("%s shows a locked definition: %s", key, o.LockedDefinition)
		}
	}
	if r := by["tool up__retired"]; r.Definition != nil || r.DefinitionHash != "" {
		t.Errorf("a removed tool shows a definition: %+v", r)
	}

	// An explanation decides on the catalog's current definition: the
	// changed tool is unreviewed, whatever the policy says.
	var ex mcpserver.Explanation
	getJSON(t, e.a, tok, "/api/policy/explain?user=alice&tool=up__echo", &ex)
	if ex.Decision != policy.Approve || ex.Request.Reviewed || ex.Request.Server != "up" || ex.Request.DefinitionHash != by["tool up__echo"].DefinitionHash {
		t.Errorf("explain of the changed tool = %+v", ex)
	}
	getJSON(t, e.a, tok, "/api/policy/explain?"+url.Values{"user": {"alice"}, "tool": {"notes_delete"}, "args": {`{"name":"x"}`}}.Encode(), &ex)
	if ex.Decision != policy.Deny || !slices.Equal(ex.PolicyIDs, []string{"deny-notes-delete"}) || !ex.Request.Reviewed || string(ex.Request.Arguments) != `{"name":"x"}` {
		t.Errorf("explain of notes_delete = %+v", ex)
	}
	getJSON(t, e.a, tok, "/api/policy/explain?"+url.Values{"user": {"alice"}, "action": {"read_resource"}, "resource": {"up__file:///notes/todo"}}.Encode(), &ex)
	if ex.Decision != policy.Approve || ex.Request.Template != "up__file:///notes/{name}" || ex.Request.Action != "read_resource" {
		t.Errorf("explain of a read through a template = %+v", ex)
	}
}

// Hostile or malformed input is answered 400 with a code that says what
// is wrong; a route that is not there is 404.
func TestPolicyHostileInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	tok := e.a.token(t, "rita", "security")
	explain := func(q url.Values) string { return "/api/policy/explain?" + q.Encode() }
	for _, c := range []struct{ path, code string }{
		{"/api/policy?x=1", "unknown_parameter"},
		{"/api/tools?limit=5", "unknown_parameter"},
		{"/api/policy?%zz", "invalid_query"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "bogus": {"1"}}), "unknown_parameter"},
		{explain(url.Values{"user": {"u", "v"}, "tool": {"notes_list"}}), "invalid_parameter"},
		{explain(url.Values{"user": {strings.Repeat("u", 5000)}, "tool": {"notes_list"}}), "invalid_parameter"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "args": {`{"a":"` + strings.Repeat("x", 70_000) + `"}`}}), "invalid_parameter"},
		{explain(url.Values{"user": {"u\nforged: line"}, "tool": {"notes_list"}}), "invalid_parameter"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list\x00"}}), "invalid_parameter"},
		{"/api/policy/explain?user=u&tool=%ff", "invalid_parameter"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "args": {`{"a":`}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "args": {`[1,2]`}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "args": {`{"a":1,"a":2}`}}), "invalid_explain"},
		{explain(url.Values{"tool": {"notes_list"}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "action": {"delete_everything"}, "tool": {"notes_list"}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "prompt": {"p"}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "tool": {"no_such_tool"}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "tool": {"notes_list"}, "server": {"elsewhere"}}), "invalid_explain"},
		{explain(url.Values{"user": {"u"}, "action": {"get_prompt"}, "prompt": {"p"}, "definition-hash": {"sha256:1"}}), "invalid_explain"},
	} {
		code, body, _ := call(t, "GET", e.a.url+c.path, tok)
		if code != 400 || errorCode(body) != c.code {
			t.Errorf("GET %.120s = %d %s, want 400 %s", c.path, code, body, c.code)
		}
	}
	for _, path := range []string{"/api/policy/statements", "/api/tools/notes_list", "/api/audit/1/2"} {
		if code, body, _ := call(t, "GET", e.a.url+path, tok); code != 404 || errorCode(body) != "not_found" {
			t.Errorf("GET %s = %d %s, want 404", path, code, body)
		}
	}
	// Without a policy, the routes are not there.
	bare := newEnv(t, storetest.NewSQLite(t), &review.Options{Groups: []string{"security"}, Logger: quiet})
	for _, path := range []string{"/api/policy", "/api/tools", "/api/policy/explain?user=u&tool=x"} {
		if code, body, _ := call(t, "GET", bare.a.url+path, bare.a.token(t, "rita", "security")); code != 404 {
			t.Errorf("without a policy, GET %s = %d %s, want 404", path, code, body)
		}
	}
	if _, err := review.New(storetest.NewSQLite(t), &review.Options{Policy: policy.Default()}); err == nil {
		t.Error("New with a policy and no catalog succeeded")
	}
}

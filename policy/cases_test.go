package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultPolicy checks the shipped policy against its test cases and
// its own linter.
func TestDefaultPolicy(t *testing.T) {
	p := Default()
	if p.Name() != DefaultName {
		t.Errorf("name %q", p.Name())
	}
	cases, err := LoadCases("testdata/default-cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range RunCases(p, cases) {
		if !r.Passed() {
			t.Error(r)
		}
	}
	lock := &Lock{Tools: map[string]string{}}
	for _, tool := range []string{"sessions_list", "session_read", "approvals_list", "notes_list", "notes_read"} {
		lock.Tools[tool] = hashA
	}
	if f := p.Lint(lock); len(f) != 0 {
		t.Errorf("default policy has findings: %v", f)
	}
	delete(lock.Tools, "notes_read")
	if f := p.Lint(lock); len(f) != 1 || f[0].Kind != UnreviewedAllow || f[0].PolicyID != "allow-notes-read" {
		t.Errorf("findings %v", f)
	}
	// Every statement carries a reason for the reviewer.
	for _, r := range p.rules {
		if r.reason == "" {
			t.Errorf("%s has no @reason", r.id)
		}
	}
}

func TestRunCasesReportsMismatches(t *testing.T) {
	cases := writeCases(t, `
cases:
  - name: expects too much
    user: alice
    tool: notes_write
    reviewed: true
    expect: allow
  - name: right
    user: alice
    tool: notes_delete
    expect: deny
`)
	results := RunCases(Default(), cases)
	if results[0].Passed() || !results[1].Passed() {
		t.Fatalf("results %v", results)
	}
	got := results[0].String()
	for _, want := range []string{"FAIL expects too much: want allow, got approve", "approve-notes-write", "notes_write changes"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if got := results[1].String(); got != "ok   right: deny" {
		t.Errorf("got %q", got)
	}
}

func TestLoadCasesArgs(t *testing.T) {
	cases := writeCases(t, `
cases:
  - name: block mapping
    user: alice
    tool: t
    expect: deny
    args:
      s: text
      n: 3
      f: 1.5
      b: true
      z: null
      d: 2024-01-02
      list: [1, "two", {k: v}]
  - name: JSON string
    user: alice
    tool: t
    server: github
    expect: deny
    args: '{"a": [1, 2]}'
  - name: no args
    user: alice
    tool: t
    expect: deny
`)
	var got map[string]any
	if err := json.Unmarshal(cases[0].Request.Arguments, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"b":true,"d":"2024-01-02","f":1.5,"list":[1,"two",{"k":"v"}],"n":3,"s":"text","z":null}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("args %s, want %s", b, want)
	}
	if string(cases[1].Request.Arguments) != `{"a": [1, 2]}` || cases[1].Request.Tool.Server != "github" {
		t.Errorf("case 2: %+v", cases[1].Request)
	}
	if cases[2].Request.Arguments != nil || cases[2].Request.Tool.Server != BuiltinServer || cases[2].Request.Tool.Reviewed {
		t.Errorf("case 3 defaults: %+v", cases[2].Request)
	}
}

func TestLoadCasesErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "cases:\n  - {name: a, user: u, tool: t, expect: allow}\n  - name: b\n    user: u\n    tool: t\n    reviewd: true\n    expect: allow",
			`unknown key "reviewd" in case 2 (line 6) (did you mean "reviewed"?)`},
		{"unknown top-level key", "case:\n  - {name: a, user: u, tool: t, expect: allow}", `unknown key "case" (line 1) (did you mean "cases"?)`},
		{"several unknown keys", "cases:\n  - {name: a, usr: u, tool: t, expect: allow, argz: {}}",
			"unknown key \"usr\" in case 1 (line 2) (did you mean \"user\"?)\nunknown key \"argz\" in case 1 (line 2) (did you mean \"args\"?)"},
		{"missing user", "cases:\n  - {name: a, tool: t, expect: allow}", "user is required"},
		{"missing tool", "cases:\n  - {name: a, user: u, expect: allow}", "tool is required"},
		{"missing name", "cases:\n  - {user: u, tool: t, expect: allow}", "name is required"},
		{"missing expect", "cases:\n  - {name: a, user: u, tool: t}", "expect must be"},
		{"unknown expect", "cases:\n  - {name: a, user: u, tool: t, expect: permit}", "expect must be"},
		{"duplicate name", "cases:\n  - {name: a, user: u, tool: t, expect: deny}\n  - {name: a, user: u, tool: t, expect: deny}", "duplicate name"},
		{"args a list", "cases:\n  - {name: a, user: u, tool: t, expect: deny, args: [1]}", "must be a mapping"},
		{"args invalid JSON", "cases:\n  - {name: a, user: u, tool: t, expect: deny, args: '{x'}", "not valid JSON"},
		{"args with an alias", "cases:\n  - {name: &n a, user: u, tool: t, expect: deny, args: {b: *n}}", "aliases are not supported"},
		{"args with an infinite number", "cases:\n  - {name: a, user: u, tool: t, expect: deny, args: {n: .inf}}", "not a JSON number"},
		{"args with a non-string key", "cases:\n  - {name: a, user: u, tool: t, expect: deny, args: {1: a}}", "keys must be strings"},
		{"no cases", "cases: []", "no cases"},
		{"two documents", "cases:\n  - {name: a, user: u, tool: t, expect: deny}\n---\ncases: []", "more than one"},
		{"every problem at once", "cases:\n  - {name: a, tool: t, expect: deny}\n  - {name: b, user: u, expect: allow}", "case 1 (\"a\"): user is required\ncase 2 (\"b\"): tool is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cases.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadCases(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func writeCases(t *testing.T, yaml string) []Case {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cases.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases(path)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestCaseActions: a case names what its action acts on, exactly one
// thing.
func TestCaseActions(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"action: read_resource\n    tool: x", "names exactly one resource"},
		{"action: get_prompt\n    resource: x", "names exactly one prompt"},
		{"action: complete\n    prompt: p\n    resource: r", "names exactly one prompt or resource"},
		{"action: delete_resource\n    resource: x", "is not call_tool"},
		{"prompt: p", "names exactly one tool"},
		{"action: get_prompt\n    prompt: p\n    template: t", "template is for a resource"},
	} {
		path := filepath.Join(t.TempDir(), "cases.yaml")
		if err := os.WriteFile(path, []byte("cases:\n  - name: c\n    user: alice\n    expect: allow\n    "+tc.yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadCases(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

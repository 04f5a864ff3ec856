package policy_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/policy"
)

// Each statement lists its annotations as interpreted and its text and
// conditions exactly as the file writes them, whatever strings and
// comments hold.
func TestStatements(t *testing.T) {
	src := `// Reads are fine; "quoted" {braces} in a comment.
@id("allow-read") @outcome("allow") @reason("reads; only")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"read")
when { resource.server == "a;b}" } // trailing; comment
unless { context.arguments has "x(" };

@id("ask-security")
@approvers("security, audit")
permit (
  principal,
  action,
  resource
);
@id("no-delete") forbid (principal, action, resource == Usher::Tool::"delete")
when {
  // nested { braces }
  if resource.server == "builtin" then true else { "k": 1 }.k == 1
};
`
	p, err := policy.Parse("s.cedar", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Statement{
		{
			ID: "allow-read", Effect: "permit", Outcome: policy.Allow, Reason: "reads; only", Approvers: []string{},
			Conditions: []string{`when { resource.server == "a;b}" }`, `unless { context.arguments has "x(" }`},
			Text: `@id("allow-read") @outcome("allow") @reason("reads; only")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"read")
when { resource.server == "a;b}" } // trailing; comment
unless { context.arguments has "x(" };`,
			Position: "s.cedar:2:1",
		},
		{
			ID: "ask-security", Effect: "permit", Outcome: policy.Approve, Approvers: []string{"security", "audit"},
			Conditions: []string{},
			Text:       "@id(\"ask-security\")\n@approvers(\"security, audit\")\npermit (\n  principal,\n  action,\n  resource\n);",
			Position:   "s.cedar:7:1",
		},
		{
			ID: "no-delete", Effect: "forbid", Outcome: policy.Deny, Approvers: []string{},
			Conditions: []string{"when {\n  // nested { braces }\n  if resource.server == \"builtin\" then true else { \"k\": 1 }.k == 1\n}"},
			Text:       "@id(\"no-delete\") forbid (principal, action, resource == Usher::Tool::\"delete\")\nwhen {\n  // nested { braces }\n  if resource.server == \"builtin\" then true else { \"k\": 1 }.k == 1\n};",
			Position:   "s.cedar:14:1",
		},
	}
	got := p.Statements()
	if len(got) != len(want) {
		t.Fatalf("%d statements, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Effect != w.Effect || g.Outcome != w.Outcome || g.Reason != w.Reason ||
			!slices.Equal(g.Approvers, w.Approvers) || !slices.Equal(g.Conditions, w.Conditions) ||
			g.Text != w.Text || g.Position != w.Position {
			t.Errorf("statement %d:\n got %#v\nwant %#v", i, g, w)
		}
	}
}

// The default policy's statements are its file, statement by statement:
// each one's text parses alone into the same statement.
func TestDefaultStatements(t *testing.T) {
	stmts := policy.Default().Statements()
	if len(stmts) == 0 {
		t.Fatal("no statements")
	}
	src := policy.Default().Source()
	at := 0
	for _, s := range stmts {
		i := bytes.Index(src[at:], []byte(s.Text))
		if i < 0 || !strings.HasPrefix(s.Text, `@id("`+s.ID+`")`) || !strings.HasSuffix(s.Text, ";") {
			t.Fatalf("statement %s is not the file's text from %d:\n%s", s.ID, at, s.Text)
		}
		at += i + len(s.Text)
		alone, err := policy.Parse("alone", []byte(s.Text))
		if err != nil {
			t.Fatalf("%s: %v", s.ID, err)
		}
		a := alone.Statements()[0]
		if a.ID != s.ID || a.Effect != s.Effect || a.Outcome != s.Outcome || a.Reason != s.Reason ||
			!slices.Equal(a.Approvers, s.Approvers) || !slices.Equal(a.Conditions, s.Conditions) {
			t.Errorf("%s alone = %+v, in the file %+v", s.ID, a, s)
		}
		for _, c := range s.Conditions {
			if !strings.Contains(s.Text, c) || !(strings.HasPrefix(c, "when") || strings.HasPrefix(c, "unless")) {
				t.Errorf("%s: condition %q is not as written", s.ID, c)
			}
		}
	}
	if strings.TrimSpace(stripComments(string(src[at:]))) != "" {
		t.Errorf("the file goes on after the last statement: %q", src[at:])
	}
}

// stripComments drops // comments, line by line.
func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
	}
	return b.String()
}

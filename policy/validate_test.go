package policy

import (
	"strings"
	"testing"
)

// TestParseRefusesWhatTheModelLacks: a statement that errors whenever it
// is evaluated, or can never match, makes the policy invalid, with where
// and how to fix it.
func TestParseRefusesWhatTheModelLacks(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // each must appear in the error
	}{
		{"misspelt resource attribute", `@id("a")
forbid (principal, action, resource) when { resource.sever == "hr" };`,
			[]string{`test.cedar:2:54: Usher::Prompt, Usher::Resource and Usher::Tool have no attribute "sever" (did you mean "server"?)`}},
		{"misspelt principal attribute", `@id("a") permit (principal, action, resource) when { principal.group.contains("x") };`,
			[]string{`test.cedar:1:64: Usher::User has no attribute "group" (did you mean "groups"?)`}},
		{"attribute of another entity type", `@id("a") permit (principal, action == Usher::Action::"call_tool", resource) when { resource.template == "x" };`,
			[]string{`Usher::Tool has no attribute "template"`}},
		{"template on every action", `@id("a") forbid (principal, action, resource) when { resource.template == "x" };`,
			[]string{`Usher::Prompt and Usher::Tool have no attribute "template"`}},
		{"has on a bracket", `@id("a") permit (principal, action, resource) when { resource["sever"] == "x" };`,
			[]string{`test.cedar:1:64: Usher::Prompt, Usher::Resource and Usher::Tool have no attribute "sever"`}},
		{"misspelt context attribute", `@id("a") permit (principal, action, resource) when { context.client == "x" };`,
			[]string{`test.cedar:1:62: context has no attribute "client"`}},
		{"misspelt arguments", `@id("a") permit (principal, action, resource) when { context.argument.x == 1 };`,
			[]string{`context has no attribute "argument" (did you mean "arguments"?)`}},
		{"unknown action", `@id("a") permit (principal, action == Usher::Action::"call_tol", resource);`,
			[]string{`test.cedar:1:54: unknown action Usher::Action::"call_tol" (did you mean "call_tool"?)`}},
		{"unknown entity type", `@id("a") permit (principal, action, resource is Usher::Tol);`,
			[]string{`test.cedar:1:49: unknown entity type Usher::Tol (did you mean "Usher::Tool"?)`}},
		{"unknown entity type in a condition", `@id("a") permit (principal, action, resource) when { principal in Usher::Group::"x" };`,
			[]string{`unknown entity type Usher::Group`}},
		{"action on another type", `@id("a") permit (principal, action == Usher::Action::"read_resource", resource == Usher::Tool::"x");`,
			[]string{`test.cedar:1:1: no action applies to this scope`}},
		{"entity of another type", `@id("a") @outcome("allow") permit (principal, action, resource == Usher::User::"read");`,
			[]string{`no action applies to this scope`}},
		{"malformed decimal", `@id("a") permit (principal, action, resource) when { context.arguments.x.lessThan(decimal("abc")) };`,
			[]string{`test.cedar:1:91: "abc" does not parse as a decimal value`}},
		{"malformed ip", `@id("a") permit (principal, action, resource) when { ip("10.0.0.300").isLoopback() };`,
			[]string{`"10.0.0.300" does not parse as`}},
		{"a comment is not where", `@id("a") permit (principal, action, resource) // resource.sever
when { resource.sever == "x" };`,
			[]string{`test.cedar:2:17: `}},
		{"every statement", `@id("a") forbid (principal, action, resource) when { resource.sever == "hr" };
@id("b") forbid (principal, action == Usher::Action::"call_tol", resource);`,
			[]string{`test.cedar:1:63: `, `test.cedar:2:54: `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("test.cedar", []byte(tt.src))
			if err == nil {
				t.Fatalf("parsed: %v", p.rules)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestParseLeavesArgumentsToTheCall: the arguments' shape is the tool's,
// so conditions on them are checked per call; values that merely do not
// mix evaluate without error.
func TestParseLeavesArgumentsToTheCall(t *testing.T) {
	for _, cond := range []string{
		`context.arguments has path && context.arguments.path like "/tmp/*"`,
		`context.arguments.amount > 1000`,
		`context.arguments.amount.lessThan(decimal("10.0"))`,
		`context.arguments.tags.contains("x") || context.arguments.n + 1 > 5`,
		`context["arguments"]["a"]["b"] == 1`,
		`context has arguments && context.arguments == {}`,
		`context == {"client_id": "x", "arguments": {}}`,
		`context.arguments.set.containsAll([1, "b"])`,
		`resource.server == 1`,
		`if context.arguments.x then principal.tenant == "a" else resource.name == "b"`,
		`principal.groups.contains("finance") && principal.roles.isEmpty() && context.client_id == "c"`,
		`resource.reviewed && resource.definition_hash like "sha256:*"`,
	} {
		src := `@id("a") permit (principal, action, resource) when { ` + cond + ` };`
		if _, err := Parse("test.cedar", []byte(src)); err != nil {
			t.Errorf("%s: %v", cond, err)
		}
	}
	if _, err := Parse("test.cedar", []byte(`@id("a") permit (principal, action in [Usher::Action::"read_resource", Usher::Action::"complete"], resource is Usher::Resource)
when { resource.uri like "docs__*" && resource.template == "" };`)); err != nil {
		t.Error(err)
	}
}

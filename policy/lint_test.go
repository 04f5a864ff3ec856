package policy

import (
	"strings"
	"testing"
)

// TestLintTemplatePins: only a when clause that is a conjunction with
// resource.template == "<string>" among its terms pins a read permit to
// one template; every way around it is a wildcard.
func TestLintTemplatePins(t *testing.T) {
	const scope = `@id("a") @outcome("allow") permit (principal, action == Usher::Action::"read_resource", resource) `
	for _, tc := range []struct {
		cond string
		pins bool
	}{
		{`when { resource.template == "alpha__file:///{path}" }`, true},
		{`when { "alpha__file:///{path}" == resource.template }`, true},
		{`when { resource.server == "alpha" && resource.template == "alpha__file:///{path}" && principal.tenant == "t" }`, true},
		{`when { resource.template == "alpha__file:///{path}" } unless { resource.uri like "*secret*" }`, true},
		{`when { resource.template == "alpha__file:///{path}" } when { resource.server == "alpha" }`, true},
		{`unless { resource.template == "alpha__file:///{path}" }`, false},
		{`when { resource.template == "alpha__file:///{path}" || true }`, false},
		{`when { resource.server == "alpha" && (resource.template == "alpha__file:///{path}" || resource.uri like "*") }`, false},
		{`when { !(resource.template == "alpha__file:///{path}") }`, false},
		{`when { !(resource.template != "alpha__file:///{path}") }`, false},
		{`when { if resource.server == "alpha" then resource.template == "alpha__file:///{path}" else true }`, false},
		{`when { resource.template != "alpha__file:///{path}" }`, false},
		{`when { resource.template == resource.uri }`, false},
		{`when { resource.template like "alpha__*" }`, false},
		{`when { resource.server == "alpha" }`, false},
	} {
		p := mustParse(t, scope+tc.cond+";")
		findings := p.Lint(nil)
		if pinned := len(findings) == 0; pinned != tc.pins {
			t.Errorf("%s: pinned %v, want %v (%v)", tc.cond, pinned, tc.pins, findings)
		}
	}
}

// TestLintToolNames: an allow of a misspelt or look-alike tool name says
// that no tool goes by it (locking cannot fix it), naming the near match;
// one of a name the lock lacks waits for a review; one a forbid without
// conditions overrides never takes effect.
func TestLintToolNames(t *testing.T) {
	hash := "sha256:" + strings.Repeat("0", 64)
	lock := &Lock{Tools: map[string]string{"alpha__search": hash, "notes_list": hash}}
	allow := func(id, tool string) string {
		return `@id("` + id + `") @outcome("allow") permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"` + tool + `");` + "\n"
	}
	p := mustParse(t, allow("typo", "alpha__serach")+allow("lookalike", "n\u043etes_list")+allow("case", "Notes_List")+
		allow("new", "beta__fetch")+allow("locked", "notes_list")+allow("shadowed", "alpha__search")+
		`@id("no-search") forbid (principal, action, resource == Usher::Tool::"alpha__search");`+"\n"+
		allow("conditional", "drop")+`@id("no-drop-for-some") forbid (principal, action, resource == Usher::Tool::"drop") when { principal.tenant == "x" };`)
	got := map[string]Finding{}
	for _, f := range p.Lint(lock) {
		got[f.PolicyID] = f
	}
	for id, want := range map[string][]string{
		"typo":      {string(UnknownTool), `no tool "alpha__serach" is in the tool lock, but "alpha__search" is`},
		"lookalike": {string(UnknownTool), `"n\u043etes_list" is not plain ASCII`, `did you mean "notes_list"?`},
		"case":      {string(UnknownTool), `"notes_list" is`},
		"new":       {string(UnreviewedAllow), "until `usher tools lock` reviews it"},
		"shadowed":  {string(ShadowedAllow), `forbid "no-search" (test.cedar:7:1) denies Usher::Tool::"alpha__search"`},
	} {
		f, ok := got[id]
		if !ok {
			t.Errorf("%s: no finding", id)
			continue
		}
		if string(f.Kind) != want[0] {
			t.Errorf("%s: kind %s, want %s", id, f.Kind, want[0])
		}
		for _, w := range want[1:] {
			if !strings.Contains(f.Message, w) {
				t.Errorf("%s: %q lacks %q", id, f.Message, w)
			}
		}
	}
	if f, ok := got["locked"]; ok {
		t.Errorf("locked: %v", f)
	}
	if f := got["conditional"]; f.Kind != UnreviewedAllow {
		t.Errorf("a forbid with a condition shadows nothing: %v", f)
	}
	// Without a lock, a look-alike is still never allowed.
	if f := mustParse(t, allow("lookalike", "n\u043etes_list")).Lint(nil); len(f) != 1 || f[0].Kind != UnknownTool {
		t.Errorf("without a lock: %v", f)
	}
}

// TestLintGroupCase: a group name that differs only in case from another
// one of the file is flagged, in @approvers and in conditions alike.
func TestLintGroupCase(t *testing.T) {
	p := mustParse(t, `@id("a") @approvers("finance") permit (principal, action, resource == Usher::Tool::"pay");
@id("b") @approvers("Finance, security") permit (principal, action, resource == Usher::Tool::"refund");
@id("c") forbid (principal, action, resource == Usher::Tool::"pay") unless { principal.groups.containsAny(["FINANCE", "staff"]) };
@id("d") forbid (principal, action, resource == Usher::Tool::"x") unless { principal.groups.contains("security") && principal.groups.contains("staff") };`)
	var got []string
	for _, f := range p.Lint(nil) {
		if f.Kind != GroupCase {
			t.Errorf("unexpected %v", f)
			continue
		}
		got = append(got, f.PolicyID+": "+f.Message)
	}
	want := []string{
		`b: group "Finance" differs only in case from "finance" (test.cedar:1:1): group names match case-sensitively, so these are two groups`,
		`c: group "FINANCE" differs only in case from "finance" (test.cedar:1:1): group names match case-sensitively, so these are two groups`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

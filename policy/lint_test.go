package policy

import "testing"

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

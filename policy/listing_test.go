package policy

import (
	"slices"
	"testing"
)

// listingPolicy restricts tools in every way a listing must tell apart.
const listingPolicy = `
@id("allow-pay") @outcome("allow")
permit (principal, action, resource == Usher::Tool::"pay")
when { context.arguments.amount < 100 };

@id("forbid-large-payments")
forbid (principal, action, resource == Usher::Tool::"pay")
when { context.arguments.amount > 1000 };

@id("forbid-unsafe-paths")
forbid (principal, action, resource == Usher::Tool::"read")
unless { context has arguments && context.arguments has path && context.arguments.path like "/srv/*" };

@id("forbid-whole-context")
forbid (principal, action, resource == Usher::Tool::"echo")
when { context == {"client_id": "x", "arguments": {}} };

@id("forbid-drop")
forbid (principal, action, resource == Usher::Tool::"drop");

@id("forbid-other-tenants")
forbid (principal, action, resource == Usher::Tool::"admin")
when { principal.tenant != "contoso" };

@id("forbid-client")
forbid (principal, action, resource == Usher::Tool::"export")
when { context.client_id == "untrusted-client" };

@id("broken")
forbid (principal, action, resource == Usher::Tool::"broken")
when { principal.tenant == "" || 9223372036854775807 + 1 > 0 }; // overflows: an error whatever the request

@id("broken-permit")
permit (principal, action, resource == Usher::Tool::"flaky")
when { resource.server == "" || 9223372036854775807 + 1 > 0 };
`

// TestDecideListing checks which tools a listing hides: only those denied
// whatever the arguments.
func TestDecideListing(t *testing.T) {
	p := mustParse(t, listingPolicy)
	for _, tc := range []struct {
		name, tool, tenant, client string
		hidden                     bool
		policyIDs                  []string
	}{
		{name: "a forbid on an argument's value", tool: "pay"},
		{name: "a forbid unless an argument matches", tool: "read"},
		{name: "a forbid on the whole context", tool: "echo"},
		{name: "no statement", tool: "other"},
		{name: "an unconditional forbid", tool: "drop", hidden: true, policyIDs: []string{"forbid-drop"}},
		{name: "a forbid on the principal, matching", tool: "admin", tenant: "fabrikam", hidden: true, policyIDs: []string{"forbid-other-tenants"}},
		{name: "a forbid on the principal, not matching", tool: "admin", tenant: "contoso"},
		{name: "a forbid on the client, matching", tool: "export", client: "untrusted-client", hidden: true, policyIDs: []string{"forbid-client"}},
		{name: "a forbid on the client, not matching", tool: "export", client: "claude"},
		{name: "a forbid that fails to evaluate", tool: "broken", hidden: true, policyIDs: []string{"broken"}},
		{name: "a permit that fails to evaluate", tool: "flaky", hidden: true, policyIDs: []string{"broken-permit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := call(tc.tool, `{"ignored": true}`)
			req.Principal.Tenant = tc.tenant
			req.ClientID = tc.client
			d := p.DecideListing(req)
			if hidden := d.Outcome == Deny; hidden != tc.hidden {
				t.Errorf("outcome %s, want hidden %v: %q", d.Outcome, tc.hidden, d.Reasons)
			}
			if tc.hidden && !slices.Equal(d.PolicyIDs, tc.policyIDs) {
				t.Errorf("policy ids %q, want %q", d.PolicyIDs, tc.policyIDs)
			}
			if d.PolicyHash != p.Hash() {
				t.Errorf("policy hash %q", d.PolicyHash)
			}
		})
	}
	if d := p.DecideListing(Request{Tool: Tool{Name: "pay"}}); d.Outcome != Deny {
		t.Errorf("a listing for no user: %s", d.Outcome)
	}
}

// TestListingIsNotTheCall checks that a listed tool's calls are still
// decided on their arguments: listing "pay" says nothing of a large
// payment, and the arguments-free evaluation Decide would make of a
// listing (with {}) is what hid the tool.
func TestListingIsNotTheCall(t *testing.T) {
	p := mustParse(t, listingPolicy)
	if d := p.DecideListing(call("pay", "")); d.Outcome == Deny {
		t.Fatalf("pay hidden: %q", d.Reasons)
	}
	if d := p.Decide(call("pay", `{}`)); d.Outcome != Deny {
		t.Errorf("pay with no arguments = %s, want deny (its statements cannot be evaluated)", d.Outcome)
	}
	if d := p.Decide(call("pay", `{"amount": 5}`)); d.Outcome != Allow {
		t.Errorf("pay 5 = %s: %q", d.Outcome, d.Reasons)
	}
	if d := p.Decide(call("pay", `{"amount": 5000}`)); d.Outcome != Deny || !slices.Equal(d.PolicyIDs, []string{"forbid-large-payments"}) {
		t.Errorf("pay 5000 = %s %q", d.Outcome, d.PolicyIDs)
	}
}

func TestReadsArguments(t *testing.T) {
	for _, tc := range []struct {
		cond  string
		reads bool
	}{
		{`context.arguments.amount > 1`, true},
		{`context["arguments"]["amount"] > 1`, true},
		{`context has arguments`, true},
		{`context has arguments.amount`, true},
		{`context == {}`, true},
		{`principal.tenant == "x" && (context.arguments.a == 1 || true)`, true},
		{`context.client_id == "x"`, false},
		{`context has client_id`, false},
		{`principal.tenant == "x"`, false},
		{`resource.name like "notes_*"`, false},
	} {
		p := mustParse(t, `@id("p") forbid (principal, action, resource) when { `+tc.cond+` };`)
		if got := p.rules[0].readsArguments; got != tc.reads {
			t.Errorf("%s: reads arguments %v, want %v", tc.cond, got, tc.reads)
		}
	}
}

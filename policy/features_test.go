package policy

import (
	"slices"
	"strings"
	"testing"
)

// featurePolicy decides resources, prompts and completions of upstreams:
// docs' resources are allowed, ev's prompts allowed in tenant contoso and
// its secret prompt denied, anything else from anywhere allowed by a
// permit that names no action (which must not reach resources or prompts).
const featurePolicy = `
@id("allow-docs-resources") @outcome("allow")
permit (principal, action == Usher::Action::"read_resource", resource)
when { resource.server == "docs" };

@id("allow-ev-prompts") @outcome("allow")
permit (principal, action in [Usher::Action::"get_prompt", Usher::Action::"complete"], resource is Usher::Prompt)
when { resource.server == "ev" && principal.tenant == "contoso" };

@id("deny-secret-prompt")
forbid (principal, action, resource == Usher::Prompt::"ev__secret");

@id("deny-other-tenants")
forbid (principal, action == Usher::Action::"read_resource", resource)
when { resource.server == "docs" && principal.tenant != "contoso" };

@id("allow-reviewed-anything") @outcome("allow")
permit (principal, action, resource)
when { resource.reviewed };

@id("allow-everything-of-wide") @outcome("allow")
permit (principal, action, resource)
when { resource.server == "wide" };
`

func TestDecideFeatures(t *testing.T) {
	p, err := Parse("features.cedar", []byte(featurePolicy))
	if err != nil {
		t.Fatal(err)
	}
	alice := Principal{ID: "alice", Tenant: "contoso"}
	mallory := Principal{ID: "mallory", Tenant: "fabrikam"}
	res := func(who Principal, uri, server string) Request {
		return Request{Principal: who, Action: ActionReadResource, Resource: Resource{URI: uri, Server: server, DefinitionHash: "h"}}
	}
	prompt := func(who Principal, a Action, name, server string) Request {
		return Request{Principal: who, Action: a, Prompt: Prompt{Name: name, Server: server, DefinitionHash: "h"}, Arguments: []byte(`{"topic":"x"}`)}
	}
	for _, tc := range []struct {
		name    string
		req     Request
		want    Outcome
		listing Outcome
		ids     []string
		reason  string
	}{
		{"an allowed resource", res(alice, "docs__file:///a", "docs"), Allow, Allow, []string{"allow-docs-resources"}, ""},
		{"another tenant is denied the resource", res(mallory, "docs__file:///a", "docs"), Deny, Deny, []string{"deny-other-tenants"}, ""},
		{"an unmatched resource needs approval", res(alice, "ev__test://x", "ev"), Approve, Approve, nil, "no policy matched"},
		{"a URI that is not plain is held back", res(alice, "docs__file:///a b", "docs"), Approve, Approve, []string{"allow-docs-resources"}, "not plainly named"},
		{"a permit for every action does not reach resources", res(alice, "wide__x://y", "wide"), Approve, Approve, []string{"allow-everything-of-wide"}, "names the action"},
		{"an allowed prompt", prompt(alice, ActionGetPrompt, "ev__greet", "ev"), Allow, Allow, []string{"allow-ev-prompts"}, ""},
		{"an allowed completion of a prompt", prompt(alice, ActionComplete, "ev__greet", "ev"), Allow, Allow, []string{"allow-ev-prompts"}, ""},
		{"a prompt of another tenant needs approval", prompt(mallory, ActionGetPrompt, "ev__greet", "ev"), Approve, Approve, nil, ""},
		{"a denied prompt", prompt(alice, ActionGetPrompt, "ev__secret", "ev"), Deny, Deny, []string{"deny-secret-prompt"}, ""},
		{"a prompt named with a look-alike letter is held back", prompt(alice, ActionGetPrompt, "ev__grеet", "ev"), Approve, Approve, []string{"allow-ev-prompts"}, "not plainly named"},
		{"a completion of a resource template", Request{Principal: alice, Action: ActionComplete,
			Resource: Resource{URI: "docs__file:///{path}", Server: "docs"}}, Approve, Approve, nil, ""},
		{"an unknown action", Request{Principal: alice, Action: "delete_resource", Resource: Resource{URI: "docs__x", Server: "docs"}}, Deny, Deny, nil, ""},
		{"no prompt named", Request{Principal: alice, Action: ActionGetPrompt}, Deny, Deny, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.req)
			if d.Outcome != tc.want || !slices.Equal(d.PolicyIDs, tc.ids) {
				t.Fatalf("Decide = %s %v (%v), want %s %v", d.Outcome, d.PolicyIDs, d.Reasons, tc.want, tc.ids)
			}
			if tc.reason != "" && !strings.Contains(strings.Join(d.Reasons, " "), tc.reason) {
				t.Errorf("reasons %q lack %q", d.Reasons, tc.reason)
			}
			if l := p.DecideListing(tc.req); l.Outcome != tc.listing {
				t.Errorf("DecideListing = %s (%v), want %s", l.Outcome, l.Reasons, tc.listing)
			}
		})
	}
}

// TestDefaultPolicyFeatures: the shipped policy allows no upstream
// resource, prompt or completion unattended, and denies none: each needs a
// person.
func TestDefaultPolicyFeatures(t *testing.T) {
	p := Default()
	who := Principal{ID: "alice", Tenant: "t"}
	for _, req := range []Request{
		{Principal: who, Action: ActionReadResource, Resource: Resource{URI: "sessions_list", Server: "up"}},
		{Principal: who, Action: ActionGetPrompt, Prompt: Prompt{Name: "sessions_list", Server: "up"}},
		{Principal: who, Action: ActionComplete, Prompt: Prompt{Name: "notes_read", Server: "up"}},
		{Principal: who, Action: ActionComplete, Resource: Resource{URI: "up__x://{y}", Server: "up"}},
	} {
		if d := p.Decide(req); d.Outcome != Approve {
			t.Errorf("%s %+v: %s (%v), want approve", req.Action, req, d.Outcome, d.Reasons)
		}
	}
}

// TestExplainFeature: an explanation of a read, a prompt get and a
// completion names the action, the Cedar entity with its server, the
// template a URI matched, the definition hash, the argument completed, and
// why the outcome is what it is.
func TestExplainFeature(t *testing.T) {
	p, err := Parse("features.cedar", []byte(featurePolicy))
	if err != nil {
		t.Fatal(err)
	}
	alice := Principal{ID: "alice", Tenant: "contoso"}
	for _, tc := range []struct {
		name string
		req  Request
		want []string
	}{
		{"a read of a listed resource", Request{Principal: alice, Action: ActionReadResource, Resource: Resource{URI: "docs__file:///a", Server: "docs", DefinitionHash: "sha256:ab"}}, []string{
			"decision:    allow\n", "action:      read_resource\n",
			`target:      Usher::Resource::"docs__file:///a", server "docs", never reviewed (the tool lock holds tools only)` + "\n",
			"definition:  sha256:ab\n", `  - permit "allow-docs-resources" matched (outcome allow)` + "\n", "policies:    allow-docs-resources\n",
		}},
		{"a read through a template", Request{Principal: alice, Action: ActionReadResource, Resource: Resource{URI: "wide__x://y", Template: "wide__x://{id}", Server: "wide"}}, []string{
			"decision:    approve\n", `template:    "wide__x://{id}"` + "\n", "but none of them names the action read_resource", "approvers:   the requesting user\n",
		}},
		{"a prompt get", Request{Principal: alice, Action: ActionGetPrompt, Prompt: Prompt{Name: "ev__secret", Server: "ev"}}, []string{
			"decision:    deny\n", "action:      get_prompt\n", `target:      Usher::Prompt::"ev__secret", server "ev"`, "policies:    deny-secret-prompt\n",
		}},
		{"a completion of a prompt's argument", Request{Principal: alice, Action: ActionComplete, Prompt: Prompt{Name: "ev__greet", Server: "ev"},
			Arguments: []byte(`{"argument":{"name":"topic","value":"we"}}`)}, []string{
			"decision:    allow\n", "action:      complete\n", `Usher::Prompt::"ev__greet"`, `completes:   prompt argument "topic", value "we"` + "\n",
		}},
		{"a completion of a template's variable", Request{Principal: alice, Action: ActionComplete, Resource: Resource{URI: "docs__file:///{path}", Template: "docs__file:///{path}", Server: "docs"},
			Arguments: []byte(`{"argument":{"name":"path","value":"guи"}}`)}, []string{
			"decision:    approve\n", `Usher::Resource::"docs__file:///{path}"`, `completes:   template variable "path", value "gu\u0438"` + "\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Explain(tc.req, p.Decide(tc.req))
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("Explain lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "tool:") {
				t.Errorf("Explain of %s names a tool:\n%s", tc.req.Action, out)
			}
		})
	}
}

// TestLintFeatures: an allow permit naming one prompt or resource, or one
// resource template for reads, is no wildcard; one allowing every resource
// of a server is.
func TestLintFeatures(t *testing.T) {
	p, err := Parse("lint.cedar", []byte(`
@id("one-prompt") @outcome("allow")
permit (principal, action == Usher::Action::"get_prompt", resource == Usher::Prompt::"docs__greet");
@id("one-resource") @outcome("allow")
permit (principal, action == Usher::Action::"read_resource", resource == Usher::Resource::"docs__file:///a");
@id("one-template") @outcome("allow")
permit (principal, action in [Usher::Action::"read_resource", Usher::Action::"complete"], resource is Usher::Resource)
when { resource.server == "docs" && resource.template == "docs__file:///{path}" };
@id("a-template-for-every-action") @outcome("allow")
permit (principal, action, resource is Usher::Resource)
when { resource.template == "docs__file:///{path}" };
@id("every-resource") @outcome("allow")
permit (principal, action == Usher::Action::"read_resource", resource)
when { resource.server == "docs" };
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range p.Lint(&Lock{Tools: map[string]string{}}) {
		got = append(got, f.PolicyID+" "+string(f.Kind))
	}
	if want := []string{"a-template-for-every-action wildcard-allow", "every-resource wildcard-allow"}; !slices.Equal(got, want) {
		t.Errorf("findings %q, want %q", got, want)
	}
}

package mcpserver_test

import (
	"encoding/json"
	"testing"

	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
)

// TestPolicyDeciderListing checks that tools/list is decided by the policy's
// listing decision: a tool forbidden only for some argument values is
// listed, one forbidden whatever the arguments is not, and a call is still
// decided on its arguments.
func TestPolicyDeciderListing(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("test.cedar", []byte(`
@id("approve-pay")
permit (principal, action, resource == Usher::Tool::"pay");

@id("forbid-large-payments")
forbid (principal, action, resource == Usher::Tool::"pay")
when { context.arguments.amount > 1000 };

@id("forbid-drop")
forbid (principal, action, resource == Usher::Tool::"drop");
`))
	if err != nil {
		t.Fatal(err)
	}
	d := mcpserver.PolicyDecider{Policy: p}
	decide := func(tool string, listing bool, args string) mcpserver.Decision {
		t.Helper()
		c := mcpserver.Call{Principal: "https://idp.example.com|tenant|alice", Tool: tool, DefinitionHash: "h", Listing: listing}
		if !listing {
			c.Arguments = json.RawMessage(args)
		}
		v, err := d.Decide(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		return v.Decision
	}
	if got := decide("pay", true, ""); got == mcpserver.Deny {
		t.Error("pay is hidden from tools/list, though only large payments are forbidden")
	}
	if got := decide("drop", true, ""); got != mcpserver.Deny {
		t.Errorf("drop is listed (%s), though it is always forbidden", got)
	}
	if got := decide("pay", false, `{"amount":5}`); got != mcpserver.Approve {
		t.Errorf("pay 5 = %s, want approve", got)
	}
	if got := decide("pay", false, `{"amount":5000}`); got != mcpserver.Deny {
		t.Errorf("pay 5000 = %s, want deny", got)
	}
}

// TestPolicyDeciderFeatures checks that resource reads, prompt gets and
// completions reach the policy as their own actions on their own entities:
// a permit of one kind of entity allows nothing of another, and a
// completion of a prompt is decided on the prompt.
func TestPolicyDeciderFeatures(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("test.cedar", []byte(`
@id("allow-docs") @outcome("allow")
permit (principal, action == Usher::Action::"read_resource", resource is Usher::Resource)
when { resource.server == "docs" && resource.template == "docs__file:///{path}" };

@id("allow-greet") @outcome("allow")
permit (principal, action in [Usher::Action::"get_prompt", Usher::Action::"complete"], resource == Usher::Prompt::"docs__greet");

@id("forbid-tool-greet")
forbid (principal, action, resource == Usher::Tool::"docs__greet");
`))
	if err != nil {
		t.Fatal(err)
	}
	d := mcpserver.PolicyDecider{Policy: p}
	alice := "https://idp.example.com|tenant|alice"
	for _, tc := range []struct {
		call mcpserver.Call
		want mcpserver.Decision
	}{
		{mcpserver.Call{Action: mcpserver.ActionReadResource, Tool: "docs__file:///a", Template: "docs__file:///{path}", Server: "docs"}, mcpserver.Allow},
		{mcpserver.Call{Action: mcpserver.ActionReadResource, Tool: "docs__file:///a", Server: "docs"}, mcpserver.Approve},
		{mcpserver.Call{Action: mcpserver.ActionGetPrompt, Tool: "docs__greet", Server: "docs"}, mcpserver.Allow},
		{mcpserver.Call{Action: mcpserver.ActionComplete, Ref: mcpserver.RefPrompt, Tool: "docs__greet", Server: "docs"}, mcpserver.Allow},
		{mcpserver.Call{Action: mcpserver.ActionComplete, Ref: mcpserver.RefResource, Tool: "docs__greet", Server: "docs"}, mcpserver.Approve},
		{mcpserver.Call{Tool: "docs__greet", Server: "docs"}, mcpserver.Deny},
	} {
		tc.call.Principal, tc.call.DefinitionHash, tc.call.Arguments = alice, "h", json.RawMessage(`{}`)
		v, err := d.Decide(t.Context(), tc.call)
		if err != nil || v.Decision != tc.want {
			t.Errorf("%s %s (ref %q, template %q) = %s %v (%v), want %s", tc.call.Action, tc.call.Tool, tc.call.Ref, tc.call.Template, v.Decision, v.Reasons, err, tc.want)
		}
	}
}

// TestPolicyRequest checks the caller and the tool as the policy sees
// them: the tenant of the token, else of the principal id; reviewed only
// at the lock's hash; the built-in server when the call names none.
func TestPolicyRequest(t *testing.T) {
	t.Parallel()
	lock := &policy.Lock{Tools: map[string]string{"notes_write": "h1"}}
	alice := "https://idp.example.com|contoso|alice"
	req := mcpserver.PolicyRequest(mcpserver.Call{Principal: alice, Tool: "notes_write", DefinitionHash: "h1", Groups: []string{"g"}}, lock)
	if req.Principal.Tenant != "contoso" || req.Principal.ID != alice || len(req.Principal.Groups) != 1 {
		t.Errorf("principal = %+v, want alice of contoso in her group", req.Principal)
	}
	if !req.Tool.Reviewed || req.Tool.Server != policy.BuiltinServer {
		t.Errorf("tool = %+v, want reviewed, built in", req.Tool)
	}
	req = mcpserver.PolicyRequest(mcpserver.Call{Principal: alice, Tenant: "fabrikam", Tool: "notes_write", DefinitionHash: "h2", Server: "notes"}, lock)
	if req.Principal.Tenant != "fabrikam" || req.Tool.Reviewed || req.Tool.Server != "notes" {
		t.Errorf("request = %+v, want the token's tenant, not reviewed at another hash, server notes", req)
	}
	if req := mcpserver.PolicyRequest(mcpserver.Call{Principal: "alice", Tool: "notes_write", DefinitionHash: "h1"}, nil); req.Principal.Tenant != "" || req.Tool.Reviewed {
		t.Errorf("without a lock or a tenant: %+v", req)
	}
}

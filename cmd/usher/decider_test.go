package main

import (
	"encoding/json"
	"testing"

	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
)

// TestDeciderListing checks that tools/list is decided by the policy's
// listing decision: a tool forbidden only for some argument values is
// listed, one forbidden whatever the arguments is not, and a call is still
// decided on its arguments.
func TestDeciderListing(t *testing.T) {
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
	d := decider{policy: p}
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

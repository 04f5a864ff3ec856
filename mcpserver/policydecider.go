package mcpserver

import (
	"cmp"
	"context"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/policy"
)

// PolicyDecider is the Decider of a fail-closed Cedar policy (package
// policy): each call, listing or feature request is decided as the
// policy.Request that PolicyRequest makes of it, and the policy's outcome
// is the Verdict. Lock may be nil: then no tool is reviewed.
type PolicyDecider struct {
	Policy *policy.Policy
	Lock   *policy.Lock
}

// Decide decides c with the policy: a listing with its listing decision,
// anything else with its call decision.
func (d PolicyDecider) Decide(_ context.Context, c Call) (Verdict, error) {
	decide := d.Policy.Decide
	if c.Listing {
		decide = d.Policy.DecideListing
	}
	dec := decide(PolicyRequest(c, d.Lock))
	v := Verdict{PolicyIDs: dec.PolicyIDs, PolicyHash: dec.PolicyHash, Reasons: dec.Reasons, Approvers: dec.Approvers}
	switch dec.Outcome {
	case policy.Allow:
		v.Decision = Allow
	case policy.Approve:
		v.Decision = Approve
	default:
		v.Decision = Deny
	}
	return v, nil
}

// PolicyRequest is the policy's request for c: the caller as principal
// (its tenant, when its token names none, taken from its principal id),
// and the tool — reviewed when the lock holds its definition hash —, the
// resource or the prompt it acts on, of the built-in server when c names
// none. `usher policy explain` builds its request here too, so that what it
// explains is what the server decides.
func PolicyRequest(c Call, lock *policy.Lock) policy.Request {
	server := cmp.Or(c.Server, policy.BuiltinServer)
	req := policy.Request{
		Principal: policy.Principal{ID: c.Principal, Tenant: cmp.Or(c.Tenant, identity.TenantOf(c.Principal)), Groups: c.Groups},
		Action:    policy.Action(c.Action),
		Arguments: c.Arguments,
		ClientID:  c.ClientID,
	}
	switch {
	case c.Action == "" || c.Action == ActionCallTool:
		req.Tool = policy.Tool{
			Name: c.Tool, Server: server, DefinitionHash: c.DefinitionHash,
			Reviewed: lock.Reviewed(c.Tool, c.DefinitionHash),
		}
	case c.Action == ActionGetPrompt || c.Action == ActionComplete && c.Ref == RefPrompt:
		req.Prompt = policy.Prompt{Name: c.Tool, Server: server, DefinitionHash: c.DefinitionHash}
	default:
		req.Resource = policy.Resource{URI: c.Tool, Server: server, Template: c.Template, DefinitionHash: c.DefinitionHash}
	}
	return req
}

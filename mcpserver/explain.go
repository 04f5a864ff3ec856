package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/usherhq/usher/internal/jcs"
	"github.com/usherhq/usher/policy"
)

// ExplainInput is a request to explain, as `usher policy explain` takes
// it in flags and the reviewers' GET /api/policy/explain in its query:
// each field is the flag or parameter of its name.
type ExplainInput struct {
	// User is the principal id (issuer|tenant|object id) or a user name.
	// Required.
	User string
	// Action is call_tool (the default when empty), read_resource,
	// get_prompt or complete.
	Action string
	// Tool, Resource, Prompt and Template name what the action acts on:
	// Tool for call_tool, Resource for read_resource, Prompt for
	// get_prompt, Prompt or Template for complete. With read_resource and
	// DefinitionHash, Template is the template the URI matched.
	Tool, Resource, Prompt, Template string
	// Argument is the argument being completed, "name=value": for
	// complete, which needs it.
	Argument string
	// Server is the upstream's name or policy.BuiltinServer. Default:
	// the catalog's; with DefinitionHash, builtin for a tool and required
	// for the others.
	Server string
	// Args are the call's or prompt's arguments, a JSON object; empty
	// means {}.
	Args string
	// Groups are the user's groups.
	Groups []string
	// DefinitionHash is the definition hash to decide with. Default: the
	// catalog's, which then must offer what the input names.
	DefinitionHash string
}

// InputError is what is wrong with an ExplainInput, for the person who
// wrote it.
type InputError struct{ Problem string }

func (e *InputError) Error() string { return e.Problem }

func inputErrorf(format string, args ...any) error {
	return &InputError{Problem: fmt.Sprintf(format, args...)}
}

// Resolver finds what a request of action names in the catalog, as
// Catalog.Resolve does; `usher policy explain` opens a catalog only when
// it is asked.
type Resolver func(ctx context.Context, action Action, ref, name string) (Feature, error)

// check returns the action, or what is wrong with the input for it.
func (in ExplainInput) check() (Action, error) {
	if in.User == "" {
		return "", inputErrorf("user is required")
	}
	a := Action(in.Action)
	if a == "" {
		a = ActionCallTool
	}
	named := map[string]string{"tool": in.Tool, "resource": in.Resource, "prompt": in.Prompt, "template": in.Template}
	var want []string // the inputs, one of which names the target
	switch a {
	case ActionCallTool:
		want = []string{"tool"}
	case ActionReadResource:
		want = []string{"resource"}
	case ActionGetPrompt:
		want = []string{"prompt"}
	case ActionComplete:
		want = []string{"prompt", "template"}
	default:
		return "", inputErrorf("action %q is not call_tool, read_resource, get_prompt or complete", in.Action)
	}
	var given []string
	for _, k := range []string{"tool", "resource", "prompt", "template"} {
		if named[k] != "" && (k != "template" || a != ActionReadResource) {
			given = append(given, k)
		}
	}
	if len(given) != 1 || !slices.Contains(want, given[0]) {
		return "", inputErrorf("%s takes exactly one of %s", a, strings.Join(want, ", "))
	}
	if (in.Argument != "") != (a == ActionComplete) {
		return "", inputErrorf("argument NAME=VALUE is for complete, and complete needs it")
	}
	if in.DefinitionHash != "" && a != ActionCallTool && in.Server == "" {
		return "", inputErrorf("with a definition hash, server names the upstream")
	}
	return a, nil
}

// ExplainCall is the call that in describes, as the MCP server would
// decide it: what it names, with its server and definition hash from the
// catalog (through resolve) unless in gives the hash. Decide it with
// PolicyRequest. A problem with in is an *InputError; one that the
// catalog does not offer wraps ErrNoFeature too. Upstreams that could not
// be listed are no error when the catalog still resolves the name.
func ExplainCall(ctx context.Context, in ExplainInput, resolve Resolver) (Call, error) {
	a, err := in.check()
	if err != nil {
		return Call{}, err
	}
	args := json.RawMessage(`{}`)
	if in.Args != "" {
		canon, err := jcs.Canonicalize([]byte(in.Args))
		if err != nil || canon[0] != '{' {
			return Call{}, inputErrorf("args must be a JSON object (I-JSON)")
		}
		args = canon
	}
	ref, name := RefResource, in.Tool+in.Resource+in.Template
	if in.Prompt != "" {
		ref, name = RefPrompt, in.Prompt
	}
	if a == ActionReadResource {
		name = in.Resource
	}
	target := Feature{Name: name, Server: in.Server, Hash: in.DefinitionHash, Template: in.Template}
	if a == ActionComplete && ref == RefResource {
		target.Template = name
	}
	if in.DefinitionHash == "" {
		found, err := resolve(ctx, a, ref, name)
		if errors.Is(err, ErrNoFeature) {
			return Call{}, fmt.Errorf("%w: %w", inputErrorf("the catalog offers no %q for %s; give its server and definition hash to explain it anyway", name, a), err)
		}
		if err != nil && found.Name == "" {
			return Call{}, err
		}
		if in.Server != "" && in.Server != found.Server {
			return Call{}, inputErrorf("the catalog's %q is of server %q, not %q", name, found.Server, in.Server)
		}
		target = found
	}
	call := Call{Principal: in.User, Groups: in.Groups, Arguments: args,
		Tool: target.Name, Server: target.Server, DefinitionHash: target.Hash}
	if a == ActionCallTool {
		return call, nil
	}
	if a == ActionComplete {
		argName, value, _ := strings.Cut(in.Argument, "=")
		call.Arguments, _ = jcs.Marshal(map[string]any{"argument": map[string]any{"name": argName, "value": value}})
	}
	call.Action, call.Ref, call.Template = a, ref, target.Template
	return call, nil
}

// Explanation is a decision of the policy with the request it decided,
// as the reviewers' API answers an explain.
type Explanation struct {
	Decision   policy.Outcome `json:"decision"`
	PolicyIDs  []string       `json:"policy_ids"`
	Reasons    []string       `json:"reasons"`
	Approvers  []string       `json:"approvers"`
	PolicyHash string         `json:"policy_hash"`
	Request    ExplainedCall  `json:"request"`
}

// ExplainedCall is the request as the policy evaluated it.
type ExplainedCall struct {
	User           string          `json:"user"`
	Tenant         string          `json:"tenant"`
	Groups         []string        `json:"groups"`
	Action         string          `json:"action"`
	Name           string          `json:"name"`
	Server         string          `json:"server"`
	Template       string          `json:"template,omitempty"`
	DefinitionHash string          `json:"definition_hash"`
	Reviewed       bool            `json:"reviewed"`
	Arguments      json.RawMessage `json:"arguments"`
}

// Explain decides c with p and lock, as PolicyDecider does, and shows the
// decision with the request it decided.
func Explain(p *policy.Policy, lock *policy.Lock, c Call) Explanation {
	req := PolicyRequest(c, lock)
	d := p.Decide(req)
	e := Explanation{Decision: d.Outcome, PolicyIDs: nonNil(d.PolicyIDs), Reasons: nonNil(d.Reasons),
		Approvers: nonNil(d.Approvers), PolicyHash: d.PolicyHash}
	r := ExplainedCall{User: req.Principal.ID, Tenant: req.Principal.Tenant, Groups: nonNil(req.Principal.Groups),
		Action: string(cmp.Or(req.Action, policy.ActionCallTool)), Arguments: req.Arguments}
	switch {
	case r.Action == string(policy.ActionCallTool):
		r.Name, r.Server, r.DefinitionHash, r.Reviewed = req.Tool.Name, req.Tool.Server, req.Tool.DefinitionHash, req.Tool.Reviewed
	case req.Prompt.Name != "":
		r.Name, r.Server, r.DefinitionHash = req.Prompt.Name, req.Prompt.Server, req.Prompt.DefinitionHash
	default:
		r.Name, r.Server, r.DefinitionHash, r.Template = req.Resource.URI, req.Resource.Server, req.Resource.DefinitionHash, req.Resource.Template
	}
	e.Request = r
	return e
}

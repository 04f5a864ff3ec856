package policy

import (
	"slices"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// DecideListing decides whether a tool is listed to a principal (MCP
// tools/list), where there are no arguments: Deny hides the tool, any
// other outcome lists it. A tool is hidden only when it is denied whatever
// the arguments of a call: by a forbid whose conditions do not read
// context.arguments, or because a statement that does not read them fails
// to evaluate (fail-closed, as Decide). Statements whose conditions read
// context.arguments are left out: a forbid on an argument's value
// (context.arguments.amount > 1000) cannot be judged without the value,
// and evaluating it on no arguments would fail and hide a tool that a
// call with other values may use. req.Arguments is ignored. The outcome
// other than Deny is that of the statements left in, and says nothing of
// a call: each call is decided by Decide with its arguments.
func (p *Policy) DecideListing(req Request) Decision {
	d := Decision{PolicyHash: p.hash}
	if _, _, _, ok := req.target(); req.Principal.ID == "" || !ok {
		return d.set(Deny, nil, "the request names no user, no known action or nothing to act on")
	}
	// No statement of the listing set reads the arguments: any record
	// would do.
	return p.decide(p.listing, req, cedar.NewRecord(nil))
}

// readsArguments reports whether a condition of cp may read
// context.arguments: an access or has-test of "arguments" on context, or
// context used in any other way than reading another of its attributes
// (compared as a whole, say). Scopes cannot read the context.
func readsArguments(cp *cedar.Policy) bool {
	reads := false
	for _, c := range (*ast.Policy)(cp.AST()).Conditions {
		ast.Inspect(ast.NewNode(c.Body), func(n ast.IsNode) bool {
			switch n := n.(type) {
			case ast.NodeTypeAccess:
				if isContext(n.Arg) {
					reads = reads || n.Value == "arguments"
					return false
				}
			case ast.NodeTypeHas:
				if isContext(n.Arg) {
					reads = reads || n.Value == "arguments"
					return false
				}
			case ast.NodeTypeVariable:
				reads = reads || n.Name == "context"
			}
			return !reads
		})
	}
	return reads
}

// namesAction reports whether the rule's action scope names a: action ==
// a, action in a (Usher's actions have no groups, so that is the same), or
// action in [..., a, ...].
func (r *rule) namesAction(a Action) bool {
	uid := cedar.NewEntityUID(typeAction, cedar.String(a))
	switch s := (*ast.Policy)(r.cedar.AST()).Action.(type) {
	case ast.ScopeTypeEq:
		return s.Entity == uid
	case ast.ScopeTypeIn:
		return s.Entity == uid
	case ast.ScopeTypeInSet:
		for _, e := range s.Entities {
			if e == uid {
				return true
			}
		}
	}
	return false
}

// onlyActions reports whether the rule's action scope names some of
// actions and nothing else.
func (r *rule) onlyActions(actions ...Action) bool {
	var named []cedar.EntityUID
	switch s := (*ast.Policy)(r.cedar.AST()).Action.(type) {
	case ast.ScopeTypeEq:
		named = []cedar.EntityUID{s.Entity}
	case ast.ScopeTypeIn:
		named = []cedar.EntityUID{s.Entity}
	case ast.ScopeTypeInSet:
		named = s.Entities
	}
	for _, uid := range named {
		if uid.Type != typeAction || !slices.Contains(actions, Action(uid.ID)) {
			return false
		}
	}
	return len(named) > 0
}

// isContext reports whether n is the variable context.
func isContext(n ast.IsNode) bool {
	v, ok := n.(ast.NodeTypeVariable)
	return ok && v.Name == "context"
}

package policy

import (
	"fmt"
	"slices"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// FindingKind names what Lint found.
type FindingKind string

// The kinds of Finding.
const (
	// WildcardAllow is an allow permit whose scope does not name one tool:
	// it can match tools that nobody has looked at, including tools added
	// to an upstream later.
	WildcardAllow FindingKind = "wildcard-allow"
	// UnreviewedAllow is an allow permit naming a tool the tool lock does
	// not list, so the permit cannot take effect until the tool is locked.
	UnreviewedAllow FindingKind = "unreviewed-allow"
)

// Finding is one problem Lint found in a valid policy.
type Finding struct {
	Kind     FindingKind
	PolicyID string
	Position string // file:line:column
	Message  string
}

// String renders the finding as `usher policy check` prints it.
func (f Finding) String() string {
	return fmt.Sprintf("%s: %s (policy %q): %s", f.Position, f.Kind, f.PolicyID, f.Message)
}

// Lint flags allow permits that may run tools nobody reviewed. An allow
// permit must name exactly one tool, prompt or resource in its scope
// (resource == Usher::Tool::"name", or resource in that entity, which is
// the same since they have no parents), or, for a permit only of
// read_resource or complete, one resource template in a when condition
// that is a conjunction with resource.template == "..." among its terms
// (see pinsTemplate), which stands for the URIs it matches;
// anything else — including a condition on resource.name — is a wildcard.
// With a lock, each named tool must be in it. Problems that make a policy
// invalid (a missing or duplicate @id, an unknown @outcome) are Parse
// errors, not findings.
func (p *Policy) Lint(lock *Lock) []Finding {
	var out []Finding
	for _, r := range p.rules {
		if r.outcome != Allow {
			continue
		}
		typ, name, named := scopeEntity((*ast.Policy)(r.cedar.AST()).Resource)
		if !named && r.onlyActions(ActionReadResource, ActionComplete) && pinsTemplate(r.cedar) {
			continue
		}
		switch {
		case !named:
			out = append(out, Finding{Kind: WildcardAllow, PolicyID: r.id, Position: r.position,
				Message: `an allow permit should name one tool, prompt or resource: resource == Usher::Tool::"name" (or Usher::Prompt, Usher::Resource)`})
		case typ != typeTool:
			// The tool lock holds tools only.
		case lock != nil && lock.Tools[name] == "":
			out = append(out, Finding{Kind: UnreviewedAllow, PolicyID: r.id, Position: r.position,
				Message: fmt.Sprintf("tool %+q is not in the tool lock, so it will be approved, not allowed, until it is reviewed", name)})
		}
	}
	return out
}

// scopeEntity returns the tool, prompt or resource a resource scope names,
// if it names exactly one.
func scopeEntity(scope ast.IsResourceScopeNode) (typ, name string, ok bool) {
	var uid cedar.EntityUID
	switch s := scope.(type) {
	case ast.ScopeTypeEq:
		uid = s.Entity
	case ast.ScopeTypeIn:
		uid = s.Entity
	default:
		return "", "", false
	}
	switch string(uid.Type) {
	case typeTool, typePrompt, typeResource:
		return string(uid.Type), string(uid.ID), true
	}
	return "", "", false
}

// pinsTemplate reports whether a when condition of cp is a conjunction
// (&&) one of whose terms is resource.template == "<string>". It is
// conservative: a pin under ||, !, if or in an unless clause pins nothing
// (`unless { resource.template == "…" }` allows every other resource), and
// further conditions can only narrow a statement, never widen it.
func pinsTemplate(cp *cedar.Policy) bool {
	for _, c := range (*ast.Policy)(cp.AST()).Conditions {
		if c.Condition == ast.ConditionWhen && slices.ContainsFunc(conjuncts(c.Body), isTemplatePin) {
			return true
		}
	}
	return false
}

// conjuncts returns the terms of n, a conjunction of one or more.
func conjuncts(n ast.IsNode) []ast.IsNode {
	if and, ok := n.(ast.NodeTypeAnd); ok {
		return append(conjuncts(and.Left), conjuncts(and.Right)...)
	}
	return []ast.IsNode{n}
}

// isTemplatePin reports whether n is resource.template == "<string>", or
// the same written the other way round.
func isTemplatePin(n ast.IsNode) bool {
	eq, ok := n.(ast.NodeTypeEquals)
	if !ok {
		return false
	}
	for _, side := range [][2]ast.IsNode{{eq.Left, eq.Right}, {eq.Right, eq.Left}} {
		acc, isAcc := side[0].(ast.NodeTypeAccess)
		v, isVar := acc.Arg.(ast.NodeTypeVariable)
		lit, isLit := side[1].(ast.NodeValue)
		_, isString := lit.Value.(cedar.String)
		if isAcc && isVar && v.Name == "resource" && acc.Value == "template" && isLit && isString {
			return true
		}
	}
	return false
}

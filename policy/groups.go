package policy

import (
	"fmt"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// GroupCase is a group name that differs only in case from another group
// name the policy uses. Group names match case-sensitively (as the IdP
// writes them into the token), so "Finance" and "finance" are two groups,
// and one of them is most likely a slip.
const GroupCase FindingKind = "group-case"

// lintGroupCase reports each group name of an @approvers annotation or of
// principal.groups.contains(…), containsAll or containsAny that differs
// only in case from one used before it in the file.
func (p *Policy) lintGroupCase() []Finding {
	first := map[string]string{} // folded name -> the name first used
	where := map[string]string{} // folded name -> its statement's position
	var out []Finding
	for _, r := range p.rules {
		for _, g := range append(append([]string{}, r.approvers...), conditionGroups(r.cedar)...) {
			key := strings.ToLower(g)
			prev, seen := first[key]
			switch {
			case !seen:
				first[key], where[key] = g, r.position
			case prev != g:
				out = append(out, Finding{Kind: GroupCase, PolicyID: r.id, Position: r.position,
					Message: fmt.Sprintf("group %q differs only in case from %q (%s): group names match case-sensitively, so these are two groups", g, prev, where[key])})
			}
		}
	}
	return dedupe(out)
}

// dedupe drops repeated findings.
func dedupe(fs []Finding) []Finding {
	seen := map[Finding]bool{}
	var out []Finding
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// conditionGroups returns the group names cp's conditions test
// principal.groups for: the string literals given to contains,
// containsAll and containsAny.
func conditionGroups(cp *cedar.Policy) []string {
	var out []string
	for _, c := range (*ast.Policy)(cp.AST()).Conditions {
		ast.Inspect(ast.NewNode(c.Body), func(n ast.IsNode) bool {
			var b ast.BinaryNode
			switch n := n.(type) {
			case ast.NodeTypeContains:
				b = n.BinaryNode
			case ast.NodeTypeContainsAll:
				b = n.BinaryNode
			case ast.NodeTypeContainsAny:
				b = n.BinaryNode
			default:
				return true
			}
			if !isPrincipalGroups(b.Left) {
				return true
			}
			args := []ast.IsNode{b.Right}
			if set, ok := b.Right.(ast.NodeTypeSet); ok {
				args = set.Elements
			}
			for _, a := range args {
				if v, ok := a.(ast.NodeValue); ok {
					if s, ok := v.Value.(cedar.String); ok {
						out = append(out, string(s))
					}
				}
			}
			return true
		})
	}
	return out
}

// isPrincipalGroups reports whether n is principal.groups.
func isPrincipalGroups(n ast.IsNode) bool {
	acc, ok := n.(ast.NodeTypeAccess)
	if !ok || acc.Value != "groups" {
		return false
	}
	v, ok := acc.Arg.(ast.NodeTypeVariable)
	return ok && v.Name == "principal"
}

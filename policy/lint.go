package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

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
	// UnknownTool is an allow permit naming a tool by a name no tool is
	// offered under: one outside the tool grammar (a look-alike, which is
	// never allowed), or one near a locked name (a typo).
	UnknownTool FindingKind = "unknown-tool"
	// ShadowedAllow is an allow permit that a forbid without conditions
	// overrides for everyone: it never takes effect.
	ShadowedAllow FindingKind = "shadowed-allow"
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
		var shadow *rule
		if named {
			shadow = p.shadow(r, typ, name)
		}
		switch {
		case !named:
			out = append(out, Finding{Kind: WildcardAllow, PolicyID: r.id, Position: r.position,
				Message: `an allow permit should name one tool, prompt or resource: resource == Usher::Tool::"name" (or Usher::Prompt, Usher::Resource)`})
		case shadow != nil:
			out = append(out, Finding{Kind: ShadowedAllow, PolicyID: r.id, Position: r.position,
				Message: fmt.Sprintf("forbid %q (%s) denies %s::%+q to everyone, unconditionally, so this allow never takes effect", shadow.id, shadow.position, typ, name)})
		case typ != typeTool:
			// The tool lock holds tools only.
		default:
			if f, ok := lintToolName(r, name, lock); ok {
				out = append(out, f)
			}
		}
	}
	return append(out, p.lintGroupCase()...)
}

// lintToolName checks the tool an allow permit names against the tool
// grammar and the lock: a look-alike name is never allowed unattended, a
// name near a locked one is most likely a typo, and any other name the
// lock lacks waits for a review.
func lintToolName(r *rule, name string, lock *Lock) (Finding, bool) {
	var locked []string
	if lock != nil {
		if lock.Tools[name] != "" {
			return Finding{}, false
		}
		locked = slices.Sorted(maps.Keys(lock.Tools))
	}
	near := nearName(name, locked)
	f := Finding{Kind: UnknownTool, PolicyID: r.id, Position: r.position}
	switch {
	case !plainName.MatchString(name):
		f.Message = fmt.Sprintf("tool name %+q is not plain ASCII (A-Z a-z 0-9 _ - ., at most 128), so it is never allowed unattended, whatever the lock says; a name that poses as another tool is no tool Usher offers", name)
	case near != "":
		f.Message = fmt.Sprintf("no tool %q is in the tool lock, but %q is: a misspelt name never matches the tool it means, and no locking makes it", name, near)
	case lock == nil:
		return Finding{}, false
	default:
		f.Kind = UnreviewedAllow
		f.Message = fmt.Sprintf("tool %+q is not in the tool lock: if a tool of that name is offered, it will be approved, not allowed, until `usher tools lock` reviews it; if none is, check the name", name)
	}
	if near != "" && f.Kind == UnknownTool && !strings.Contains(f.Message, near) {
		f.Message += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return f, true
}

// nearName returns the one of names that name most likely means: equal
// once look-alike letters, invisible characters and case are folded, or
// at most two edits away.
func nearName(name string, names []string) string {
	folded := foldLookalikes(name)
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(folded, foldLookalikes(n))
		if d < bestD && n != name {
			best, bestD = n, d
		}
	}
	return best
}

// lookalikes maps letters that look like ASCII ones (Cyrillic, Greek) to
// those.
var lookalikes = strings.NewReplacer(
	"а", "a", "е", "e", "о", "o", "р", "p", "с", "c", "у", "y", "х", "x", "і", "i", "ј", "j", "ѕ", "s", "һ", "h", "ԁ", "d",
	"ο", "o", "α", "a", "ε", "e", "ι", "i", "κ", "k", "ν", "v", "ρ", "p", "τ", "t", "υ", "u", "χ", "x",
	"ı", "i", "ſ", "s", "ℓ", "l",
)

// foldLookalikes is name with look-alike letters mapped to ASCII,
// invisible characters dropped and letters lowered.
func foldLookalikes(name string) string {
	name = strings.Map(func(c rune) rune {
		if invisible(c) {
			return -1
		}
		return unicode.ToLower(c)
	}, name)
	return lookalikes.Replace(name)
}

// shadow returns the forbid that denies, to everyone and without a
// condition, every request the allow permit r of the entity typ::name
// would allow; nil when there is none.
func (p *Policy) shadow(r *rule, typ, name string) *rule {
	actions := actionsOf(r, typ)
	for _, f := range p.rules {
		a := (*ast.Policy)(f.cedar.AST())
		if !f.forbid || len(a.Conditions) > 0 {
			continue
		}
		if _, all := a.Principal.(ast.ScopeTypeAll); !all {
			continue
		}
		_, allActions := a.Action.(ast.ScopeTypeAll)
		everyAction := allActions || len(actions) > 0 && !slices.ContainsFunc(actions, func(x Action) bool { return !f.namesAction(x) })
		if everyAction && coversEntity(a.Resource, typ, name) {
			return f
		}
	}
	return nil
}

// actionsOf lists the actions an allow of an entity of typ applies to.
func actionsOf(r *rule, typ string) []Action {
	var out []Action
	for _, a := range []Action{ActionCallTool, ActionReadResource, ActionGetPrompt, ActionComplete} {
		applies := a == ActionCallTool && typ == typeTool || a == ActionReadResource && typ == typeResource ||
			a == ActionGetPrompt && typ == typePrompt || a == ActionComplete && typ != typeTool
		if _, all := (*ast.Policy)(r.cedar.AST()).Action.(ast.ScopeTypeAll); applies && (all || r.namesAction(a)) {
			out = append(out, a)
		}
	}
	return out
}

// coversEntity reports whether a resource scope takes in typ::name.
func coversEntity(scope ast.IsResourceScopeNode, typ, name string) bool {
	switch s := scope.(type) {
	case ast.ScopeTypeAll:
		return true
	case ast.ScopeTypeIs:
		return string(s.Type) == typ
	}
	t, n, ok := scopeEntity(scope)
	return ok && t == typ && n == name
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

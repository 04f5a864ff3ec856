package policy

import (
	"slices"
	"strings"
)

// Statement is one statement of a policy, as a reviewer reads it: its
// annotations as Usher interprets them and its text as written.
type Statement struct {
	// ID is the statement's @id.
	ID string `json:"id"`
	// Effect is "permit" or "forbid".
	Effect string `json:"effect"`
	// Outcome is what the statement decides when it matches: deny for a
	// forbid, allow or approve for a permit.
	Outcome Outcome `json:"outcome"`
	// Reason is the @reason; empty when the statement has none.
	Reason string `json:"reason"`
	// Approvers are the groups of @approvers; empty means the requesting
	// user decides (and always for an allow or a forbid).
	Approvers []string `json:"approvers"`
	// Conditions are the when and unless clauses, each as written in the
	// file, comments included.
	Conditions []string `json:"conditions"`
	// Text is the whole statement as written, from its first annotation
	// to its semicolon.
	Text string `json:"text"`
	// Position is where it starts: file:line:column.
	Position string `json:"position"`
}

// Statements lists the policy's statements in file order.
func (p *Policy) Statements() []Statement {
	out := make([]Statement, 0, len(p.rules))
	for _, r := range p.rules {
		effect := "permit"
		if r.forbid {
			effect = "forbid"
		}
		text, conditions := statementSource(p.src, r.cedar.Position().Offset)
		out = append(out, Statement{
			ID: r.id, Effect: effect, Outcome: r.outcome, Reason: r.reason,
			Approvers: append([]string{}, r.approvers...), Conditions: conditions,
			Text: text, Position: r.position,
		})
	}
	return out
}

// statementSource cuts the statement that starts at off out of src, a
// policy that parsed: its text up to its semicolon, and each of its
// conditions. It reads just enough Cedar to find them: string literals,
// comments, annotations, the scope's parentheses and the conditions'
// braces.
func statementSource(src []byte, off int) (text string, conditions []string) {
	if off < 0 || off >= len(src) {
		return "", []string{}
	}
	conditions = []string{}
	parens, braces := 0, 0
	scoped := false    // the scope's parentheses have closed
	annotated := false // inside an annotation, until its value closes
	start := -1        // where the current condition starts
	for i := off; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '"':
			i = skipString(src, i)
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '@' && parens == 0 && !scoped:
			annotated = true
		case c == '(':
			parens++
		case c == ')':
			parens--
			if parens == 0 && annotated {
				annotated = false
			} else if parens == 0 && !scoped {
				scoped = true
			}
		case scoped && c == '{':
			if braces == 0 && start < 0 {
				start = i
			}
			braces++
		case scoped && c == '}':
			braces--
			if braces == 0 {
				conditions = append(conditions, strings.TrimSpace(conditionKeyword(src, start)+string(src[start:i+1])))
				start = -1
			}
		case c == ';' && parens == 0 && braces == 0:
			return string(src[off : i+1]), conditions
		case annotated && parens == 0 && (c == '\n' || c == ' ') && i > off:
			// An annotation without a value ends at the blank after its name.
			annotated = false
		}
	}
	return string(src[off:]), conditions
}

// skipString returns the index of the quote that closes the string
// literal opening at src[i].
func skipString(src []byte, i int) int {
	for i++; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return i
}

// conditionKeyword is the keyword (when or unless) before the brace at
// src[brace], with what lies between them.
func conditionKeyword(src []byte, brace int) string {
	before := string(src[:brace])
	i := max(strings.LastIndex(before, "when"), strings.LastIndex(before, "unless"))
	if i < 0 {
		return ""
	}
	return before[i:]
}

// Source returns the policy file's bytes, as parsed: Hash is their
// SHA-256.
func (p *Policy) Source() []byte { return slices.Clone(p.src) }

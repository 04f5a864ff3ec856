package policy

import (
	"bytes"
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// schemaSource is Usher's data model as a Cedar schema: its entities,
// their attributes, the actions and what each applies to.
//
//go:embed schema.cedarschema
var schemaSource []byte

// modelValidator is Cedar's validator for schemaSource, in permissive
// mode: strict mode also refuses types that do not mix, which evaluate
// without error (see typesIncompatible).
var modelValidator = sync.OnceValue(func() *validate.Validator {
	var s schema.Schema
	s.SetFilename("schema.cedarschema")
	if err := s.UnmarshalCedar(schemaSource); err != nil {
		panic("policy: the embedded schema does not parse: " + err.Error())
	}
	r, err := s.Resolve()
	if err != nil {
		panic("policy: the embedded schema does not resolve: " + err.Error())
	}
	return validate.New(r, validate.WithPermissive())
})

// The model's names, for the hints of validation errors.
var (
	modelTypes   = []string{typeUser, typeTool, typeResource, typePrompt}
	modelActions = []string{string(ActionCallTool), string(ActionReadResource), string(ActionGetPrompt), string(ActionComplete)}
	modelAttrs   = map[string][]string{
		typeUser:     {"tenant", "groups", "roles"},
		typeTool:     {"name", "server", "definition_hash", "reviewed"},
		typePrompt:   {"name", "server", "definition_hash", "reviewed"},
		typeResource: {"name", "uri", "template", "server", "definition_hash", "reviewed"},
		"context":    {"arguments", "client_id"},
	}
)

// The validator's messages this package rewords with a hint.
var (
	argumentsUnknown = regexp.MustCompile("^attribute `arguments` in context for .* not found$")
	// Cedar's validator also refuses values of types that do not mix (a
	// set of a Long and a String, == between them); they evaluate without
	// error (== is false), so they are left alone.
	typesIncompatible = regexp.MustCompile("^the types .* are not compatible$")
	attrOnEntity      = regexp.MustCompile("^attribute `([^`]+)` on entity types? (.+) not found$")
	attrInContext     = regexp.MustCompile("^attribute `([^`]+)` in context for .* not found$")
	unknownAction     = regexp.MustCompile("^unrecognized action `(.+)`$")
	unknownType       = regexp.MustCompile("^unrecognized entity type `(.+)`$")
	badLiteral        = regexp.MustCompile("^error during extension function argument validation: failed to parse as (.+): `(.+)`$")
	backquoted        = regexp.MustCompile("`([^`]+)`")
)

// noApplicableAction is the validator's message for a scope no action of
// the model applies to.
const noApplicableAction = "unable to find an applicable action given the policy scope constraints"

// modelProblem is one way a statement does not fit the model: what is
// wrong, how to fix it, and the text to point at in the statement (empty:
// the statement's start).
type modelProblem struct {
	message string
	token   *regexp.Regexp
}

// checkModel validates one statement against Usher's data model with
// Cedar's validator and returns its problems, each with a hint. A
// statement with any of them errors whenever it is evaluated (a missing
// attribute, a malformed decimal), or never matches (an unknown action or
// entity type, a scope no action applies to), which Parse refuses: an
// error denies every request the statement applies to, and a statement
// that never matches silently does nothing. Expressions on
// context.arguments are left to each call: their shape is the tool's.
func checkModel(cp *cedar.Policy) []modelProblem {
	err := modelValidator().Policy("", (*ast.Policy)(cp.AST()))
	if err == nil {
		return nil
	}
	var out []modelProblem
	missing := map[string][]string{} // attribute -> the entity types without it
	var order []string
	seen := map[string]bool{}
	noAction, unknown := false, false
	for _, e := range flatten(err) {
		msg := e.Error()
		if argumentsUnknown.MatchString(msg) || typesIncompatible.MatchString(msg) || seen[msg] {
			continue
		}
		seen[msg] = true
		if m := attrOnEntity.FindStringSubmatch(msg); m != nil {
			if _, ok := missing[m[1]]; !ok {
				order = append(order, m[1])
			}
			for _, t := range backquoted.FindAllStringSubmatch(m[2], -1) {
				missing[m[1]] = append(missing[m[1]], t[1])
			}
			continue
		}
		if msg == noApplicableAction {
			noAction = true
			continue
		}
		unknown = unknown || unknownAction.MatchString(msg) || unknownType.MatchString(msg)
		p := reword(msg)
		if !slices.ContainsFunc(out, func(q modelProblem) bool { return q.message == p.message }) {
			out = append(out, p)
		}
	}
	for _, attr := range order {
		out = append(out, missingAttribute(attr, missing[attr]))
	}
	if noAction && !unknown {
		// An unknown action or type explains it already.
		out = append(out, modelProblem{message: "no action applies to this scope, so the statement never matches: call_tool acts on a Usher::Tool, " +
			"read_resource on a Usher::Resource, get_prompt on a Usher::Prompt, complete on a Usher::Prompt or a Usher::Resource, " +
			"and the principal is a Usher::User"})
	}
	return out
}

// flatten unwraps joined errors.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// missingAttribute explains an attribute that entity types of the model
// lack.
func missingAttribute(attr string, types []string) modelProblem {
	slices.Sort(types)
	types = slices.Compact(types)
	verb := "has"
	if len(types) > 1 {
		verb = "have"
	}
	var known []string
	for _, t := range types {
		known = append(known, fmt.Sprintf("%s has %s", t, strings.Join(modelAttrs[t], ", ")))
	}
	return modelProblem{
		message: fmt.Sprintf("%s %s no attribute %q%s: reading it is an error, and an error denies every request the statement applies to (%s)",
			joinAnd(types), verb, attr, didYouMean(attr, attributesOf(types)), strings.Join(known, "; ")),
		token: attributeToken(attr),
	}
}

// reword gives a validator's message a hint, when it has one.
func reword(msg string) modelProblem {
	if m := attrInContext.FindStringSubmatch(msg); m != nil {
		return modelProblem{
			message: fmt.Sprintf("context has no attribute %q%s: reading it is an error, and an error denies every request the statement applies to (context has arguments, client_id)",
				m[1], didYouMean(m[1], modelAttrs["context"])),
			token: attributeToken(m[1]),
		}
	}
	if m := unknownAction.FindStringSubmatch(msg); m != nil {
		name := m[1]
		if i := strings.Index(name, `::"`); i >= 0 {
			name = strings.TrimSuffix(name[i+3:], `"`)
		}
		return modelProblem{
			message: fmt.Sprintf("unknown action %s%s: the statement never matches (the actions are Usher::Action::\"call_tool\", \"read_resource\", \"get_prompt\" and \"complete\")",
				m[1], didYouMean(name, modelActions)),
			token: regexp.MustCompile(`"` + regexp.QuoteMeta(name) + `"`),
		}
	}
	if m := unknownType.FindStringSubmatch(msg); m != nil {
		return modelProblem{
			message: fmt.Sprintf("unknown entity type %s%s: the statement never matches it (the types are %s)",
				m[1], didYouMean(m[1], modelTypes), strings.Join(append(slices.Clone(modelTypes), typeAction), ", ")),
			token: regexp.MustCompile(regexp.QuoteMeta(m[1]) + `\b`),
		}
	}
	if m := badLiteral.FindStringSubmatch(msg); m != nil {
		return modelProblem{
			message: fmt.Sprintf("%s does not parse as %s: evaluating it is an error, and an error denies every request the statement applies to", m[2], m[1]),
			token:   regexp.MustCompile(regexp.QuoteMeta(m[2])),
		}
	}
	return modelProblem{message: msg}
}

// joinAnd joins names as "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// attributesOf lists the attributes of types.
func attributesOf(types []string) []string {
	var out []string
	for _, t := range types {
		out = append(out, modelAttrs[t]...)
	}
	return out
}

// attributeToken finds where attr is read: .attr, ["attr"] or has attr.
func attributeToken(attr string) *regexp.Regexp {
	q := regexp.QuoteMeta(attr)
	return regexp.MustCompile(`(?:\.\s*|\bhas\s+|\[\s*")(` + q + `)\b`)
}

// didYouMean names the one of names nearest to s (at most two edits
// away, ignoring case), as " (did you mean X?)", or returns "".
func didYouMean(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), strings.ToLower(n)); d < bestD && n != s {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// locate returns the file:line:column of the first match of token in the
// statement of src that starts at off, outside comments; the statement's
// own position when there is none.
func locate(name string, src []byte, off int, token *regexp.Regexp, fallback string) string {
	if token == nil {
		return fallback
	}
	text, _ := statementSource(src, off)
	code := []byte(text)
	for _, c := range commentSpans(code) {
		for i := c[0]; i < c[1]; i++ {
			code[i] = ' '
		}
	}
	loc := token.FindSubmatchIndex(code)
	if loc == nil {
		return fallback
	}
	at := off + loc[0]
	if len(loc) >= 4 && loc[2] >= 0 {
		at = off + loc[2] // the name itself, after any "." or "has"
	}
	return fmt.Sprintf("%s:%d:%d", name, bytes.Count(src[:at], []byte("\n"))+1, columnAt(src, at))
}

// columnAt is the 1-based column of src[at], in characters, as Cedar
// counts them.
func columnAt(src []byte, at int) int {
	start := bytes.LastIndexByte(src[:at], '\n') + 1
	return utf8.RuneCount(src[start:at]) + 1
}

// commentSpans returns the [start, end) of each // comment in code,
// skipping string literals.
func commentSpans(code []byte) [][2]int {
	var out [][2]int
	for i := 0; i < len(code); i++ {
		switch {
		case code[i] == '"':
			i = skipString(code, i)
		case code[i] == '/' && i+1 < len(code) && code[i+1] == '/':
			end := bytes.IndexByte(code[i:], '\n')
			if end < 0 {
				end = len(code) - i
			}
			out = append(out, [2]int{i, i + end})
			i += end
		}
	}
	return out
}

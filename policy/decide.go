package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
)

// Outcome is what a decision lets happen to a tool call. The zero value is
// Deny.
type Outcome uint8

// The outcomes, from most to least restrictive.
const (
	// Deny refuses the call.
	Deny Outcome = iota
	// Approve holds the call until a human approves it.
	Approve
	// Allow runs the call unattended.
	Allow
)

// String returns "deny", "approve" or "allow".
func (o Outcome) String() string {
	switch o {
	case Allow:
		return "allow"
	case Approve:
		return "approve"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MarshalText encodes the outcome as its String.
func (o Outcome) MarshalText() ([]byte, error) {
	switch o {
	case Allow, Approve, Deny:
		return []byte(o.String()), nil
	}
	return nil, fmt.Errorf("policy: invalid outcome %d", uint8(o))
}

// UnmarshalText accepts "allow", "approve" or "deny".
func (o *Outcome) UnmarshalText(text []byte) error {
	switch string(text) {
	case "allow":
		*o = Allow
	case "approve":
		*o = Approve
	case "deny":
		*o = Deny
	default:
		return fmt.Errorf("policy: unknown outcome %q (want allow, approve or deny)", text)
	}
	return nil
}

// BuiltinServer is the server name of Usher's built-in tools.
const BuiltinServer = "builtin"

// Principal is the user a call is made for, as the broker token names them.
type Principal struct {
	ID     string   // stable user id; required
	Tenant string   // the user's tenant
	Groups []string // group ids or names from the token
	Roles  []string // app roles from the token
}

// Tool is the tool being called, as the tool catalog knows it. Its
// annotations are deliberately absent: they are hints from the tool's
// server and never an input to a decision.
type Tool struct {
	Name           string // full name as exposed, with any upstream prefix; required
	Server         string // BuiltinServer or the upstream's name
	DefinitionHash string // DefinitionHash of the tool's current definition
	Reviewed       bool   // DefinitionHash equals the tool lock's entry (see Lock.Reviewed)
}

// Action is what a Request asks to do, the Cedar action
// Usher::Action::"<action>". The zero value is ActionCallTool.
type Action string

// The actions.
const (
	// ActionCallTool calls Request.Tool.
	ActionCallTool Action = "call_tool"
	// ActionReadResource reads Request.Resource.
	ActionReadResource Action = "read_resource"
	// ActionGetPrompt gets Request.Prompt with Request.Arguments.
	ActionGetPrompt Action = "get_prompt"
	// ActionComplete completes an argument of Request.Prompt or, when that
	// is unnamed, of the resource template Request.Resource.
	ActionComplete Action = "complete"
)

// Resource is an upstream resource, or resource template, as Usher exposes
// it (the Cedar resource Usher::Resource::"<uri>").
type Resource struct {
	URI    string // as exposed, with the upstream's prefix; required
	Server string // the upstream's name
	// Template is the exposed URI template the URI was matched with; empty
	// for a listed resource.
	Template       string
	DefinitionHash string // the hash of the listed resource or template
}

// Prompt is an upstream prompt as Usher exposes it (the Cedar resource
// Usher::Prompt::"<name>").
type Prompt struct {
	Name           string // as exposed, with the upstream's prefix; required
	Server         string // the upstream's name
	DefinitionHash string
}

// Request is one tool call, resource read, prompt get or completion to
// decide.
type Request struct {
	Principal Principal
	// Action is what is asked; empty means ActionCallTool.
	Action Action
	// Tool is the tool of ActionCallTool.
	Tool Tool
	// Resource is the resource of ActionReadResource, and the template of
	// ActionComplete when Prompt is unnamed.
	Resource Resource
	// Prompt is the prompt of ActionGetPrompt and ActionComplete.
	Prompt    Prompt
	Arguments json.RawMessage // a JSON object; empty or null means {}
	ClientID  string          // the OAuth client the call came through
}

// action returns the request's action, ActionCallTool for none.
func (r Request) action() Action {
	if r.Action == "" {
		return ActionCallTool
	}
	return r.Action
}

// target returns the Cedar type and id of what the request acts on, and
// its attributes; ok is false for an unknown action or an unnamed target.
func (r Request) target() (typ, id string, attrs cedar.RecordMap, ok bool) {
	switch a := r.action(); {
	case a == ActionCallTool:
		return typeTool, r.Tool.Name, cedar.RecordMap{
			"name":            cedar.String(r.Tool.Name),
			"server":          cedar.String(r.Tool.Server),
			"definition_hash": cedar.String(r.Tool.DefinitionHash),
			"reviewed":        cedar.Boolean(r.Tool.Reviewed),
		}, r.Tool.Name != ""
	case a == ActionGetPrompt || a == ActionComplete && r.Prompt.Name != "":
		return typePrompt, r.Prompt.Name, cedar.RecordMap{
			"name":            cedar.String(r.Prompt.Name),
			"server":          cedar.String(r.Prompt.Server),
			"definition_hash": cedar.String(r.Prompt.DefinitionHash),
			"reviewed":        cedar.False,
		}, r.Prompt.Name != ""
	case a == ActionReadResource || a == ActionComplete:
		return typeResource, r.Resource.URI, cedar.RecordMap{
			"name":            cedar.String(r.Resource.URI),
			"uri":             cedar.String(r.Resource.URI),
			"template":        cedar.String(r.Resource.Template),
			"server":          cedar.String(r.Resource.Server),
			"definition_hash": cedar.String(r.Resource.DefinitionHash),
			"reviewed":        cedar.False,
		}, r.Resource.URI != ""
	}
	return "", "", nil, false
}

// Decision is the outcome of a Request and why. Its zero value denies.
type Decision struct {
	Outcome Outcome
	// PolicyIDs are the ids of the policies that determined the outcome,
	// sorted: the matching forbids (and any that failed to evaluate) for
	// Deny, the matching approve permits (or allow permits held back) for
	// Approve, the matching allow permits for Allow. Empty when no policy
	// matched.
	PolicyIDs []string
	// Reasons explain the outcome, one sentence each.
	Reasons []string
	// PolicyHash is the hex SHA-256 of the policy file that decided.
	PolicyHash string
	// Approvers are the groups whose members may decide an Approve; empty
	// means the requesting user decides.
	Approvers []string
}

// Cedar names of the model (see the package documentation).
const (
	typeUser     = "Usher::User"
	typeTool     = "Usher::Tool"
	typePrompt   = "Usher::Prompt"
	typeResource = "Usher::Resource"
	typeAction   = "Usher::Action"
)

// plainName is the tool-name grammar MCP recommends. A name outside it can
// pose as another tool (a zero-width space, a Cyrillic letter), so it is
// never allowed unattended whatever a policy says.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// plainURI is what a resource URI allowed unattended looks like: printable
// ASCII without spaces, at most 2048 bytes, so that it cannot pose as
// another in a review or a log.
var plainURI = regexp.MustCompile(`^[\x21-\x7e]+$`)

// maxPlainURI is the longest resource URI allowed unattended.
const maxPlainURI = 2048

// Decide evaluates the policy for req. It never panics and fails closed:
// anything it cannot evaluate is denied, and only a reviewed, plainly named
// tool matched by an allow permit and nothing stricter is allowed; a
// resource, prompt or completion is allowed only by an allow permit whose
// action scope names its action.
func (p *Policy) Decide(req Request) Decision {
	d := Decision{PolicyHash: p.hash}
	if _, _, _, ok := req.target(); req.Principal.ID == "" || !ok {
		return d.set(Deny, nil, "the request names no user, no known action or nothing to act on")
	}
	args, err := cedarArguments(req.Arguments)
	if err != nil {
		return d.set(Deny, nil, "the arguments cannot be evaluated: "+err.Error())
	}
	return p.decide(p.set, req, args)
}

// decide evaluates the statements of set for req, with args as
// context.arguments.
func (p *Policy) decide(set *cedar.PolicySet, req Request, args cedar.Record) Decision {
	d := Decision{PolicyHash: p.hash}
	m, ok := p.match(set, req, args)
	switch {
	case !ok:
		return d.set(Deny, nil, "the policy could not be evaluated")
	case len(m.failed) > 0:
		return d.set(Deny, ruleIDs(append(failedRules(m.failed), m.forbids...)), failureReasons(m.failed, m.forbids)...)
	case len(m.forbids) > 0:
		return d.set(Deny, ruleIDs(m.forbids), matchReasons(m.forbids)...)
	case len(m.approves) > 0:
		d.Approvers = approvers(m.approves)
		return d.set(Approve, ruleIDs(m.approves), matchReasons(m.approves)...)
	case len(m.allows) == 0:
		return d.set(Approve, nil, "no policy matched, so a human decides")
	case req.action() != ActionCallTool:
		return p.decideOther(d, req, m.allows)
	case !req.Tool.Reviewed:
		return d.set(Approve, ruleIDs(m.allows), append(matchReasons(m.allows),
			fmt.Sprintf("but tool %+q is unreviewed (its definition hash is not the one in the tool lock), so a human decides", req.Tool.Name))...)
	case !plainName.MatchString(req.Tool.Name):
		return d.set(Approve, ruleIDs(m.allows), append(matchReasons(m.allows),
			fmt.Sprintf("but tool name %+q is not plain ASCII (A-Z a-z 0-9 _ - ., at most 128), so a human decides", req.Tool.Name))...)
	default:
		return d.set(Allow, ruleIDs(m.allows), matchReasons(m.allows)...)
	}
}

// decideOther decides a request other than a tool call that allow permits
// matched, and nothing stricter: it is allowed only when one of them names
// its action in its scope (a permit for every action was written for tools,
// whose tool lock holds back what is unreviewed; resources and prompts have
// no lock), and when what it acts on is plainly named.
func (p *Policy) decideOther(d Decision, req Request, allows []*rule) Decision {
	a := req.action()
	_, name, _, _ := req.target()
	var named []*rule
	for _, r := range allows {
		if r.namesAction(a) {
			named = append(named, r)
		}
	}
	plain := plainName.MatchString(name)
	if a == ActionReadResource || a == ActionComplete && req.Prompt.Name == "" {
		plain = len(name) <= maxPlainURI && plainURI.MatchString(name)
	}
	switch {
	case len(named) == 0:
		return d.set(Approve, ruleIDs(allows), append(matchReasons(allows),
			fmt.Sprintf("but none of them names the action %s in its scope (action == Usher::Action::%q), so a human decides", a, a))...)
	case !plain:
		return d.set(Approve, ruleIDs(named), append(matchReasons(named),
			fmt.Sprintf("but %+q is not plainly named (printable ASCII), so a human decides", name))...)
	}
	return d.set(Allow, ruleIDs(named), matchReasons(named)...)
}

func (d Decision) set(o Outcome, policyIDs []string, reasons ...string) Decision {
	d.Outcome, d.PolicyIDs, d.Reasons = o, policyIDs, reasons
	return d
}

// matches are the policies that applied to one request, by kind.
type matches struct {
	failed                    []failure
	forbids, approves, allows []*rule
}

type failure struct {
	rule    *rule
	message string
}

// match runs Cedar on the statements of set. ok is false if Cedar panicked, which must deny rather
// than take the process down.
func (p *Policy) match(set *cedar.PolicySet, req Request, args cedar.Record) (m matches, ok bool) {
	defer func() {
		if recover() != nil {
			m, ok = matches{}, false
		}
	}()
	typ, id, attrs, ok := req.target()
	if !ok {
		return matches{}, false
	}
	user := cedar.NewEntityUID(typeUser, cedar.String(req.Principal.ID))
	tool := cedar.NewEntityUID(cedar.EntityType(typ), cedar.String(id))
	action := cedar.NewEntityUID(typeAction, cedar.String(req.action()))
	entities := cedar.EntityMap{
		user: {UID: user, Attributes: cedar.NewRecord(cedar.RecordMap{
			"tenant": cedar.String(req.Principal.Tenant),
			"groups": stringSet(req.Principal.Groups),
			"roles":  stringSet(req.Principal.Roles),
		})},
		tool:   {UID: tool, Attributes: cedar.NewRecord(attrs)},
		action: {UID: action},
	}
	_, diag := cedar.Authorize(set, entities, cedar.Request{
		Principal: user,
		Action:    action,
		Resource:  tool,
		Context: cedar.NewRecord(cedar.RecordMap{
			"arguments": args,
			"client_id": cedar.String(req.ClientID),
		}),
	})
	for _, e := range diag.Errors {
		msg, _ := strings.CutPrefix(e.Message, fmt.Sprintf("while evaluating policy `%s`: ", e.PolicyID))
		m.failed = append(m.failed, failure{rule: p.byID[e.PolicyID], message: msg})
	}
	for _, r := range diag.Reasons {
		rl := p.byID[r.PolicyID]
		switch {
		case rl.forbid:
			m.forbids = append(m.forbids, rl)
		case rl.outcome == Approve:
			m.approves = append(m.approves, rl)
		default:
			m.allows = append(m.allows, rl)
		}
	}
	return m, true
}

func stringSet(ss []string) cedar.Set {
	vs := make([]cedar.Value, len(ss))
	for i, s := range ss {
		vs[i] = cedar.String(s)
	}
	return cedar.NewSet(vs...)
}

// ruleIDs returns the sorted, distinct ids of rules.
func ruleIDs(rules []*rule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.id)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func failedRules(failed []failure) []*rule {
	out := make([]*rule, 0, len(failed))
	for _, f := range failed {
		out = append(out, f.rule)
	}
	return out
}

func matchReasons(rules []*rule) []string {
	rules = slices.SortedFunc(slices.Values(rules), func(a, b *rule) int { return strings.Compare(a.id, b.id) })
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.matched)
	}
	return out
}

func failureReasons(failed []failure, forbids []*rule) []string {
	failed = slices.SortedFunc(slices.Values(failed), func(a, b failure) int { return strings.Compare(a.rule.id, b.rule.id) })
	var out []string
	for _, f := range failed {
		out = append(out, fmt.Sprintf("policy %q could not be evaluated (%s), so the call is denied", f.rule.id, f.message))
	}
	return append(out, matchReasons(forbids)...)
}

// describe is the reason a decision gives for a rule it matched; newRule
// keeps it in the rule, so that no decision builds it again.
func describe(r *rule) string {
	kind := "permit"
	if r.forbid {
		kind = "forbid"
	}
	s := fmt.Sprintf("%s %q matched (outcome %s)", kind, r.id, r.outcome)
	if r.reason != "" {
		s += ": " + r.reason
	}
	return s
}

// approvers returns who may decide an approval required by rules: the
// union of the groups the rules name. A rule that names none adds nothing,
// so a catch-all approve permit cannot hand back to the requesting user a
// decision a more specific permit reserved for a group.
func approvers(rules []*rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.approvers...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Explain renders a decision for a person, as `usher policy explain`
// prints it.
func Explain(req Request, d Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "decision:    %s\n", d.Outcome)
	user := fmt.Sprintf("%+q", req.Principal.ID)
	if req.Principal.Tenant != "" {
		user += fmt.Sprintf(", tenant %+q", req.Principal.Tenant)
	}
	if len(req.Principal.Groups) > 0 {
		user += ", groups " + strings.Join(req.Principal.Groups, ", ")
	}
	reviewed := "unreviewed"
	if req.Tool.Reviewed {
		reviewed = "reviewed"
	}
	fmt.Fprintf(&b, "user:        %s\n", user)
	switch typ, id, _, _ := req.target(); typ {
	case typeTool:
		fmt.Fprintf(&b, "tool:        %+q, server %+q, %s\n", req.Tool.Name, req.Tool.Server, reviewed)
		if req.Tool.DefinitionHash != "" {
			fmt.Fprintf(&b, "definition:  %s\n", req.Tool.DefinitionHash)
		}
	case typePrompt, typeResource:
		explainTarget(&b, req, typ, id)
	default:
		fmt.Fprintf(&b, "action:      %s\n", req.action())
		b.WriteString("target:      (none)\n")
	}
	b.WriteString("reasons:\n")
	for _, r := range d.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	fmt.Fprintf(&b, "policies:    %s\n", orNone(strings.Join(d.PolicyIDs, ", ")))
	if d.Outcome == Approve {
		who := "the requesting user"
		if len(d.Approvers) > 0 {
			who = "members of " + strings.Join(d.Approvers, ", ")
		}
		fmt.Fprintf(&b, "approvers:   %s\n", who)
	}
	fmt.Fprintf(&b, "policy hash: %s\n", d.PolicyHash)
	return b.String()
}

// explainTarget writes what a read, prompt get or completion acts on:
// the action, the Cedar entity with its server, the template a URI
// matched, the definition hash, and, for a completion, the argument
// being completed. Nothing of these is ever reviewed: the tool lock holds
// tools only.
func explainTarget(b *strings.Builder, req Request, typ, id string) {
	server, hash, template := req.Prompt.Server, req.Prompt.DefinitionHash, ""
	if typ == typeResource {
		server, hash, template = req.Resource.Server, req.Resource.DefinitionHash, req.Resource.Template
	}
	fmt.Fprintf(b, "action:      %s\n", req.action())
	fmt.Fprintf(b, "target:      %s::%+q, server %+q, never reviewed (the tool lock holds tools only)\n", typ, id, server)
	if template != "" {
		fmt.Fprintf(b, "template:    %+q\n", template)
	}
	if hash != "" {
		fmt.Fprintf(b, "definition:  %s\n", hash)
	}
	if req.action() != ActionComplete {
		return
	}
	var in struct {
		Argument struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"argument"`
	}
	if json.Unmarshal(req.Arguments, &in) == nil && in.Argument.Name != "" {
		of := "prompt argument"
		if typ == typeResource {
			of = "template variable"
		}
		fmt.Fprintf(b, "completes:   %s %+q, value %+q\n", of, in.Argument.Name, in.Argument.Value)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

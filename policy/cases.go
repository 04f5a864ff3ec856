package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Case is one policy test: a request and the outcome it must get.
type Case struct {
	Name    string
	Request Request
	Expect  Outcome
}

// caseFile is the YAML shape of a test-case file (see LoadCases).
type caseFile struct {
	Cases []caseEntry `yaml:"cases"`
}

type caseEntry struct {
	Name           string    `yaml:"name"`
	User           string    `yaml:"user"`
	Tenant         string    `yaml:"tenant"`
	Groups         []string  `yaml:"groups"`
	Roles          []string  `yaml:"roles"`
	ClientID       string    `yaml:"client_id"`
	Action         string    `yaml:"action"`
	Tool           string    `yaml:"tool"`
	Resource       string    `yaml:"resource"`
	Template       string    `yaml:"template"`
	Prompt         string    `yaml:"prompt"`
	Server         *string   `yaml:"server"`
	Reviewed       bool      `yaml:"reviewed"`
	DefinitionHash string    `yaml:"definition_hash"`
	Args           yaml.Node `yaml:"args"`
	Expect         string    `yaml:"expect"`
}

// LoadCases reads a YAML file of policy test cases:
//
//	cases:
//	  - name: alice lists her notes unattended
//	    user: alice              # required
//	    tenant: contoso
//	    groups: [staff]
//	    roles: []
//	    client_id: usher-assistant
//	    tool: notes_list         # required
//	    server: builtin          # default builtin
//	    reviewed: true           # default false: the tool is unreviewed
//	    definition_hash: sha256:…
//	    args: {"limit": 10}      # a JSON object, written as YAML or as a JSON string
//	    expect: allow            # required: allow, approve or deny
//	  - name: alice reads the guide
//	    user: alice
//	    action: read_resource    # default call_tool; or get_prompt, complete
//	    resource: docs__file:///guide.md   # for read_resource (and complete of a template)
//	    template: docs__file:///{path}     # the template it matched, if any
//	    server: docs
//	    expect: allow
//
// A case names a tool for call_tool, a resource for read_resource, a
// prompt for get_prompt, and a prompt or a resource (template) for
// complete. Unknown keys are errors, so a misspelt key cannot silently drop a check.
// Every problem found is reported in one combined error.
func LoadCases(path string) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy cases: %w", err)
	}
	cases, err := parseCases(data)
	if err != nil {
		return nil, fmt.Errorf("policy cases %s: %w", path, err)
	}
	return cases, nil
}

func parseCases(data []byte) ([]Case, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	if err := unknownKeys(&doc); err != nil {
		return nil, err
	}
	var f caseFile
	if err := doc.Decode(&f); err != nil {
		return nil, err
	}
	if len(f.Cases) == 0 {
		return nil, errors.New("no cases")
	}
	var errs []error
	cases := make([]Case, 0, len(f.Cases))
	names := map[string]bool{}
	for i, e := range f.Cases {
		c, err := e.toCase()
		if err != nil {
			errs = append(errs, fmt.Errorf("case %d (%q): %w", i+1, e.Name, err))
			continue
		}
		if names[c.Name] {
			errs = append(errs, fmt.Errorf("case %d: duplicate name %q", i+1, c.Name))
		}
		names[c.Name] = true
		cases = append(cases, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cases, nil
}

func (e caseEntry) toCase() (Case, error) {
	var errs []error
	if e.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if e.User == "" {
		errs = append(errs, errors.New("user is required"))
	}
	action := Action(e.Action)
	if action == "" {
		action = ActionCallTool
	}
	named := map[string]bool{"tool": e.Tool != "", "resource": e.Resource != "", "prompt": e.Prompt != ""}
	var want []string
	switch action {
	case ActionCallTool:
		want = []string{"tool"}
	case ActionReadResource:
		want = []string{"resource"}
	case ActionGetPrompt:
		want = []string{"prompt"}
	case ActionComplete:
		want = []string{"prompt", "resource"}
	default:
		errs = append(errs, fmt.Errorf("action %q is not call_tool, read_resource, get_prompt or complete", e.Action))
	}
	count := 0
	for _, k := range []string{"tool", "resource", "prompt"} {
		if named[k] {
			count++
		}
	}
	if want != nil && count == 0 {
		errs = append(errs, fmt.Errorf("%s is required", strings.Join(want, " or ")))
	} else if want != nil && (count != 1 || !slices.ContainsFunc(want, func(k string) bool { return named[k] })) {
		errs = append(errs, fmt.Errorf("a case of %s names exactly one %s", action, strings.Join(want, " or ")))
	}
	if e.Template != "" && e.Resource == "" {
		errs = append(errs, errors.New("template is for a resource"))
	}
	var expect Outcome
	if err := expect.UnmarshalText([]byte(e.Expect)); err != nil {
		errs = append(errs, errors.New("expect must be allow, approve or deny"))
	}
	args, err := caseArgs(&e.Args)
	if err != nil {
		errs = append(errs, fmt.Errorf("args: %w", err))
	}
	server := BuiltinServer
	if e.Server != nil {
		server = *e.Server
	}
	req := Request{
		Principal: Principal{ID: e.User, Tenant: e.Tenant, Groups: e.Groups, Roles: e.Roles},
		Arguments: args,
		ClientID:  e.ClientID,
	}
	switch {
	case e.Tool != "":
		req.Tool = Tool{Name: e.Tool, Server: server, DefinitionHash: e.DefinitionHash, Reviewed: e.Reviewed}
	case e.Prompt != "":
		req.Prompt = Prompt{Name: e.Prompt, Server: server, DefinitionHash: e.DefinitionHash}
	default:
		req.Resource = Resource{URI: e.Resource, Template: e.Template, Server: server, DefinitionHash: e.DefinitionHash}
	}
	if action != ActionCallTool {
		req.Action = action
	}
	return Case{Name: e.Name, Request: req, Expect: expect}, errors.Join(errs...)
}

// caseArgs turns a case's args into JSON: a YAML mapping is converted, a
// string is taken as JSON text as it is, and no args means none.
func caseArgs(n *yaml.Node) (json.RawMessage, error) {
	switch {
	case n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return nil, nil
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		if !json.Valid([]byte(n.Value)) {
			return nil, errors.New("the string is not valid JSON")
		}
		return json.RawMessage(n.Value), nil
	case n.Kind != yaml.MappingNode:
		return nil, errors.New("must be a mapping or a string of JSON")
	}
	v, err := yamlValue(n, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// yamlValue converts a YAML node to the JSON value it spells. Aliases,
// non-string keys and non-finite numbers have no JSON equivalent and are
// refused.
func yamlValue(n *yaml.Node, depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("nested too deeply")
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nil, fmt.Errorf("line %d: aliases are not supported", n.Line)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return nil, fmt.Errorf("line %d: keys must be strings", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			v, err := yamlValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp":
			// JSON has no timestamps: a date means the text as written.
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("line %d: %s has no JSON equivalent", n.Line, strings.TrimPrefix(n.ShortTag(), "!!"))
}

// Result is the outcome of one Case.
type Result struct {
	Case     Case
	Decision Decision
}

// Passed reports whether the decision's outcome is the one expected.
func (r Result) Passed() bool { return r.Decision.Outcome == r.Case.Expect }

// String renders the result as `usher policy test` prints it: one line for
// a pass, the decision's policies and reasons for a failure.
func (r Result) String() string {
	if r.Passed() {
		return fmt.Sprintf("ok   %s: %s", r.Case.Name, r.Decision.Outcome)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL %s: want %s, got %s (policies: %s)", r.Case.Name, r.Case.Expect, r.Decision.Outcome,
		orNone(strings.Join(r.Decision.PolicyIDs, ", ")))
	for _, reason := range r.Decision.Reasons {
		fmt.Fprintf(&b, "\n     - %s", reason)
	}
	return b.String()
}

// RunCases decides every case with p, in order.
func RunCases(p *Policy, cases []Case) []Result {
	out := make([]Result, len(cases))
	for i, c := range cases {
		out[i] = Result{Case: c, Decision: p.Decide(c.Request)}
	}
	return out
}

// caseKeys are the keys a case may have: caseEntry's.
var caseKeys = func() []string {
	var out []string
	t := reflect.TypeFor[caseEntry]()
	for i := range t.NumField() {
		out = append(out, t.Field(i).Tag.Get("yaml"))
	}
	return out
}()

// unknownKeys reports every key of doc, a case file, that is neither
// "cases" at the top nor a key of a case, with its case and line, and the
// known key it most likely means.
func unknownKeys(doc *yaml.Node) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil // not a mapping: decoding says what it is
	}
	var errs []error
	top := doc.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		key, val := top[i], top[i+1]
		if key.Value != "cases" {
			errs = append(errs, fmt.Errorf("unknown key %q (line %d)%s; a case file has only cases", key.Value, key.Line, didYouMean(key.Value, []string{"cases"})))
			continue
		}
		if val.Kind != yaml.SequenceNode {
			continue
		}
		for n, c := range val.Content {
			if c.Kind != yaml.MappingNode {
				continue
			}
			for j := 0; j+1 < len(c.Content); j += 2 {
				if k := c.Content[j]; !slices.Contains(caseKeys, k.Value) {
					errs = append(errs, fmt.Errorf("unknown key %q in case %d (line %d)%s", k.Value, n+1, k.Line, didYouMean(k.Value, caseKeys)))
				}
			}
		}
	}
	return errors.Join(errs...)
}

package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
)

// Catalog is what the policy and tools routes read of the MCP server's
// catalog (mcpserver.Catalog): what it offers, and what a request names.
type Catalog interface {
	Offered(ctx context.Context) ([]mcpserver.Offer, error)
	Resolve(ctx context.Context, action mcpserver.Action, ref, name string) (mcpserver.Feature, error)
}

// finding is a lint finding as GET /api/policy shows it.
type finding struct {
	Kind     string `json:"kind"`
	PolicyID string `json:"policy_id"`
	Position string `json:"position"`
	Message  string `json:"message"`
	// Text is the finding as `usher policy check` prints it.
	Text string `json:"text"`
}

// policyView is the answer of GET /api/policy.
type policyView struct {
	Name       string             `json:"name"`
	Hash       string             `json:"hash"`
	Statements []policy.Statement `json:"statements"`
	Findings   []finding          `json:"findings"`
}

// policyDoc answers GET /api/policy: the statements of the policy the
// server decides with, its hash, and what `usher policy check` finds in
// it against the tool lock.
func (a *API) policyDoc(w http.ResponseWriter, r *http.Request) {
	if err := noParameters(r); err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	v := policyView{Name: a.policy.Name(), Hash: a.policy.Hash(), Statements: a.policy.Statements(), Findings: []finding{}}
	for _, f := range a.policy.Lint(a.lock) {
		v.Findings = append(v.Findings, finding{Kind: string(f.Kind), PolicyID: f.PolicyID, Position: f.Position, Message: f.Message, Text: f.String()})
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// The lock states of GET /api/tools.
const (
	stateLocked  = "locked"
	stateChanged = "changed"
	stateNew     = "new"
	stateRemoved = "removed"
)

// offerView is a tool, resource, template or prompt as GET /api/tools
// shows it.
type offerView struct {
	Kind           string `json:"kind"`
	Name           string `json:"name"`
	Server         string `json:"server,omitempty"`
	DefinitionHash string `json:"definition_hash,omitempty"`
	// LockState is the tool's against the tool lock; absent for the
	// others, which the lock does not hold.
	LockState string `json:"lock_state,omitempty"`
	// LockedHash is the hash the lock holds, for a changed or removed
	// tool.
	LockedHash string `json:"locked_hash,omitempty"`
	// Definition is what DefinitionHash covers; absent for a removed tool.
	Definition json.RawMessage `json:"definition,omitempty"`
	// LockedDefinition is the definition the lock keeps for a changed or
	// removed tool (policy.Lock.Definitions): the one reviewed. Absent
	// when the lock keeps its hash only.
	LockedDefinition json.RawMessage `json:"locked_definition,omitempty"`
}

// toolsView is the answer of GET /api/tools.
type toolsView struct {
	// Complete is false when some upstream could not be listed: its
	// offers are missing or as it last listed them.
	Complete bool        `json:"complete"`
	Offers   []offerView `json:"offers"`
}

// tools answers GET /api/tools: every offer of the catalog, listed
// afresh, each tool with its state against the tool lock (policy.Diff,
// as `usher tools diff` compares), and the tools the lock holds that are
// no longer offered.
func (a *API) tools(w http.ResponseWriter, r *http.Request) {
	if err := noParameters(r); err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	offers, listErr := a.catalog.Offered(r.Context())
	if listErr != nil {
		a.log.WarnContext(r.Context(), "some upstreams could not be listed", "err", listErr)
	}
	current := map[string]string{}
	for _, o := range offers {
		if o.Kind == mcpserver.OfferTool {
			current[o.Name] = o.Hash
		}
	}
	diff := policy.Diff(a.lock, current)
	changes := map[string]policy.Change{}
	for _, c := range diff {
		changes[c.Tool] = c
	}
	v := toolsView{Complete: listErr == nil, Offers: make([]offerView, 0, len(offers))}
	for _, o := range offers {
		ov := offerView{Kind: o.Kind, Name: o.Name, Server: o.Server, DefinitionHash: o.Hash, Definition: o.Definition}
		if o.Kind == mcpserver.OfferTool {
			ov.LockState = stateLocked
			if c, ok := changes[o.Name]; ok {
				ov.LockState = map[policy.ChangeKind]string{policy.Added: stateNew, policy.Changed: stateChanged}[c.Kind]
				ov.LockedHash = c.Old
				if c.Kind == policy.Changed {
					ov.LockedDefinition = a.lockedDefinition(o.Name)
				}
			}
		}
		v.Offers = append(v.Offers, ov)
	}
	for _, c := range diff {
		if c.Kind == policy.Removed {
			v.Offers = append(v.Offers, offerView{Kind: mcpserver.OfferTool, Name: c.Tool, LockState: stateRemoved, LockedHash: c.Old,
				LockedDefinition: a.lockedDefinition(c.Tool)})
		}
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// lockedDefinition is the definition the tool lock keeps for the tool
// name, as JSON; nil when it keeps none.
func (a *API) lockedDefinition(name string) json.RawMessage {
	if a.lock == nil {
		return nil
	}
	d, ok := a.lock.Definitions[name]
	if !ok {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}

// explainParams are the parameters of GET /api/policy/explain: the flags
// of `usher policy explain`.
var explainParams = []string{"user", "action", "tool", "resource", "prompt", "template", "argument", "server",
	"args", "groups", "definition-hash"}

// Bounds of an explain's parameters.
const (
	maxExplainValue = 4096
	maxExplainArgs  = 64 << 10
)

// explain answers GET /api/policy/explain: the decision of the policy on
// the request the parameters name, as `usher policy explain --json`
// prints it.
func (a *API) explain(w http.ResponseWriter, r *http.Request) {
	in, err := parseExplain(r)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	call, err := mcpserver.ExplainCall(r.Context(), in, a.catalog.Resolve)
	var bad *mcpserver.InputError
	if errors.As(err, &bad) {
		err = httpx.Errorf(http.StatusBadRequest, "invalid_explain", bad.Problem)
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, mcpserver.Explain(a.policy, a.lock, call))
}

// parseExplain reads the request to explain: each parameter at most once,
// text without control characters, of bounded length.
func parseExplain(r *http.Request) (mcpserver.ExplainInput, error) {
	q, err := queryOf(r)
	if err != nil {
		return mcpserver.ExplainInput{}, err
	}
	for k, v := range q {
		if !slices.Contains(explainParams, k) {
			return mcpserver.ExplainInput{}, unknownParameter(k)
		}
		limit, control := maxExplainValue, unicode.IsControl
		if k == "args" {
			limit, control = maxExplainArgs, notJSONSpace
		}
		if len(v) != 1 || len(v[0]) > limit || !utf8.ValidString(v[0]) || strings.ContainsFunc(v[0], control) {
			return mcpserver.ExplainInput{}, badParameter(k, fmt.Sprintf("text without control characters, of at most %d bytes", limit))
		}
	}
	in := mcpserver.ExplainInput{
		User: q.Get("user"), Action: q.Get("action"), Tool: q.Get("tool"), Resource: q.Get("resource"),
		Prompt: q.Get("prompt"), Template: q.Get("template"), Argument: q.Get("argument"), Server: q.Get("server"),
		Args: q.Get("args"), DefinitionHash: q.Get("definition-hash"),
	}
	if g := q.Get("groups"); g != "" {
		in.Groups = strings.Split(g, ",")
	}
	return in, nil
}

// notJSONSpace reports a control character other than the whitespace
// JSON arguments may hold.
func notJSONSpace(c rune) bool {
	return unicode.IsControl(c) && c != '\t' && c != '\n' && c != '\r'
}

// noParameters refuses any query parameter.
func noParameters(r *http.Request) error {
	q, err := queryOf(r)
	if err == nil && len(q) > 0 {
		err = unknownParameter(firstKey(q))
	}
	return err
}

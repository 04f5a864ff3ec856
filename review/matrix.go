package review

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
)

// matrixCell is the decision on a call of one tool for one column of the
// matrix.
type matrixCell struct {
	Decision  policy.Outcome `json:"decision"`
	PolicyIDs []string       `json:"policy_ids"`
	Approvers []string       `json:"approvers"`
	// ArgumentsMatter: leaving out the statements whose conditions read
	// the call's arguments changes the decision, so a call with
	// arguments may be decided otherwise than this call without any.
	ArgumentsMatter bool `json:"arguments_matter"`
}

// matrixRow is one tool of the matrix: the tool as the catalog offers it,
// and the decision for each column.
type matrixRow struct {
	Tool           string `json:"tool"`
	Server         string `json:"server"`
	DefinitionHash string `json:"definition_hash"`
	LockState      string `json:"lock_state"`
	// NoGroup is the decision for a person in no group; Groups, for a
	// person in each group of the matrix's groups, in their order.
	NoGroup matrixCell   `json:"no_group"`
	Groups  []matrixCell `json:"groups"`
}

// matrixView is the answer of GET /api/policy/matrix.
type matrixView struct {
	PolicyHash string `json:"policy_hash"`
	// Principal is the person the matrix decides for: of the reviewer's
	// issuer and tenant, and named by no statement.
	Principal string `json:"principal"`
	// Groups are the approver groups the policy's statements name, in
	// the order they first appear.
	Groups []string `json:"groups"`
	// Complete is false when some upstream could not be listed: its
	// tools are missing or as it last listed them.
	Complete bool        `json:"complete"`
	Tools    []matrixRow `json:"tools"`
}

// matrixPerson is the object id of the person the matrix decides for.
const matrixPerson = "anyone"

// matrix answers GET /api/policy/matrix: for every tool the catalog
// offers (listed afresh), the policy's decision on a call with no
// arguments by a person of the reviewer's tenant in no group, and by one
// in each approver group the policy names — each decided as the MCP
// server decides, with the tool's definition hash against the tool lock.
func (a *API) matrix(w http.ResponseWriter, r *http.Request) {
	if err := noParameters(r); err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	offers, listErr := a.catalog.Offered(r.Context())
	if listErr != nil {
		a.log.WarnContext(r.Context(), "some upstreams could not be listed", "err", listErr)
	}
	reviewer, _ := identity.FromContext(r.Context())
	person := identity.Principal{Issuer: reviewer.Issuer, Tenant: reviewer.Tenant, ObjectID: matrixPerson}
	v := matrixView{PolicyHash: a.policy.Hash(), Principal: person.ID(), Groups: []string{}, Complete: listErr == nil, Tools: []matrixRow{}}
	for _, s := range a.policy.Statements() {
		for _, g := range s.Approvers {
			if !slices.Contains(v.Groups, g) {
				v.Groups = append(v.Groups, g)
			}
		}
	}
	for _, o := range offers {
		if o.Kind != mcpserver.OfferTool {
			continue
		}
		call := mcpserver.Call{Principal: person.ID(), Tenant: person.Tenant, Tool: o.Name, Server: o.Server,
			DefinitionHash: o.Hash, Arguments: json.RawMessage(`{}`)}
		state := stateLocked
		if !a.lock.Reviewed(o.Name, o.Hash) {
			state = stateChanged
			if _, locked := a.lockedHash(o.Name); !locked {
				state = stateNew
			}
		}
		row := matrixRow{Tool: o.Name, Server: o.Server, DefinitionHash: o.Hash, LockState: state,
			NoGroup: a.cell(call), Groups: make([]matrixCell, 0, len(v.Groups))}
		for _, g := range v.Groups {
			call.Groups = []string{g}
			row.Groups = append(row.Groups, a.cell(call))
		}
		v.Tools = append(v.Tools, row)
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// lockedHash is the hash the tool lock holds for the tool name.
func (a *API) lockedHash(name string) (string, bool) {
	if a.lock == nil {
		return "", false
	}
	h, ok := a.lock.Tools[name]
	return h, ok
}

// cell decides call as the MCP server does (mcpserver.Explain), and
// whether the statements that read arguments change that decision.
func (a *API) cell(call mcpserver.Call) matrixCell {
	e := mcpserver.Explain(a.policy, a.lock, call)
	listing := a.policy.DecideListing(mcpserver.PolicyRequest(call, a.lock))
	return matrixCell{Decision: e.Decision, PolicyIDs: e.PolicyIDs, Approvers: e.Approvers,
		ArgumentsMatter: listing.Outcome != e.Decision}
}

package review_test

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/store/storetest"
)

// matrixPolicy allows notes_list, lets editors write notes unattended
// while finance approves everyone else's writes, denies an upstream
// tool's large amounts (editors approve the others), and names no
// other tool.
const matrixPolicy = `
@id("allow-notes-list")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_list")
when { resource.server == "builtin" };

@id("editors-write")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_write")
when { principal.groups.contains("editors") };

@id("finance-approves-writes")
@outcome("approve")
@approvers("finance")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_write")
unless { principal.groups.contains("editors") };

@id("allow-stable")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"up__stable");

@id("deny-large-echo")
forbid (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"up__echo")
when { context.arguments.amount > 1000 };

@id("editors-approve-echo")
@outcome("approve")
@approvers("editors")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"up__echo");
`

// The matrix is, for every tool offered, the decision each column's
// person gets: exactly what an explain of that tool, with no arguments
// and the column's groups, answers.
func TestPolicyMatrix(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	up, upURL := upstream(t)
	cat := newCatalog(t, st, mcpserver.Upstream{Name: "up", URL: upURL})
	locked, err := cat.Hashes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	addTool(up, "stable", "The tool stable, changed since it was locked.")
	addTool(up, "fresh", "A tool added after the lock.")
	pol, err := policy.Parse("matrix.cedar", []byte(matrixPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, &review.Options{Groups: []string{"security"}, Logger: quiet, Policy: pol,
		Lock: &policy.Lock{Tools: locked}, Catalog: cat})
	tok := e.a.token(t, "rita", "security")

	type cell struct {
		Decision        policy.Outcome `json:"decision"`
		PolicyIDs       []string       `json:"policy_ids"`
		Approvers       []string       `json:"approvers"`
		ArgumentsMatter bool           `json:"arguments_matter"`
	}
	var got struct {
		PolicyHash string   `json:"policy_hash"`
		Principal  string   `json:"principal"`
		Groups     []string `json:"groups"`
		Complete   bool     `json:"complete"`
		Tools      []struct {
			Tool           string `json:"tool"`
			Server         string `json:"server"`
			DefinitionHash string `json:"definition_hash"`
			LockState      string `json:"lock_state"`
			NoGroup        cell   `json:"no_group"`
			Groups         []cell `json:"groups"`
		} `json:"tools"`
	}
	getJSON(t, e.a, tok, "/api/policy/matrix", &got)
	if got.PolicyHash != pol.Hash() || !got.Complete || !slices.Equal(got.Groups, []string{"finance", "editors"}) ||
		!strings.HasPrefix(got.Principal, e.a.url+"/dev/oidc||") {
		t.Fatalf("matrix: hash %q complete %v groups %v principal %q", got.PolicyHash, got.Complete, got.Groups, got.Principal)
	}
	offered, err := cat.Offered(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, o := range offered {
		if o.Kind == mcpserver.OfferTool {
			tools = append(tools, o.Name)
		}
	}
	var rows []string
	for _, r := range got.Tools {
		rows = append(rows, r.Tool)
	}
	if !slices.Equal(rows, tools) {
		t.Fatalf("rows %v, want every tool offered: %v", rows, tools)
	}

	// Each cell is the explain of its tool for its column.
	by := map[string]int{}
	for i, r := range got.Tools {
		by[r.Tool] = i
		for col, groups := range append([][]string{nil}, [][]string{{"finance"}, {"editors"}}...) {
			c := r.NoGroup
			if col > 0 {
				c = r.Groups[col-1]
			}
			q := url.Values{"user": {got.Principal}, "tool": {r.Tool}}
			if groups != nil {
				q.Set("groups", strings.Join(groups, ","))
			}
			var ex mcpserver.Explanation
			getJSON(t, e.a, tok, "/api/policy/explain?"+q.Encode(), &ex)
			if c.Decision != ex.Decision || !slices.Equal(c.PolicyIDs, ex.PolicyIDs) || !slices.Equal(c.Approvers, ex.Approvers) ||
				r.DefinitionHash != ex.Request.DefinitionHash || r.Server != ex.Request.Server {
				t.Errorf("%s for groups %v: %+v, explain says %+v", r.Tool, groups, c, ex)
			}
		}
	}

	// What the test policy makes of them, column by column: no group,
	// finance, editors.
	for tool, want := range map[string]struct {
		state      string
		decisions  []policy.Outcome
		argsMatter bool
	}{
		"notes_list":  {"locked", []policy.Outcome{policy.Allow, policy.Allow, policy.Allow}, false},
		"notes_write": {"locked", []policy.Outcome{policy.Approve, policy.Approve, policy.Allow}, false},
		"up__stable":  {"changed", []policy.Outcome{policy.Approve, policy.Approve, policy.Approve}, false},
		"up__fresh":   {"new", []policy.Outcome{policy.Approve, policy.Approve, policy.Approve}, false},
		"up__echo":    {"locked", []policy.Outcome{policy.Deny, policy.Deny, policy.Deny}, true},
	} {
		i, ok := by[tool]
		if !ok {
			t.Errorf("no row for %s", tool)
			continue
		}
		r := got.Tools[i]
		decisions := []policy.Outcome{r.NoGroup.Decision, r.Groups[0].Decision, r.Groups[1].Decision}
		if r.LockState != want.state || !slices.Equal(decisions, want.decisions) || r.NoGroup.ArgumentsMatter != want.argsMatter {
			t.Errorf("%s: state %s, decisions %v, arguments matter %v; want %s, %v, %v",
				tool, r.LockState, decisions, r.NoGroup.ArgumentsMatter, want.state, want.decisions, want.argsMatter)
		}
	}
	if w := got.Tools[by["notes_write"]].NoGroup; !slices.Equal(w.Approvers, []string{"finance"}) || !slices.Equal(w.PolicyIDs, []string{"finance-approves-writes"}) {
		t.Errorf("notes_write for no group: %+v, want finance-approves-writes with approvers finance", w)
	}

	// Reviewers only, GET only, no parameters.
	if code, body, _ := call(t, "GET", e.a.url+"/api/policy/matrix", e.a.token(t, "alice")); code != 403 || errorCode(body) != "reviewer_required" {
		t.Errorf("a non-reviewer: %d %s", code, body)
	}
	if code, _, _ := call(t, "POST", e.a.url+"/api/policy/matrix", tok); code != 405 {
		t.Errorf("POST: %d, want 405", code)
	}
	if code, body, _ := call(t, "GET", e.a.url+"/api/policy/matrix?tool=x", tok); code != 400 || errorCode(body) != "unknown_parameter" {
		t.Errorf("a parameter: %d %s", code, body)
	}
}

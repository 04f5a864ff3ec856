package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/policy"
)

// Offered lists every tool, resource, template and prompt, each with the
// hash of the definition it shows, and Resolve finds each with the same
// server and hash.
func TestOffered(t *testing.T) {
	t.Parallel()
	e, _, _ := twoFeatureUpstreams(t, nil)
	ctx := t.Context()
	offers, err := e.catalog.Offered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range offers {
		names = append(names, o.Kind+" "+o.Server+" "+o.Name)
		var hash string
		switch o.Kind {
		case OfferTool:
			var d policy.ToolDefinition
			if err := json.Unmarshal(o.Definition, &d); err != nil {
				t.Fatal(err)
			}
			hash, err = testDefinitionHash(ToolDefinition(d)) // the catalog's hash function
		case OfferResource:
			var r mcp.Resource
			err = json.Unmarshal(o.Definition, &r)
			hash, _ = featureHash(&r)
		case OfferTemplate:
			var r mcp.ResourceTemplate
			err = json.Unmarshal(o.Definition, &r)
			hash, _ = featureHash(&r)
		case OfferPrompt:
			var p mcp.Prompt
			err = json.Unmarshal(o.Definition, &p)
			hash, _ = featureHash(&p)
		}
		if err != nil || hash != o.Hash {
			t.Errorf("%s %s: hash %s of its definition %s, offered with %s (%v)", o.Kind, o.Name, hash, o.Definition, o.Hash, err)
		}
		action, ref := map[string]Action{OfferTool: ActionCallTool, OfferResource: ActionReadResource, OfferTemplate: ActionComplete, OfferPrompt: ActionGetPrompt}[o.Kind], RefResource
		if f, err := e.catalog.Resolve(ctx, action, ref, o.Name); err != nil || f.Name != o.Name || f.Server != o.Server || f.Hash != o.Hash {
			t.Errorf("Resolve(%s %s) = %+v, %v; offered %+v", action, o.Name, f, err, o)
		}
	}
	for _, want := range []string{
		"tool builtin notes_write", "tool builtin sessions_list",
		"resource a a__test://secret", "resource b b__test://static-text",
		"template a a__test://items/{id}", "template b b__test://items/{id}",
		"prompt a a__greet", "prompt b b__secret",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("no %q among %q", want, names)
		}
	}
	if !slices.IsSortedFunc(offers, func(a, b Offer) int {
		if c := kindOrder(a.Kind) - kindOrder(b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	}) || kindOrder(offers[0].Kind) != 0 || offers[len(offers)-1].Kind != OfferPrompt {
		t.Errorf("not in kind and name order: %q", names)
	}
	if _, err := e.catalog.Resolve(ctx, ActionCallTool, "", "no_such_tool"); !errors.Is(err, ErrNoFeature) {
		t.Errorf("Resolve of an unknown tool: %v", err)
	}
}

// ExplainCall makes of each kind of input the call the MCP server would
// decide, with what the catalog says unless the input gives the hash, and
// refuses what it cannot explain with an InputError.
func TestExplainCall(t *testing.T) {
	t.Parallel()
	e, _, _ := twoFeatureUpstreams(t, nil)
	ctx := t.Context()
	resolve := e.catalog.Resolve
	hash := func(a Action, ref, name string) Feature {
		f, err := e.catalog.Resolve(ctx, a, ref, name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	echo, greet, items := hash(ActionCallTool, "", "notes_write"), hash(ActionGetPrompt, RefPrompt, "a__greet"), hash(ActionComplete, RefResource, "a__test://items/{id}")
	for _, c := range []struct {
		name string
		in   ExplainInput
		want Call
	}{
		{"a built-in tool", ExplainInput{User: "u", Tool: "notes_write", Args: `{"b":1, "a":2}`, Groups: []string{"g"}},
			Call{Principal: "u", Groups: []string{"g"}, Tool: "notes_write", Server: "builtin", DefinitionHash: echo.Hash, Arguments: json.RawMessage(`{"a":2,"b":1}`)}},
		{"a tool by its hash", ExplainInput{User: "u", Tool: "x", DefinitionHash: "sha256:1"},
			Call{Principal: "u", Tool: "x", DefinitionHash: "sha256:1", Arguments: json.RawMessage(`{}`)}},
		{"a read through a template", ExplainInput{User: "u", Action: "read_resource", Resource: "a__test://items/7"},
			Call{Principal: "u", Tool: "a__test://items/7", Server: "a", Template: "a__test://items/{id}", DefinitionHash: items.Hash, Action: ActionReadResource, Ref: RefResource, Arguments: json.RawMessage(`{}`)}},
		{"a prompt", ExplainInput{User: "u", Action: "get_prompt", Prompt: "a__greet", Server: "a"},
			Call{Principal: "u", Tool: "a__greet", Server: "a", DefinitionHash: greet.Hash, Action: ActionGetPrompt, Ref: RefPrompt, Arguments: json.RawMessage(`{}`)}},
		{"a completion of a template", ExplainInput{User: "u", Action: "complete", Template: "a__test://items/{id}", Argument: "id=4"},
			Call{Principal: "u", Tool: "a__test://items/{id}", Server: "a", Template: "a__test://items/{id}", DefinitionHash: items.Hash, Action: ActionComplete, Ref: RefResource,
				Arguments: json.RawMessage(`{"argument":{"name":"id","value":"4"}}`)}},
	} {
		got, err := ExplainCall(ctx, c.in, resolve)
		if err != nil || got.Principal != c.want.Principal || !slices.Equal(got.Groups, c.want.Groups) || got.Tool != c.want.Tool ||
			got.Server != c.want.Server || got.DefinitionHash != c.want.DefinitionHash || got.Template != c.want.Template ||
			got.Action != c.want.Action || (got.Action != "" && got.Ref != c.want.Ref) || string(got.Arguments) != string(c.want.Arguments) {
			t.Errorf("%s: %+v, %v\nwant %+v", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		in   ExplainInput
		want string
	}{
		{"no user", ExplainInput{Tool: "notes_write"}, "user is required"},
		{"two targets", ExplainInput{User: "u", Tool: "notes_write", Prompt: "a__greet"}, "exactly one of tool"},
		{"an unknown action", ExplainInput{User: "u", Action: "delete", Tool: "x"}, "is not call_tool"},
		{"a completion without its argument", ExplainInput{User: "u", Action: "complete", Prompt: "a__greet"}, "complete needs it"},
		{"an argument of a call", ExplainInput{User: "u", Tool: "notes_write", Argument: "a=b"}, "is for complete"},
		{"a hash without a server", ExplainInput{User: "u", Action: "get_prompt", Prompt: "p", DefinitionHash: "sha256:1"}, "server names the upstream"},
		{"arguments that are not an object", ExplainInput{User: "u", Tool: "notes_write", Args: `[1]`}, "args must be a JSON object"},
		{"arguments that are not JSON", ExplainInput{User: "u", Tool: "notes_write", Args: `{"a":`}, "args must be a JSON object"},
		{"duplicate names", ExplainInput{User: "u", Tool: "notes_write", Args: `{"a":1,"a":2}`}, "args must be a JSON object"},
		{"another server", ExplainInput{User: "u", Action: "get_prompt", Prompt: "a__greet", Server: "b"}, `of server "a", not "b"`},
		{"nothing of that name", ExplainInput{User: "u", Tool: "nowhere"}, "the catalog offers no"},
	} {
		_, err := ExplainCall(ctx, c.in, resolve)
		var bad *InputError
		if !errors.As(err, &bad) || !strings.Contains(bad.Problem, c.want) {
			t.Errorf("%s: %v, want an InputError saying %q", c.name, err, c.want)
		}
	}
	failing := func(context.Context, Action, string, string) (Feature, error) { return Feature{}, errors.New("down") }
	if _, err := ExplainCall(ctx, ExplainInput{User: "u", Tool: "x"}, failing); err == nil || errors.As(err, new(*InputError)) {
		t.Errorf("a catalog that cannot be read: %v", err)
	}
}

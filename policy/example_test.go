package policy_test

import (
	"encoding/json"
	"fmt"

	"github.com/usherhq/usher/policy"
)

// A policy file and the decisions it makes. Every statement has an @id; a
// permit says whether it allows or needs approval; a forbid denies.
func ExamplePolicy_Decide() {
	p, err := policy.Parse("example.cedar", []byte(`
// Anyone may read the wiki unattended.
@id("allow-wiki-read")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"wiki__read");

// Publishing needs an editor's approval.
@id("approve-wiki-publish")
@outcome("approve")
@approvers("editors")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"wiki__publish");

// Nobody publishes to the front page through the assistant.
@id("deny-front-page")
forbid (principal, action, resource == Usher::Tool::"wiki__publish")
when { context.arguments has page && context.arguments.page == "Main_Page" };
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	decide := func(tool string, reviewed bool, args string) {
		d := p.Decide(policy.Request{
			Principal: policy.Principal{ID: "alice", Groups: []string{"staff"}},
			Tool:      policy.Tool{Name: tool, Server: "wiki", Reviewed: reviewed},
			Arguments: json.RawMessage(args),
		})
		fmt.Printf("%-14s %-28s %-7s %v %v\n", tool, args, d.Outcome, d.PolicyIDs, d.Approvers)
	}
	decide("wiki__read", true, `{"page":"Main_Page"}`)
	decide("wiki__read", false, `{"page":"Main_Page"}`) // not in the tool lock
	decide("wiki__publish", true, `{"page":"Drafts"}`)
	decide("wiki__publish", true, `{"page":"Main_Page"}`)
	decide("wiki__delete", true, `{"page":"Drafts"}`) // nothing matches
	// Output:
	// wiki__read     {"page":"Main_Page"}         allow   [allow-wiki-read] []
	// wiki__read     {"page":"Main_Page"}         approve [allow-wiki-read] []
	// wiki__publish  {"page":"Drafts"}            approve [approve-wiki-publish] [editors]
	// wiki__publish  {"page":"Main_Page"}         deny    [deny-front-page] []
	// wiki__delete   {"page":"Drafts"}            approve [] []
}

// What `usher policy explain` prints for a call the default policy denies.
func ExampleExplain() {
	p := policy.Default()
	req := policy.Request{
		Principal: policy.Principal{ID: "alice", Tenant: "contoso"},
		Tool:      policy.Tool{Name: "notes_delete", Server: policy.BuiltinServer, Reviewed: true},
		Arguments: json.RawMessage(`{"id":"note-1"}`),
	}
	d := p.Decide(req)
	d.PolicyHash = "…" // the SHA-256 of default.cedar, elided here
	fmt.Print(policy.Explain(req, d))
	// Output:
	// decision:    deny
	// user:        "alice", tenant "contoso"
	// tool:        "notes_delete", server "builtin", reviewed
	// reasons:
	//   - forbid "deny-notes-delete" matched (outcome deny): notes_delete cannot be undone; this deployment does not offer it
	// policies:    deny-notes-delete
	// policy hash: …
}

// The definition hash covers what a model and a person read about a tool.
// A tool whose hash is not the one in the tool lock is unreviewed.
func ExampleDefinitionHash() {
	def := policy.ToolDefinition{Name: "ping"}
	hash, err := policy.DefinitionHash(def)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hash)

	lock := &policy.Lock{Tools: map[string]string{"ping": hash}}
	fmt.Println(lock.Reviewed("ping", hash))

	def.Annotations = json.RawMessage(`{"readOnlyHint": true}`)
	changed, _ := policy.DefinitionHash(def)
	fmt.Println(lock.Reviewed("ping", changed))
	for _, c := range policy.Diff(lock, map[string]string{"ping": changed, "pong": hash}) {
		fmt.Println(c.Kind, c.Tool)
	}
	// Output:
	// sha256:3f1b5ce7170804143ea6c840825f11e1fce1aed30dba5b7f0d83220f84066889
	// true
	// false
	// changed ping
	// added pong
}

// What `usher policy explain` prints for a resource read that the default
// policy leaves to a person: it allows no upstream resource unattended.
func ExampleExplain_resource() {
	p := policy.Default()
	req := policy.Request{
		Principal: policy.Principal{ID: "alice", Tenant: "contoso"},
		Action:    policy.ActionReadResource,
		Resource:  policy.Resource{URI: "docs__file:///guide.md", Template: "docs__file:///{path}", Server: "docs"},
	}
	d := p.Decide(req)
	d.PolicyHash = "…"
	fmt.Print(policy.Explain(req, d))
	// Output:
	// decision:    approve
	// user:        "alice", tenant "contoso"
	// action:      read_resource
	// target:      Usher::Resource::"docs__file:///guide.md", server "docs", never reviewed (the tool lock holds tools only)
	// template:    "docs__file:///{path}"
	// reasons:
	//   - no policy matched, so a human decides
	// policies:    (none)
	// approvers:   the requesting user
	// policy hash: …
}

// Package policy owns the approval policy: loading, validating and
// evaluating it, tool-definition pinning (the tool lock), linting, policy
// test cases and explanations of decisions. It reads its own files and
// writes the tool lock; it performs no other I/O and depends on no other
// Usher package.
//
// # The model
//
// A policy is a Cedar policy file evaluated once per tool call, resource
// read, prompt get and completion, with
//
//   - principal: Usher::User::"<user id>", with attributes tenant (String),
//     groups (Set<String>) and roles (Set<String>);
//   - action: Usher::Action::"call_tool", "read_resource", "get_prompt" or
//     "complete" (see Action);
//   - resource: for call_tool, Usher::Tool::"<full tool name>", with
//     attributes name, server ("builtin" for built-in tools, else the
//     upstream's name), definition_hash and reviewed (Bool: the definition
//     hash equals the one in the tool lock); for get_prompt, and complete
//     of a prompt's argument, Usher::Prompt::"<full prompt name>"; for
//     read_resource, and complete of a resource template's variable,
//     Usher::Resource::"<full URI or URI template>", which also has uri and
//     template (the URI template a read URI matched, else ""). Prompts and
//     resources carry name, server and definition_hash too, and reviewed is
//     always false for them: the tool lock holds tools only;
//   - context: {arguments: <the call's or prompt's arguments as a record>,
//     client_id}; a completion's arguments are {argument: {name, value}}.
//
// Parse validates every statement against this model with Cedar's
// validator and the schema schema.cedarschema (context.arguments, whose
// shape is the tool's, is left to each call): a statement that would error
// whenever it is evaluated, or can never match, makes the file invalid.
//
// Tool annotations (readOnlyHint and the like) come from the tool's server
// and are never an input: they appear in no entity and no context.
//
// # Outcomes
//
// A decision is Allow (run unattended), Approve (a human decides) or Deny.
// Every policy carries a unique @id. A matching forbid denies; a matching
// permit annotated @outcome("allow") allows; a matching permit annotated
// @outcome("approve"), or with no @outcome, requires approval, optionally
// by the groups named in @approvers("group-a,group-b"). Deny wins over
// Approve, which wins over Allow. Whatever the policy says, Decide enforces:
//
//   - nothing matched → Approve;
//   - any evaluation error → Deny (Cedar skips a policy whose condition
//     errors; a skipped forbid must not open anything);
//   - arguments that cannot be evaluated → Deny;
//   - a tool that is not reviewed, or whose name is not plain ASCII, is
//     never Allow: such a decision becomes Approve;
//   - a resource, prompt or completion is Allow only by an allow permit
//     whose action scope names its action (action == ..., or action in
//     [...]), and only when its name (URI) is plain ASCII: a permit
//     written for every action was reviewed for tools, which the tool lock
//     guards, not for these.
//
// Every Decision carries the determining policy ids, human-readable
// reasons, the SHA-256 of the policy file and the approver groups.
// docs/policy.md is the reviewer's guide.
package policy

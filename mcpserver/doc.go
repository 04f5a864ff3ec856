// Package mcpserver owns Usher's MCP endpoint: the streamable HTTP transport
// at /mcp, bearer authentication as an OAuth 2.1 resource server (RFC 9728
// metadata, RFC 6750 challenges), the catalog (built-in tools, the demo
// notes tools, and the tools, resources, resource templates, prompts and
// completions federated from upstream MCP servers), and the enforcement
// point that every tools/call, resources/read, prompts/get and
// completion/complete passes through.
//
// # Requests
//
// A request to the endpoint is checked in this order: Host (against DNS
// rebinding) and Origin (403); the declared body size (413); a token in the
// query string (refused, 400); the bearer token from the Authorization header,
// which must be a broker token for exactly this resource (401 invalid_token,
// or 403 insufficient_scope without "mcp:invoke"); then the body is read
// within its limit (413) and a JSON-RPC batch is refused (400) before the MCP
// SDK sees it. Refusals carry generic JSON bodies; the reasons go to the log.
// The token itself never goes further than the authenticator: tools see the
// caller (subject, client, token id, run, tenant, groups) through
// [CallerFromContext], and upstream servers get their own credentials.
//
// A presented token that is refused is audited (a missing one is not: it is
// the first step of OAuth discovery), but sampled per process so that a
// flood of bad tokens cannot flood the audit log: up to 20 records at once,
// then one a second. The refusals left out are counted, and the count is
// recorded with the next record (see [KindAuthFailuresSuppressed]); every
// refusal is still answered and logged.
//
// Without Options.Stateful the endpoint is stateless: every POST stands
// alone, so any replica can serve any request and no session affinity is
// needed. It speaks every protocol version the SDK does, including the
// sessionless 2026-07-28. Options.Stateful (usher serve's default,
// mcp.stateful) adds SDK sessions for the protocols with a handshake,
// recorded so that any replica serves them (see there), and serves a
// request that names no session and begins none as the stateless endpoint
// does. A stateless response ends with the event that carries it, before
// the SDK has closed the session it made for the request, so that a client
// which stops reading after the event keeps its connection for the next
// call (a client that finds the stream unfinished must open a new one).
//
// # The enforcement point
//
// Every tools/call goes through one function, top to bottom: the caller from
// the verified token; the tool, by its exact name (anything else, a case
// variant included, is an unknown tool and runs nothing); the canonical
// arguments and their SHA-256; the [Decider]'s verdict (an error denies);
// the decision audited (no audit, no call); then Deny answers an error result
// the model can read, Approve consumes a matching approval or requests one,
// and Allow (or a consumed approval) runs the tool once per idempotency key.
// With a key, the record that lets the call run (the decision, or the
// approval's use) is written in one transaction with the execution's start,
// and the record of how it ended with its finish (see [Executions]): the
// audit is durable before the tool runs, at one commit. The outcome's commit
// is not on the caller's time: it is written while the result goes back
// (bounded; [Server.Drain] waits for it at shutdown), retried until durable
// and read back before each retry; one that cannot be written within
// [Options.RecordAttempts] makes the outcome unknown, which a retry is told
// at once and the execution records as soon as it can. A start whose write
// failed is read back by its key before the caller is answered. If the
// process stops first, the execution stays started and a [Sweeper] reports
// it outcome_unknown; it is never run again.
// Tool annotations such as readOnlyHint are shown to clients but are never
// part of a [Call]: they cannot influence a decision. tools/list shows a
// caller only the tools the Decider does not deny them.
//
// # Resources, prompts and completion
//
// An upstream's resources, resource templates and prompts are listed with
// its tools, when its capabilities declare them (a list it does not
// implement, answered -32601 Method not found — resources/templates/list
// of a server without templates —, is empty), and exposed under the same
// prefix: a prompt's name and a
// resource's URI (or URI template) are the prefix followed by the
// upstream's own, "docs__summarize" and "docs__file:///guide.md" for the
// upstream docs with the default prefix "docs__" (a prefix of letters,
// digits and '-', such as "docs-", keeps such URIs valid URIs:
// "docs-file:///guide.md"). Prefixes never overlap, so two upstreams
// cannot collide; with [PrefixNone] an upstream's names pass unchanged,
// and one that lies in another's namespace is not offered. Content that
// names URIs (a read's contents, a prompt's embedded resources and
// resource links) comes back with them in the upstream's namespace.
//
// A resources/read names a listed resource's exact URI, or a URI in one
// upstream's namespace that one of that upstream's listed templates
// matches: anything else is "resource not found" (-32002; in protocol
// 2026-07-28 -32602, see resourceNotFound) and reaches no upstream. Each read, prompts/get and completion/complete goes through
// [Server.govern], as a tool call goes through the enforcement point: the
// Decider's verdict on a [Call] with its [Action] (the resource or prompt
// as Call.Tool, its upstream as Call.Server), recorded before anything is
// sent (no audit, no request); Deny answers an error (CodeDenied); Approve
// uses an approval of exactly this request or requests one
// (CodeApprovalRequired, the approval in the error's data), except that a
// completion that is not allowed answers no values; Allow (or a used
// approval) asks the upstream on the caller's session and records the
// outcome after the answer. The listings show what the Decider does not
// deny. A stateful endpoint also takes resources/subscribe for a resource
// that would be listed to the caller (audited, KindSubscribed): the
// catalog's own session subscribes upstream, once per resource, while at
// least one session is subscribed to it (the last to unsubscribe, or to
// end, unsubscribes it upstream), and each notifications/resources/updated
// is passed, under the exposed URI, to the sessions subscribed to it whose
// callers the Decider still shows the resource (a listing decision, made
// again for each update). An update says only that the resource changed
// (as the catalog's session sees it); its content is read through the
// enforcement point. A stateless endpoint takes the same subscriptions,
// and listChanged, on the subscriptions/listen requests of protocol
// 2026-07-28, each ending with its request; its handshake of the older
// protocols offers neither, having no session to send them on.
//
// # Change notifications
//
// The catalog's own session to each upstream (the one that lists it) stays
// open, with the upstream's standalone stream over HTTP, to hear
// notifications/{tools,resources,prompts}/list_changed: each lists the
// upstreams again at once (a flood of them costs one listing at a time),
// and a stateful endpoint then announces listChanged to its sessions for
// each list that changed. Stateless callers see the new lists on their
// next request. What is new is no more trusted than before: a new or
// changed tool's definition hash is not in the tool lock, so it is never
// unattended.
//
// # Upstream servers
//
// An [Upstream] is an MCP server reached over streamable HTTP or stdio whose
// tools are re-exposed under a prefix. Usher keeps one client session per
// upstream and caller subject (a process, for stdio), so that no upstream
// session ever serves two users, and closes it after a quiet period. The
// sessions open at once are bounded (CatalogOptions.MaxSessions): at the
// bound, opening one closes the least recently used idle one, and when
// every session is in use the call fails before anything is sent.
// Requests to an upstream carry only its configured headers, or a broker
// token minted for its own URL: never the caller's token.
//
// Progress and log notifications of a proxied call are passed back to its
// caller, under the caller's progress token and within the caller's log
// level. The upstream sees a progress token of Usher's (random, one per
// call), never the caller's, which is the caller's own name for its call. In the stateless mode a notification can only travel on the
// response stream of the request it is about, while that request is in
// flight. Over HTTP that holds exactly: Usher reads the upstream call's own
// response stream and passes each notification on before the result that
// follows it. Over stdio the SDK hands notifications over apart from
// results, so a call waits, up to half a second, until every notification
// read from the process before its result has been handed over: progress
// goes to the call whose token it names, a log message (which names no
// call) to every call the same subject has in flight on that process.
// An HTTP upstream may close a call's response stream before its answer.
// With event ids on it, the SDK resumes it (Last-Event-ID) and the answer
// comes on the resumed stream; without them the answer is lost although
// the upstream took the call: its outcome is unknown, and the record
// (KindOutcomeUnknown) and the caller are told that the upstream closed
// its stream without answering, apart from a lost connection. A
// resources/read, prompts/get or completion/complete that ends so fails
// (KindExecutionFailed) with the same reason.
// Requests from an upstream to the client (sampling, elicitation, roots)
// are relayed only with CatalogOptions.RelayRequests, for a stateful endpoint:
// during a tool call, to that call's caller when its session offers them
// and it has no other call in flight on that upstream session (the SDK
// does not say which call a request belongs to), each audited before it
// is relayed (KindSamplingRequested, KindElicitationRequested,
// KindRootsRequested: who was asked, for which tool, and the hash of the
// request) and once answered (KindRequestAnswered, never the answer's
// content). An elicitation happens while a tool runs, so after any
// approval the call needed: it never stands for one. Roots are offered to
// an upstream only on a session of a caller that declared them (the
// session's record keeps that declaration for every replica), and an
// upstream of protocol 2026-07-28, whose input requests the SDK's client
// would meet from an empty list of its own, is told of none. With sessions kept in
// Options.Sessions, the id of each request a session sends its client is
// sealed with Options.Secret (the session, its principal, the session's
// own id; expiring after Options.InputLifetime), and an answer whose id
// does not open or is another session's or principal's is refused with a
// JSON-RPC error (KindAnswerRefused).
//
// # Input requests of protocol 2026-07-28
//
// A caller of protocol 2026-07-28 is asked for input with incomplete
// results (multi round-trip requests): its upstream sessions leave an
// upstream's incomplete result of tools/call, prompts/get or
// resources/read to the enforcement point, and declare upstream the
// caller's own elicitation, sampling and roots capabilities. An input request of
// a kind the caller did not declare fails the request (KindRequestRefused);
// the others are audited before they go out (KindElicitationRequested,
// KindSamplingRequested, KindRootsRequested) and passed on under Usher's own requestState,
// sealed with Options.Secret: the call it belongs to (principal, client,
// run, action, name, arguments hash, idempotency key), an expiry
// (Options.InputLifetime) and the upstream's state. A retry whose state
// does not open or is another call's is refused (KindInputStateRefused)
// before anything is sent. Every round is decided again; a round that asks
// for input ends, before it is answered, with its record (KindInputRequired)
// in one transaction with its execution's move to awaiting input and the
// release of the approval it used, so that the rounds are one execution
// and only the round that completes uses the approval up. Any replica
// takes the retry: nothing of a round stays in a process. A call whose
// caller never comes back is ended by the Sweeper once its state can no
// longer be valid (SweeperOptions.InputAbandonedAfter after its latest
// round started: the CallTimeout, the InputLifetime and a minute, 16 min
// by default): failed, with a result that says so, which a retry under its
// idempotency key gets, and audited (KindInputAbandoned).
//
// An upstream of an earlier protocol asks with requests of its own during
// a tool call instead, and waits with the call open. For a caller of
// 2026-07-28 the call is held open in the process (see heldCall): its
// requests become the round's input requests and the upstream state names
// the held call; the retry delivers the answers and gets what the upstream
// does next. A request unanswered for the InputLifetime cancels the
// upstream call (KindInputAbandoned). Such a retry must reach the process
// that holds the call.
//
// # Upstream health
//
// A Health lists every upstream on an interval (HealthOptions.Interval,
// mcp.upstream_check_interval) and keeps what each listing found, as do
// the listings that serve callers: whether the upstream answered, when it
// last did, and how its tools differ from the tool lock. States returns it
// for whoever shows it; with a Registerer it is exported as the
// usher_upstream_* gauges. The catalog counts its upstream calls' failures
// by kind (CallBusy ... CallUpstreamError) and times them
// (CatalogOptions.Registerer).
package mcpserver

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// Action is what a Call asks to do; its values are the policy's Cedar
// actions.
type Action string

// The actions.
const (
	// ActionCallTool is a tools/call; a Call with no Action is one.
	ActionCallTool Action = "call_tool"
	// ActionReadResource is a resources/read; Call.Tool is the URI.
	ActionReadResource Action = "read_resource"
	// ActionGetPrompt is a prompts/get; Call.Tool is the prompt's name and
	// Call.Arguments its arguments.
	ActionGetPrompt Action = "get_prompt"
	// ActionComplete is a completion/complete; Call.Tool is the prompt's
	// name or the resource template's URI, as Call.Ref says.
	ActionComplete Action = "complete"
)

// The references of a completion (Call.Ref), as MCP names them.
const (
	RefPrompt   = "ref/prompt"
	RefResource = "ref/resource"
)

// The audit kinds of requests other than tool calls that named nothing the
// catalog offers; their other records share the kinds of tool calls, with
// Event.Action set.
const (
	// KindUnknownResource: a resources/read, or the completion of a
	// template, named no resource of the catalog.
	KindUnknownResource = "resource_unknown"
	// KindUnknownPrompt: a prompts/get, or the completion of a prompt's
	// argument, named no prompt of the catalog.
	KindUnknownPrompt = "prompt_unknown"
)

// JSON-RPC error codes of the requests other than tool calls, whose
// refusals cannot be results the model reads.
const (
	// CodeResourceNotFound is MCP's code for an unknown resource.
	CodeResourceNotFound = -32002
	// CodeDenied: the policy denies the request, or a person denied its
	// approval (then the error's data is as CodeApprovalRequired's).
	CodeDenied = -32010
	// CodeApprovalRequired: the request needs a person's approval first;
	// the error's data is {"usher/approval": {"id", "status", "url"}}.
	CodeApprovalRequired = -32011
)

// maxCompletionValue bounds the value a completion is asked for.
const maxCompletionValue = 1024

// governed is a request other than a tool call, on its way through the
// enforcement point.
type governed struct {
	call Call
	ev   Event
	// in is what the request brings of multi round-trip requests.
	in roundRequest
	// run asks the upstream, on the caller's session; a result that asks
	// for input comes with its inputAsk.
	run func(ctx context.Context) (mcp.Result, *inputAsk, error)
	// incomplete is the result that passes input requests on, with
	// Usher's requestState.
	incomplete func(requests mcp.InputRequestMap, state string) (mcp.Result, error)
	// approve answers an Approve instead of an approval request; nil
	// requests one.
	approve func() mcp.Result
}

// baseCall and baseEvent are a Call and an Event of the caller.
func baseCall(c Caller, a Action) Call {
	return Call{Principal: c.Subject, Tenant: c.Tenant, Groups: c.Groups, ClientID: c.ClientID, RunID: c.RunID, TokenID: c.TokenID, Action: a}
}

func baseEvent(c Caller, a Action, name string) Event {
	return Event{Principal: c.Subject, ClientID: c.ClientID, TokenID: c.TokenID, RunID: c.RunID, Action: a, Tool: truncate(name, maxURI)}
}

// govern is the enforcement point of a request other than a tool call, top
// to bottom like callTool: the verdict (an error denies), recorded before
// anything else (no audit, no request); Deny refuses, Approve uses a
// matching approval or requests one, Allow (or a used approval) asks the
// upstream, and how that ended is recorded after the answer.
func (s *Server) govern(ctx context.Context, g governed) (mcp.Result, error) {
	start := s.opts.Now()
	s.calls.Add(1)
	defer s.calls.Add(-1)
	v, err := s.opts.Decider.Decide(ctx, g.call)
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: the policy failed; denying", "action", g.call.Action, "name", g.ev.Tool, "err", err)
		v = Verdict{Decision: Deny, Reasons: []string{"the policy could not be evaluated"}}
	}
	ev := g.ev
	ev.Decision, ev.PolicyIDs, ev.PolicyHash, ev.Reasons = v.Decision, v.PolicyIDs, v.PolicyHash, v.Reasons
	if err := s.recordErr(ctx, ev, KindDecision); err != nil {
		return nil, failedError(err)
	}
	var r *round
	if v.Decision == Allow || v.Decision == Approve {
		var refusal *inputStateError
		if r, refusal = s.openRound(g.call, "", g.in); refusal != nil {
			if err := s.refuseRound(ctx, ev, refusal); err != nil {
				return nil, failedError(err)
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: refusal.text}
		}
		if r != nil {
			ctx = context.WithValue(ctx, roundKey{}, r)
		}
	}
	switch v.Decision {
	case Allow:
	case Approve:
		if g.approve != nil {
			return g.approve(), nil
		}
		a, _, _, err := s.opts.Approvals.Consume(ctx, approvalBinding(g.call, v), nil, s.stamp(ev, KindApprovalConsumed))
		switch {
		case errors.Is(err, ErrNotApproved):
			return nil, s.requestFeatureApproval(ctx, ev, g.call, v)
		case err != nil:
			s.log.ErrorContext(ctx, "mcpserver: using an approval failed", "action", g.call.Action, "name", ev.Tool, "err", err)
			return nil, failedError(err)
		}
		ev.ApprovalID = a.ID
	default:
		msg := "The policy denies this request."
		if len(v.PolicyIDs) > 0 {
			msg += " Policies: " + strings.Join(v.PolicyIDs, ", ") + "."
		}
		return nil, &jsonrpc.Error{Code: CodeDenied, Message: msg}
	}

	if r != nil {
		s.recordAnswers(ctx, ev, r)
	}
	res, ask, err := g.run(ctx)
	if err == nil && ask != nil {
		// The round asks the caller for input: the request goes on with
		// the caller's retry, unless the requests cannot be passed on.
		var out mcp.Result
		if out, err = s.askFeatureInput(ctx, g, ev, r, ask, start); err == nil {
			return out, nil
		}
		s.log.WarnContext(ctx, "mcpserver: an upstream's request for input was not passed on", "action", g.call.Action, "name", ev.Tool, "err", err)
		// A request held open for the round asks nothing more of anyone.
		s.catalog.held.cancel(ask.state)
		msg := "The upstream server asked for input that could not be passed on: " + err.Error() + "."
		if errors.Is(err, store.ErrUnavailable) {
			msg = inputUnavailableRequestText
		}
		err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
	}
	after := context.WithoutCancel(ctx)
	ev.Latency = s.opts.Now().Sub(start)
	kind := KindExecuted
	ev.Outcome = OutcomeSucceeded
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		// The upstream's refusal, in its own terms (not found, invalid
		// arguments), but never its words at length.
		kind, ev.Outcome = KindExecutionFailed, OutcomeFailed
		err = upstreamRefusal(rpcErr)
	case errors.Is(err, errStreamEnded):
		kind, ev.Outcome = KindExecutionFailed, OutcomeFailed
		ev.Reasons = append(slices.Clip(ev.Reasons), streamEndedReason)
		s.log.WarnContext(after, "mcpserver: an upstream closed its response stream without answering", "action", g.call.Action, "name", ev.Tool, "err", err)
		err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The upstream server closed its response stream without answering, and the stream could not be resumed."}
	case err != nil:
		kind, ev.Outcome = KindExecutionFailed, OutcomeFailed
		s.log.ErrorContext(after, "mcpserver: an upstream request failed", "action", g.call.Action, "name", ev.Tool, "err", err)
		err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The upstream server failed. The error has been logged."}
	}
	ev = s.stamp(ev, kind)
	after = s.outcomeContext(after)
	s.outcomes.write(after, "", func(ctx context.Context, lost func()) {
		s.recordOutcome(ctx, ev, "", nil, lost)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// askFeatureInput passes on the input requests of a round of g (see
// askForInput) and returns the incomplete result that carries them.
func (s *Server) askFeatureInput(ctx context.Context, g governed, ev Event, r *round, ask *inputAsk, start time.Time) (mcp.Result, error) {
	if r == nil || g.incomplete == nil {
		return nil, errors.New("the caller does not take requests for input")
	}
	state, err := s.askForInput(ctx, g.call, ev, "", r, ask, start)
	if err != nil {
		return nil, err
	}
	return g.incomplete(ask.requests, state)
}

// approvalBinding is the binding of an approval of a request other than a
// tool call: its name qualified by its action, so that no approval of one
// kind of request can be used for another of the same name.
func approvalBinding(c Call, v Verdict) (b store.ApprovalBinding) {
	b = binding(c, v)
	b.Tool = string(c.Action) + ":" + c.Tool
	return b
}

// requestFeatureApproval records (or finds) the pending approval of a
// request and returns the error that tells the caller about it.
func (s *Server) requestFeatureApproval(ctx context.Context, ev Event, call Call, v Verdict) error {
	a, err := s.opts.Approvals.Request(ctx, ApprovalRequest{
		Binding: approvalBinding(call, v), Tenant: call.Tenant, Arguments: call.Arguments, PolicyIDs: v.PolicyIDs,
		Reason: strings.Join(v.Reasons, "; "), Approvers: v.Approvers,
	})
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: requesting an approval failed", "action", call.Action, "name", ev.Tool, "err", err)
		return failedError(err)
	}
	ev.ApprovalID = a.ID
	url := s.opts.ApprovalURL(a.ID)
	data, _ := json.Marshal(map[string]any{MetaApproval: map[string]any{"id": a.ID, "status": string(a.Status), "url": url}})
	if a.Status == store.ApprovalDenied {
		s.record(ctx, ev, KindApprovalDenied)
		return &jsonrpc.Error{Code: CodeDenied, Data: data, Message: fmt.Sprintf(
			"A person denied this request (approval %s, %s); nothing was sent upstream.%s Sending it again asks for a new approval.", a.ID, url, theirReason(a))}
	}
	s.record(ctx, ev, KindApprovalRequired)
	return &jsonrpc.Error{Code: CodeApprovalRequired, Data: data, Message: fmt.Sprintf(
		"This request needs a person's approval first. Approval %s is %s: ask the user to review it at %s, then send exactly the same request again.", a.ID, a.Status, url)}
}

// internalError is the error of a failure on Usher's side; the detail is
// in the log.
func internalError() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The request could not be processed because of an error on the server. It has been logged; nothing was sent upstream."}
}

// unavailableRequestText is the message of a request other than a tool
// call not sent upstream because the database was out of reach
// (store.ErrUnavailable): it may be sent again shortly.
const unavailableRequestText = "The request was not sent upstream: " + outageText

// inputUnavailableRequestText is the message of a request other than a
// tool call whose upstream asked for input that was not passed on because
// the database was out of reach (see inputUnavailableText).
const inputUnavailableRequestText = "The upstream server asked for input that was not passed on, as Usher cannot reach its database just now. " +
	"Nothing more of this request runs. Send it again in a moment to start over."

// failedError is the error of a request other than a tool call that
// failed on Usher's side before anything was sent upstream, for err:
// unavailableRequestText when the database was out of reach, else
// internalError; the code is the same.
func failedError(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: unavailableRequestText}
	}
	return internalError()
}

// shown reports whether a listing decision shows the item; a failing one
// hides it.
func (s *Server) shown(ctx context.Context, call Call) bool {
	call.Listing = true
	v, err := s.opts.Decider.Decide(ctx, call)
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: the policy failed while listing; hiding the item", "action", call.Action, "name", call.Tool, "err", err)
		return false
	}
	return v.Decision == Allow || v.Decision == Approve
}

// listResources lists the resources the Decider does not deny the caller
// reading, in URI order.
func (s *Server) listResources(ctx context.Context, c Caller) *mcp.ListResourcesResult {
	res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, Cacheable: mcp.Cacheable{CacheScope: "private"}}
	for _, r := range s.readable(ctx, c, s.catalog.snapshot(ctx).resources) {
		res.Resources = append(res.Resources, r.listed)
	}
	return res
}

// listResourceTemplates lists the templates the Decider does not deny the
// caller reading from (the template's own URI template stands for the
// URIs it matches), in order.
func (s *Server) listResourceTemplates(ctx context.Context, c Caller) *mcp.ListResourceTemplatesResult {
	res := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}, Cacheable: mcp.Cacheable{CacheScope: "private"}}
	for _, t := range s.readable(ctx, c, s.catalog.snapshot(ctx).templates) {
		res.ResourceTemplates = append(res.ResourceTemplates, t.template)
	}
	return res
}

// readable returns the resources or templates of list that the Decider
// does not deny the caller reading.
func (s *Server) readable(ctx context.Context, c Caller, list []*resource) []*resource {
	var out []*resource
	for _, r := range list {
		call := baseCall(c, ActionReadResource)
		call.Tool, call.Server, call.DefinitionHash = r.uri, r.upstream.cfg.Name, r.hash
		if r.template != nil {
			call.Template = r.uri
		}
		if s.shown(ctx, call) {
			out = append(out, r)
		}
	}
	return out
}

// listPrompts lists the prompts the Decider does not deny the caller, in
// name order.
func (s *Server) listPrompts(ctx context.Context, c Caller) *mcp.ListPromptsResult {
	res := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}, Cacheable: mcp.Cacheable{CacheScope: "private"}}
	for _, p := range s.catalog.snapshot(ctx).prompts {
		call := baseCall(c, ActionGetPrompt)
		call.Tool, call.Server, call.DefinitionHash = p.name, p.upstream.cfg.Name, p.hash
		if s.shown(ctx, call) {
			res.Prompts = append(res.Prompts, p.listed)
		}
	}
	return res
}

// readResource is the enforcement point of resources/read.
func (s *Server) readResource(ctx context.Context, c Caller, p *mcp.ReadResourceParams, caps *mcp.ClientCapabilities) (mcp.Result, error) {
	if p == nil {
		p = &mcp.ReadResourceParams{}
	}
	uri := p.URI
	ev := baseEvent(c, ActionReadResource, uri)
	if !exposedURI(uri) {
		s.record(ctx, ev, KindUnknownResource)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("A resource URI is 1 to %d bytes without control characters.", maxURI)}
	}
	t, ok := s.catalog.lookupResource(ctx, uri)
	if !ok {
		s.record(ctx, ev, KindUnknownResource)
		return nil, resourceNotFound(p.Meta, uri)
	}
	ev.Server, ev.DefinitionHash = t.upstream.cfg.Name, t.hash
	call := baseCall(c, ActionReadResource)
	call.Tool, call.Template, call.Server, call.DefinitionHash = uri, t.template, t.upstream.cfg.Name, t.hash
	call.Arguments, call.ArgumentsHash, _ = s.canonicalArguments(nil)
	ev.ArgumentsHash = call.ArgumentsHash
	modern := sessionless(p.Meta)
	g := governed{call: call, ev: ev, in: newRoundRequest(p.Meta, caps, p.InputResponses, p.RequestState)}
	g.incomplete = func(requests mcp.InputRequestMap, state string) (mcp.Result, error) {
		return incompleteFeature(&mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{}}, requests, state)
	}
	g.run = requestRun(t.upstream, ActionReadResource, uri, heldResult[mcp.ReadResourceResult], func(ctx context.Context, cs *mcp.ClientSession) (mcp.Result, error) {
		params := &mcp.ReadResourceParams{URI: t.orig}
		params.Meta, params.InputResponses, params.RequestState = requestParams(ctx)
		res, err := cs.ReadResource(ctx, params)
		if err != nil {
			return nil, err
		}
		if ask := askOf(res.NeedsInput(), res.InputRequests, res.RequestState); ask != nil {
			return roundResult(ask), nil
		}
		out := &mcp.ReadResourceResult{Meta: upstreamMeta(res.Meta), Cacheable: mcp.Cacheable{CacheScope: "private"}, Contents: []*mcp.ResourceContents{}}
		prefix := t.upstream.cfg.prefix()
		for _, rc := range res.Contents {
			if rc == nil {
				continue
			}
			cp := *rc
			cp.URI = prefix + rc.URI
			out.Contents = append(out.Contents, &cp)
		}
		return withResultType(out, modern), nil
	})
	return s.govern(ctx, g)
}

// getPrompt is the enforcement point of prompts/get.
func (s *Server) getPrompt(ctx context.Context, c Caller, p *mcp.GetPromptParams, caps *mcp.ClientCapabilities) (mcp.Result, error) {
	if p == nil {
		p = &mcp.GetPromptParams{}
	}
	name := p.Name
	ev := baseEvent(c, ActionGetPrompt, name)
	pr, ok := s.catalog.lookupPrompt(ctx, name)
	if !ok {
		s.record(ctx, ev, KindUnknownPrompt)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("There is no prompt named %.64q.", name)}
	}
	ev.Server, ev.DefinitionHash = pr.upstream.cfg.Name, pr.hash
	raw, err := json.Marshal(p.Arguments)
	if err != nil {
		return nil, internalError() // a map of strings always encodes
	}
	args, argsHash, err := s.canonicalArguments(raw)
	if err != nil {
		s.record(ctx, ev, KindInvalidArguments)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "The arguments are not valid: " + argumentProblem(err)}
	}
	ev.ArgumentsHash = argsHash
	call := baseCall(c, ActionGetPrompt)
	call.Tool, call.Server, call.DefinitionHash, call.Arguments, call.ArgumentsHash = pr.name, pr.upstream.cfg.Name, pr.hash, args, argsHash
	modern := sessionless(p.Meta)
	g := governed{call: call, ev: ev, in: newRoundRequest(p.Meta, caps, p.InputResponses, p.RequestState)}
	g.incomplete = func(requests mcp.InputRequestMap, state string) (mcp.Result, error) {
		return incompleteFeature(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{}}, requests, state)
	}
	g.run = requestRun(pr.upstream, ActionGetPrompt, name, heldResult[mcp.GetPromptResult], func(ctx context.Context, cs *mcp.ClientSession) (mcp.Result, error) {
		params := &mcp.GetPromptParams{Name: pr.orig, Arguments: p.Arguments}
		params.Meta, params.InputResponses, params.RequestState = requestParams(ctx)
		res, err := cs.GetPrompt(ctx, params)
		if err != nil {
			return nil, err
		}
		if ask := askOf(res.NeedsInput(), res.InputRequests, res.RequestState); ask != nil {
			return roundResult(ask), nil
		}
		out := &mcp.GetPromptResult{Meta: upstreamMeta(res.Meta), Description: res.Description, Messages: []*mcp.PromptMessage{}}
		prefix := pr.upstream.cfg.prefix()
		for _, m := range res.Messages {
			if m == nil {
				continue
			}
			out.Messages = append(out.Messages, &mcp.PromptMessage{Role: m.Role, Content: namespaced(m.Content, prefix)})
		}
		return withResultType(out, modern), nil
	})
	return s.govern(ctx, g)
}

// requestRun is the run of a governed request that may ask the caller for
// input, sent to u as send sends it (see upstream.request): its result,
// or the round that asks.
func requestRun(u *upstream, action Action, name string, decode heldDecoder, send func(context.Context, *mcp.ClientSession) (mcp.Result, error)) func(context.Context) (mcp.Result, *inputAsk, error) {
	return func(ctx context.Context) (mcp.Result, *inputAsk, error) {
		res, err := u.request(ctx, action, name, send, decode)
		if err != nil {
			return nil, nil, err
		}
		if ask := heldAskOf(res); ask != nil {
			return nil, ask, nil
		}
		return res, nil, nil
	}
}

// namespaced returns content with the URIs it names put in the upstream's
// namespace.
func namespaced(content mcp.Content, prefix string) mcp.Content {
	if prefix == "" {
		return content
	}
	switch c := content.(type) {
	case *mcp.EmbeddedResource:
		if c.Resource != nil {
			r := *c.Resource
			r.URI = prefix + r.URI
			cp := *c
			cp.Resource = &r
			return &cp
		}
	case *mcp.ResourceLink:
		cp := *c
		cp.URI = prefix + c.URI
		return &cp
	}
	return content
}

// complete is the enforcement point of completion/complete. A completion
// is never worth a person's approval: unless the policy allows it, it
// answers no values (and a denied one is refused).
func (s *Server) complete(ctx context.Context, c Caller, p *mcp.CompleteParams) (mcp.Result, error) {
	if p == nil || p.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "A completion names a reference."}
	}
	if len(p.Argument.Value) > maxCompletionValue || len(p.Argument.Name) > 128 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("A completion's argument name is at most 128 bytes and its value at most %d.", maxCompletionValue)}
	}
	call := baseCall(c, ActionComplete)
	call.Ref = p.Ref.Type
	var u *upstream
	ref := *p.Ref
	switch p.Ref.Type {
	case RefPrompt:
		ev := baseEvent(c, ActionComplete, p.Ref.Name)
		pr, ok := s.catalog.lookupPrompt(ctx, p.Ref.Name)
		if !ok {
			s.record(ctx, ev, KindUnknownPrompt)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("There is no prompt named %.64q.", p.Ref.Name)}
		}
		u, ref.Name = pr.upstream, pr.orig
		call.Tool, call.Server, call.DefinitionHash = pr.name, u.cfg.Name, pr.hash
	case RefResource:
		ev := baseEvent(c, ActionComplete, p.Ref.URI)
		t, ok := s.catalog.lookupTemplate(ctx, p.Ref.URI)
		if !ok {
			s.record(ctx, ev, KindUnknownResource)
			return nil, &jsonrpc.Error{Code: CodeResourceNotFound, Message: fmt.Sprintf("There is no resource template %.128q.", p.Ref.URI)}
		}
		u, ref.URI = t.upstream, t.orig
		call.Tool, call.Template, call.Server, call.DefinitionHash = t.uri, t.uri, u.cfg.Name, t.hash
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "A completion's reference is ref/prompt or ref/resource."}
	}
	ev := baseEvent(c, ActionComplete, call.Tool)
	ev.Server, ev.DefinitionHash = call.Server, call.DefinitionHash
	in := map[string]any{"argument": map[string]any{"name": p.Argument.Name, "value": p.Argument.Value}}
	if p.Context != nil && len(p.Context.Arguments) > 0 {
		in["context"] = map[string]any{"arguments": p.Context.Arguments}
	}
	raw, _ := json.Marshal(in) // strings always encode
	args, argsHash, err := s.canonicalArguments(raw)
	if err != nil {
		s.record(ctx, ev, KindInvalidArguments)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "The arguments are not valid: " + argumentProblem(err)}
	}
	call.Arguments, call.ArgumentsHash, ev.ArgumentsHash = args, argsHash, argsHash
	empty := func() mcp.Result {
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	}
	if !s.catalog.completes(ctx, u) {
		// The upstream completes nothing: nothing is asked of it, so
		// there is nothing to decide.
		return empty(), nil
	}
	return s.govern(ctx, governed{call: call, ev: ev, approve: empty, run: func(ctx context.Context) (mcp.Result, *inputAsk, error) {
		var res *mcp.CompleteResult
		err := u.session(ctx, func(ctx context.Context, cs *mcp.ClientSession) (err error) {
			res, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &ref, Argument: p.Argument, Context: p.Context})
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		out := &mcp.CompleteResult{Meta: upstreamMeta(res.Meta), Completion: res.Completion}
		if out.Completion.Values == nil {
			out.Completion.Values = []string{}
		}
		return out, nil, nil
	}})
}

// upstreamMeta returns an upstream result's _meta without the keys that
// are Usher's or that describe the upstream hop (see upstream.caller).
func upstreamMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := maps.Clone(m)
	for _, k := range slices.Collect(maps.Keys(out)) {
		if strings.HasPrefix(k, "usher/") || strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(out, k)
		}
	}
	return out
}

// withResultType returns res with "resultType": "complete" when the caller
// speaks protocol 2026-07-28, as completeResult does for tools/call: the
// SDK's field is unexported, so the result passes through its decoding.
func withResultType[T any, P interface {
	*T
	mcp.Result
}](res P, modern bool) P {
	if !modern {
		return res
	}
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return res
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	if b, err = json.Marshal(m); err != nil {
		return res
	}
	out := P(new(T))
	if json.Unmarshal(b, out) != nil {
		return res
	}
	return out
}

// KindSubscribed: a stateful session subscribed to a resource's updates
// (resources/subscribe), with the listing decision that let it (one that
// would hide the resource refuses the subscription).
const KindSubscribed = "resource_subscribed"

// subscribeResource is the SDK's handler of resources/subscribe, for a
// stateful endpoint. An update tells only that the resource changed; its
// content is read with resources/read, through the enforcement point. So
// a subscription is allowed when the resource would be listed to the
// caller, and is audited.
func (s *Server) subscribeResource(ctx context.Context, req *mcp.SubscribeRequest) error {
	c, ok := CallerFromContext(ctx)
	if !ok || req.Params == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	uri := req.Params.URI
	ev := baseEvent(c, ActionReadResource, uri)
	if !exposedURI(uri) {
		s.record(ctx, ev, KindUnknownResource)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("A resource URI is 1 to %d bytes without control characters.", maxURI)}
	}
	t, ok := s.catalog.lookupResource(ctx, uri)
	if !ok {
		s.record(ctx, ev, KindUnknownResource)
		return &jsonrpc.Error{Code: CodeResourceNotFound, Message: fmt.Sprintf("There is no resource %.128q.", uri)}
	}
	ev.Server, ev.DefinitionHash = t.upstream.cfg.Name, t.hash
	call := baseCall(c, ActionReadResource)
	call.Tool, call.Template, call.Server, call.DefinitionHash, call.Listing = uri, t.template, t.upstream.cfg.Name, t.hash, true
	v, err := s.opts.Decider.Decide(ctx, call)
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: the policy failed; denying", "action", "subscribe", "name", ev.Tool, "err", err)
		v = Verdict{Decision: Deny, Reasons: []string{"the policy could not be evaluated"}}
	}
	ev.Decision, ev.PolicyIDs, ev.PolicyHash, ev.Reasons = v.Decision, v.PolicyIDs, v.PolicyHash, v.Reasons
	if err := s.recordErr(ctx, ev, KindSubscribed); err != nil {
		return failedError(err)
	}
	if v.Decision != Allow && v.Decision != Approve {
		return &jsonrpc.Error{Code: CodeDenied, Message: "The policy denies this resource."}
	}
	err = s.subscribe(ctx, req.Session, c, t)
	switch {
	case errors.Is(err, errSessionSubscriptions):
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("This session is subscribed to too many resources (at most %d). Unsubscribe from one first.", maxSessionSubscriptions)}
	case errors.Is(err, errTooManySubscriptions):
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Too many resources are subscribed to on this server. Try again later."}
	case err != nil:
		s.log.ErrorContext(ctx, "mcpserver: subscribing at the upstream failed", "upstream", t.upstream.cfg.Name, "uri", uri, "err", err)
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The upstream server could not subscribe to the resource. The error has been logged."}
	}
	return nil
}

// unsubscribeResource is the SDK's handler of resources/unsubscribe: the
// session is told of the resource no more, and Usher unsubscribes upstream
// when no session is subscribed to it any more.
func (s *Server) unsubscribeResource(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	if req.Params != nil && req.Session != nil {
		s.unsubscribe(ctx, req.Session, req.Params.URI)
	}
	return nil
}

// resourceUpdated tells the sessions subscribed to uri that it changed
// (each only while it may still see it: see filterUpdates).
func (s *Server) resourceUpdated(uri string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.sdk.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		s.log.Warn("mcpserver: passing on a resource update failed", "uri", uri, "err", err)
	}
}

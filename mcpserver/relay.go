//lint:file-ignore SA1019 Sampling is deprecated as of protocol 2026-07-28 (SEP-2577) but works during its deprecation window, and upstreams of the older protocols use it: Usher relays it while they do.

package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/jcs"
)

// The audit kinds of the requests an upstream sends to the caller during a
// tool call (see CatalogOptions.RelayRequests). Event.Tool is the tool
// being called, Event.ArgumentsHash the SHA-256 of the request's canonical
// JSON; the answer's content is never recorded.
const (
	// KindSamplingRequested: an upstream asked the caller's model for a
	// completion (sampling/createMessage), relayed to the caller.
	KindSamplingRequested = "sampling_requested"
	// KindElicitationRequested: an upstream asked the caller's user for
	// input (elicitation/create), relayed to the caller.
	KindElicitationRequested = "elicitation_requested"
	// KindRootsRequested: an upstream asked the caller for its roots
	// (roots/list), relayed to the caller.
	KindRootsRequested = "roots_requested"
	// KindRequestAnswered: the caller answered a relayed request (Outcome
	// succeeded, with the elicitation's action in Reasons), or did not
	// (Outcome failed).
	KindRequestAnswered = "request_answered"
	// KindRequestRefused: a request from an upstream was not relayed (the
	// caller does not offer it, or it belongs to no single call).
	KindRequestRefused = "request_refused"
)

// relayTarget returns the one call in flight on the session, to whose
// caller a request from the upstream goes. Over one session a subject may
// have several calls in flight, and the SDK does not say which of them a
// request belongs to: then none gets it.
func (c *conn) relayTarget() (*inflight, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inflight) != 1 {
		return nil, errors.New("a request is relayed to the caller only while exactly one call of the caller's is in flight on this upstream session")
	}
	for _, f := range c.inflight {
		return f, nil
	}
	return nil, nil // unreachable
}

// relay audits a request from the upstream, hands it to ask when the
// caller offers it (declared says so), and audits the answer: no audit
// record, no relay.
func relay[R any](c *conn, kind string, params any, declared func(*mcp.ClientCapabilities) bool,
	ask func(context.Context, *mcp.ServerSession) (R, error), answered func(R) string) (R, error) {
	var zero R
	f, err := c.relayTarget()
	if err != nil {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	ev := f.event()
	if b, err := jcs.Marshal(params); err == nil {
		sum := sha256.Sum256(b)
		ev.ArgumentsHash = hex.EncodeToString(sum[:])
	}
	var caps *mcp.ClientCapabilities
	if f.session != nil && f.session.InitializeParams() != nil {
		caps = f.session.InitializeParams().Capabilities
	}
	if f.record == nil || f.session == nil || caps == nil || !declared(caps) {
		ev.Reasons = []string{kind + ": the caller does not offer it"}
		if f.record != nil {
			f.record(f.ctx, ev, KindRequestRefused)
		}
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the caller does not offer this"}
	}
	if !f.record(f.ctx, ev, kind) {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the request could not be recorded; it was not relayed"}
	}
	res, err := ask(f.ctx, f.session)
	if err != nil {
		ev.Outcome, ev.Reasons = OutcomeFailed, []string{kind + ": the caller gave no answer"}
	} else {
		ev.Outcome, ev.Reasons = OutcomeSucceeded, []string{answered(res)}
	}
	f.record(context.WithoutCancel(f.ctx), ev, KindRequestAnswered)
	return res, err
}

// relaySampling passes an upstream's sampling/createMessage to the caller.
func (c *conn) relaySampling(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	return relay(c, KindSamplingRequested, req.Params,
		func(caps *mcp.ClientCapabilities) bool { return caps.Sampling != nil },
		func(ctx context.Context, ss *mcp.ServerSession) (*mcp.CreateMessageResult, error) {
			return ss.CreateMessage(ctx, req.Params)
		},
		func(*mcp.CreateMessageResult) string { return KindSamplingRequested + ": answered" })
}

// relayElicitation passes an upstream's elicitation/create to the caller.
// It never stands for an approval: a call that needed one had it before
// it ran.
func (c *conn) relayElicitation(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return relay(c, KindElicitationRequested, req.Params,
		func(caps *mcp.ClientCapabilities) bool { return caps.Elicitation != nil },
		func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ElicitResult, error) {
			return ss.Elicit(ctx, req.Params)
		},
		func(r *mcp.ElicitResult) string {
			return KindElicitationRequested + ": the user chose " + truncate(r.Action, 16)
		})
}

// relayRoots passes an upstream's roots/list to the caller.
func (c *conn) relayRoots(_ context.Context, req *mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	return relay(c, KindRootsRequested, req.Params,
		func(caps *mcp.ClientCapabilities) bool { return caps.RootsV2 != nil },
		func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ListRootsResult, error) {
			return ss.ListRoots(ctx, req.Params)
		},
		func(r *mcp.ListRootsResult) string {
			return KindRootsRequested + ": answered with " + strconv.Itoa(len(r.Roots)) + " roots"
		})
}

// handleRequests sets the SDK handlers that relay an upstream's requests
// to the caller, which makes the session offer sampling and elicitation,
// and roots when offers names them (the caller's session declared roots,
// see relayOffers). It returns the session's handler of roots/list, or
// nil.
func (c *conn) handleRequests(o *mcp.ClientOptions, offers string) rootsHandler {
	o.CreateMessageHandler = c.relaySampling
	o.ElicitationHandler = c.relayElicitation
	if !strings.Contains(offers, "roots") {
		return nil
	}
	o.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	return c.relayRoots
}

// relayOffers is what an upstream session that relays requests to a
// stateful caller offers beyond sampling and elicitation: roots, when
// the caller's session declared them.
func relayOffers(ds downstream) string {
	if ds.session == nil {
		return ""
	}
	if p := ds.session.InitializeParams(); p != nil && p.Capabilities != nil && p.Capabilities.RootsV2 != nil {
		return "roots"
	}
	return ""
}

// rootsHandler answers an upstream's roots/list on Usher's session with
// it, by asking the caller.
type rootsHandler func(context.Context, *mcp.ListRootsRequest) (*mcp.ListRootsResult, error)

// elicitHandler answers an upstream's elicitation/create on Usher's
// session with it, by asking the caller.
type elicitHandler func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)

// upstreamRequests is the receiving middleware of an upstream session for
// the requests Usher passes on as they came rather than as the SDK's
// client would answer them:
//
//   - roots/list goes to roots, or with roots nil is refused as a method
//     the session does not offer: the SDK's client would answer it
//     itself, from a list of its own, which Usher leaves empty;
//   - elicitation/create goes to elicit unchecked when the session offers
//     elicitation (elicit non-nil). The SDK's client checks the requested
//     schema against its own reading of the forms the specification
//     allows, and refuses some that a client renders (a multi-select
//     whose items carry both "type" and "anyOf"); the two ends check the
//     schema and the answer, each as its SDK does, and Usher, which
//     renders nothing, is no stricter than they are.
func upstreamRequests(roots rootsHandler, elicit elicitHandler) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.ListRootsRequest:
				if method != "roots/list" {
					break
				}
				if roots == nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "roots/list: this client offers no roots"}
				}
				return result(roots(ctx, r))
			case *mcp.ElicitRequest:
				if method == "elicitation/create" && elicit != nil && r.Params != nil {
					return result(elicit(ctx, r))
				}
			}
			return next(ctx, method, req)
		}
	}
}

// result is a handler's answer as a middleware returns it: no result
// (rather than a typed nil) with an error.
func result[R mcp.Result](r R, err error) (mcp.Result, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// relayMeta sets on the _meta of a request to an upstream of protocol
// 2026-07-28, whose input requests the SDK meets itself, the capabilities
// an upstream session that relays requests offers it: sampling and
// elicitation (relayed through the session's handlers), and no roots,
// which the SDK would answer from its own empty list.
func relayMeta(m mcp.Meta) mcp.Meta {
	if m == nil {
		m = mcp.Meta{}
	}
	m[mcp.MetaKeyClientCapabilities] = map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{"form": map[string]any{}}}
	return m
}

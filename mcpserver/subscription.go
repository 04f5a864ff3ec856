package mcpserver

import (
	"context"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A stateful endpoint takes resources/subscribe from its sessions, each
// for its caller. Usher is subscribed upstream (on the catalog's session)
// to a resource while at least one session is subscribed to it: the first
// subscription subscribes upstream, and the last one to go (an
// unsubscribe, or its session's end) unsubscribes. An update the upstream
// sends reaches each session subscribed to the resource whose caller may
// still see it: the policy is asked again for each (a listing decision,
// as for the subscription), so that a caller the policy no longer lets
// read the resource, or a resource no longer offered, is told nothing.

// maxSessionSubscriptions bounds the resources one session subscribes to.
const maxSessionSubscriptions = 128

// errSessionSubscriptions refuses a session's subscription beyond
// maxSessionSubscriptions.
var errSessionSubscriptions = errors.New("this session is subscribed to too many resources")

// subscriptions are the stateful sessions' subscriptions to resources, by
// exposed URI.
type subscriptions struct {
	// op serializes the changes that subscribe or unsubscribe upstream,
	// across their requests to the upstream; mu guards the maps.
	op sync.Mutex
	mu sync.Mutex
	// byURI holds, for each exposed URI, the sessions subscribed to it,
	// each with its caller and the resource as it was subscribed to.
	byURI map[string]map[*mcp.ServerSession]subscriber
	// bySession holds the URIs each session is subscribed to; a session
	// in it has a goroutine that waits for its end (see watchEnd).
	bySession map[*mcp.ServerSession]map[string]bool
	watchers  sync.WaitGroup
}

// subscriber is one session's subscription to a resource.
type subscriber struct {
	caller Caller
	target readTarget
}

func newSubscriptions() *subscriptions {
	return &subscriptions{byURI: map[string]map[*mcp.ServerSession]subscriber{}, bySession: map[*mcp.ServerSession]map[string]bool{}}
}

// subscribe records that ss, for c, is subscribed to t, and subscribes
// the catalog upstream when it is the first session to be (or when the
// catalog's session to the upstream is a new one).
func (s *Server) subscribe(ctx context.Context, ss *mcp.ServerSession, c Caller, t readTarget) error {
	subs := s.subs
	subs.op.Lock()
	defer subs.op.Unlock()
	subs.mu.Lock()
	if mine := subs.bySession[ss]; !mine[t.uri] && len(mine) >= maxSessionSubscriptions {
		subs.mu.Unlock()
		return errSessionSubscriptions
	}
	subs.mu.Unlock()
	// Subscribing is idempotent at the catalog: once per resource and
	// upstream session.
	if err := s.catalog.subscribe(ctx, t); err != nil {
		return err
	}
	subs.mu.Lock()
	defer subs.mu.Unlock()
	if subs.byURI[t.uri] == nil {
		subs.byURI[t.uri] = map[*mcp.ServerSession]subscriber{}
	}
	subs.byURI[t.uri][ss] = subscriber{caller: c, target: t}
	if subs.bySession[ss] == nil {
		subs.bySession[ss] = map[string]bool{}
		subs.watchers.Go(func() {
			_ = ss.Wait()
			s.sessionEnded(ss)
		})
	}
	subs.bySession[ss][t.uri] = true
	return nil
}

// unsubscribe removes the subscription of ss to uri, and unsubscribes the
// catalog upstream when no session is subscribed to the resource any more:
// also when ctx has ended, as a subscriptions/listen request's has when
// the SDK unsubscribes its resources.
func (s *Server) unsubscribe(ctx context.Context, ss *mcp.ServerSession, uri string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
	defer cancel()
	subs := s.subs
	subs.op.Lock()
	defer subs.op.Unlock()
	if t, last := subs.remove(ss, uri); last {
		s.catalog.unsubscribe(ctx, t)
	}
}

// sessionEnded removes the subscriptions of a session that ended.
func (s *Server) sessionEnded(ss *mcp.ServerSession) {
	subs := s.subs
	subs.op.Lock()
	defer subs.op.Unlock()
	subs.mu.Lock()
	var uris []string
	for uri := range subs.bySession[ss] {
		uris = append(uris, uri)
	}
	subs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	for _, uri := range uris {
		if t, last := subs.remove(ss, uri); last {
			s.catalog.unsubscribe(ctx, t)
		}
	}
	subs.mu.Lock()
	delete(subs.bySession, ss)
	subs.mu.Unlock()
}

// remove removes the subscription of ss to uri, and reports whether it
// was the resource's last, with the resource.
func (subs *subscriptions) remove(ss *mcp.ServerSession, uri string) (readTarget, bool) {
	subs.mu.Lock()
	defer subs.mu.Unlock()
	sub, ok := subs.byURI[uri][ss]
	if !ok {
		return readTarget{}, false
	}
	delete(subs.byURI[uri], ss)
	delete(subs.bySession[ss], uri)
	if len(subs.byURI[uri]) > 0 {
		return readTarget{}, false
	}
	delete(subs.byURI, uri)
	return sub.target, true
}

// subscriber returns the subscription of ss to uri.
func (subs *subscriptions) subscriber(ss *mcp.ServerSession, uri string) (subscriber, bool) {
	subs.mu.Lock()
	defer subs.mu.Unlock()
	sub, ok := subs.byURI[uri][ss]
	return sub, ok
}

// filterUpdates is the SDK's sending middleware that lets a
// notifications/resources/updated reach a session only when the session is
// subscribed to the resource and its caller may still see it: the policy
// does not deny it the listing of the resource, which the catalog still
// offers.
func (s *Server) filterUpdates(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "notifications/resources/updated" {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		p, _ := req.GetParams().(*mcp.ResourceUpdatedNotificationParams)
		if ss == nil || p == nil {
			return nil, nil
		}
		sub, ok := s.subs.subscriber(ss, p.URI)
		if !ok {
			return nil, nil
		}
		t, ok := s.catalog.lookupResource(ctx, p.URI)
		if !ok {
			return nil, nil
		}
		call := baseCall(sub.caller, ActionReadResource)
		call.Tool, call.Template, call.Server, call.DefinitionHash = t.uri, t.template, t.upstream.cfg.Name, t.hash
		if !s.shown(ctx, call) {
			s.log.InfoContext(ctx, "mcpserver: a resource update is not passed on: the policy no longer shows the resource to the subscriber", "uri", p.URI, "principal", sub.caller.Subject)
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

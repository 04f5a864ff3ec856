package mcpserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/usherhq/usher/internal/jcs"
	"github.com/usherhq/usher/policy"
)

// maxURI bounds a resource URI or URI template, as listed or asked for.
const maxURI = 2048

// offering is what one upstream offers, as the catalog exposes it.
type offering struct {
	tools       []*tool
	resources   []*resource
	templates   []*resource
	prompts     []*prompt
	completions bool // the upstream declared the completions capability
	// refused are the tools listed that cannot be offered as they are
	// (a name that does not fit, a definition that cannot be hashed).
	refused []refusal
}

// resource is an upstream resource, or resource template, under its
// exposed URI: the upstream's prefix followed by the upstream's own URI.
type resource struct {
	uri      string // exposed
	orig     string // the upstream's own URI (template)
	upstream *upstream
	hash     string
	listed   *mcp.Resource         // as resources/list shows it; nil for a template
	template *mcp.ResourceTemplate // as resources/templates/list shows it; nil for a resource
	match    *uritemplate.Template // the template's own URI template; nil for a resource
}

// prompt is an upstream prompt under its exposed name.
type prompt struct {
	name     string // exposed
	orig     string
	upstream *upstream
	hash     string
	listed   *mcp.Prompt
}

// featureHash is the definition hash of a listed resource, template or
// prompt as exposed: "sha256:" and the hex SHA-256 of its RFC 8785
// canonical JSON.
func featureHash(v any) (string, error) {
	b, err := jcs.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// exposedURI reports whether an exposed URI is one the catalog may offer:
// at most maxURI bytes of valid text without control characters, so that
// none can forge a line in a log or a review.
func exposedURI(uri string) bool {
	return uri != "" && len(uri) <= maxURI && !strings.ContainsFunc(uri, func(r rune) bool {
		return unicode.IsControl(r) || r == unicode.ReplacementChar
	})
}

// listFeatures lists the upstream's resources, resource templates and
// prompts on the session cs, when its capabilities declare them. A list
// the upstream does not implement although it declares the capability —
// resources/templates/list is the one servers omit, having no templates —
// answers -32601 (Method not found): it is empty, not a failure of the
// upstream (optionalList).
func (u *upstream) listFeatures(ctx context.Context, cs *mcp.ClientSession, o *offering) error {
	var caps mcp.ServerCapabilities
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil {
		caps = *ir.Capabilities
	}
	o.completions = caps.Completions != nil
	if caps.Resources != nil {
		if err := u.optionalList("resources/list", func(cursor string) (string, error) {
			res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
			if err != nil {
				return "", err
			}
			for _, r := range res.Resources {
				if r == nil {
					continue
				}
				if rs, err := u.newResource(r, nil); err != nil {
					u.cat.log.Warn("mcpserver: an upstream resource is not usable; it is not offered", "upstream", u.cfg.Name, "uri", truncate(r.URI, 256), "err", err)
				} else {
					o.resources = append(o.resources, rs)
				}
			}
			return res.NextCursor, nil
		}); err != nil {
			return fmt.Errorf("resources/list: %w", err)
		}
		if err := u.optionalList("resources/templates/list", func(cursor string) (string, error) {
			res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
			if err != nil {
				return "", err
			}
			for _, t := range res.ResourceTemplates {
				if t == nil {
					continue
				}
				if rs, err := u.newResource(nil, t); err != nil {
					u.cat.log.Warn("mcpserver: an upstream resource template is not usable; it is not offered", "upstream", u.cfg.Name, "template", truncate(t.URITemplate, 256), "err", err)
				} else {
					o.templates = append(o.templates, rs)
				}
			}
			return res.NextCursor, nil
		}); err != nil {
			return fmt.Errorf("resources/templates/list: %w", err)
		}
	}
	if caps.Prompts != nil {
		if err := u.optionalList("prompts/list", func(cursor string) (string, error) {
			res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
			if err != nil {
				return "", err
			}
			for _, p := range res.Prompts {
				if p == nil {
					continue
				}
				if pr, err := u.newPrompt(p); err != nil {
					u.cat.log.Warn("mcpserver: an upstream prompt is not usable; it is not offered", "upstream", u.cfg.Name, "prompt", truncate(p.Name, 128), "err", err)
				} else {
					o.prompts = append(o.prompts, pr)
				}
			}
			return res.NextCursor, nil
		}); err != nil {
			return fmt.Errorf("prompts/list: %w", err)
		}
	}
	return nil
}

// optionalList pages through the upstream's list method with list, as
// pages does; an upstream that answers its first page -32601 (Method not
// found) has none of what it lists, which is logged, and no error. Any
// other error, or -32601 after a first page, is one.
func (u *upstream) optionalList(method string, list func(cursor string) (next string, _ error)) error {
	first := true
	err := pages(func(cursor string) (string, error) {
		next, err := list(cursor)
		if err != nil && first && methodNotFound(err) {
			u.cat.log.Debug("mcpserver: an upstream does not implement a list of a capability it declares; it has none", "upstream", u.cfg.Name, "method", method)
			return "", nil
		}
		first = false
		return next, err
	})
	return err
}

// methodNotFound reports whether err is a JSON-RPC error -32601.
func methodNotFound(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound
}

// pages calls list with each cursor it returns, from the first page, up to
// maxUpstreamPages.
func pages(list func(cursor string) (next string, _ error)) error {
	cursor := ""
	for range maxUpstreamPages {
		next, err := list(cursor)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
	return fmt.Errorf("more than %d pages", maxUpstreamPages)
}

// newResource makes the catalog's resource of an upstream's resource r, or
// of its template t.
func (u *upstream) newResource(r *mcp.Resource, t *mcp.ResourceTemplate) (*resource, error) {
	rs := &resource{upstream: u}
	var listed any
	if r != nil {
		cp := *r
		rs.orig, cp.URI = r.URI, u.cfg.prefix()+r.URI
		rs.uri, rs.listed, listed = cp.URI, &cp, &cp
	} else {
		cp := *t
		rs.orig, cp.URITemplate = t.URITemplate, u.cfg.prefix()+t.URITemplate
		rs.uri, rs.template, listed = cp.URITemplate, &cp, &cp
		m, err := uritemplate.New(t.URITemplate)
		if err != nil {
			return nil, fmt.Errorf("the URI template does not parse: %w", err)
		}
		rs.match = m
	}
	if !exposedURI(rs.uri) {
		return nil, fmt.Errorf("the URI is empty, longer than %d bytes or holds control characters", maxURI)
	}
	var err error
	rs.hash, err = featureHash(listed)
	return rs, err
}

// newPrompt makes the catalog's prompt of an upstream's prompt p.
func (u *upstream) newPrompt(p *mcp.Prompt) (*prompt, error) {
	cp := *p
	cp.Name = u.cfg.prefix() + p.Name
	if !toolName.MatchString(cp.Name) {
		return nil, errors.New("the name does not fit ^[a-zA-Z0-9_-]{1,64}$ with the prefix")
	}
	hash, err := featureHash(&cp)
	if err != nil {
		return nil, err
	}
	return &prompt{name: cp.Name, orig: p.Name, upstream: u, hash: hash, listed: &cp}, nil
}

// mergeFeatures installs the upstreams' resources, templates and prompts in
// snap: a URI, template or name that two upstreams offer (possible only
// with prefix "none") is offered by neither.
func (c *Catalog) mergeFeatures(snap *catalogSnapshot) {
	snap.resourceByURI, snap.promptByName, snap.templateByURI = map[string]*resource{}, map[string]*prompt{}, map[string]*resource{}
	uris, templates, names := map[string]int{}, map[string]int{}, map[string]int{}
	for _, u := range c.upstreams {
		o := snap.upstream[u.cfg.Name]
		for _, r := range o.resources {
			uris[r.uri]++
		}
		for _, t := range o.templates {
			templates[t.uri]++
		}
		for _, p := range o.prompts {
			names[p.name]++
		}
	}
	for _, u := range c.upstreams {
		o := snap.upstream[u.cfg.Name]
		for _, r := range o.resources {
			if uris[r.uri] > 1 {
				c.log.Error("mcpserver: several upstreams offer one resource URI; none of them is offered", "uri", r.uri)
				continue
			}
			snap.resources = append(snap.resources, r)
			snap.resourceByURI[r.uri] = r
		}
		for _, t := range o.templates {
			if templates[t.uri] > 1 {
				c.log.Error("mcpserver: several upstreams offer one resource template; none of them is offered", "template", t.uri)
				continue
			}
			snap.templates = append(snap.templates, t)
			snap.templateByURI[t.uri] = t
		}
		for _, p := range o.prompts {
			if names[p.name] > 1 {
				c.log.Error("mcpserver: several upstreams offer one prompt name; none of them is offered", "prompt", p.name)
				continue
			}
			snap.prompts = append(snap.prompts, p)
			snap.promptByName[p.name] = p
		}
	}
	byURI := func(a, b *resource) int { return strings.Compare(a.uri, b.uri) }
	slices.SortFunc(snap.resources, byURI)
	slices.SortFunc(snap.templates, byURI)
	slices.SortFunc(snap.prompts, func(a, b *prompt) int { return strings.Compare(a.name, b.name) })
}

// readTarget is what a resources/read names: a listed resource, or a URI
// of an upstream's template.
type readTarget struct {
	uri      string // exposed
	orig     string // the upstream's own
	upstream *upstream
	hash     string // the listed resource's or template's
	template string // the exposed template matched; empty for a listed resource
}

// lookupResource resolves an exposed URI: a listed resource of exactly that
// URI, or else a URI in the namespace of one upstream (its prefix, or any
// URI for the upstream without one when no prefix matches) that one of
// that upstream's listed templates matches. Anything else is unknown: no
// URI reaches an upstream that does not claim it.
func (c *Catalog) lookupResource(ctx context.Context, uri string) (readTarget, bool) {
	snap := c.snapshot(ctx)
	if r, ok := snap.resourceByURI[uri]; ok {
		return readTarget{uri: uri, orig: r.orig, upstream: r.upstream, hash: r.hash}, true
	}
	u, orig, ok := c.route(uri)
	if !ok {
		return readTarget{}, false
	}
	for _, t := range snap.templates {
		if t.upstream == u && t.match.Match(orig) != nil {
			return readTarget{uri: uri, orig: orig, upstream: u, hash: t.hash, template: t.uri}, true
		}
	}
	return readTarget{}, false
}

// route returns the upstream whose namespace holds an exposed name or URI,
// and the upstream's own name for it: the upstream whose prefix begins it
// (prefixes never overlap), or else the one upstream without a prefix.
func (c *Catalog) route(exposed string) (*upstream, string, bool) {
	var bare *upstream
	for _, u := range c.upstreams {
		p := u.cfg.prefix()
		if p == "" {
			bare = u
			continue
		}
		if rest, ok := strings.CutPrefix(exposed, p); ok {
			return u, rest, true
		}
	}
	if bare != nil {
		return bare, exposed, true
	}
	return nil, "", false
}

// lookupPrompt returns the prompt of exactly this exposed name.
func (c *Catalog) lookupPrompt(ctx context.Context, name string) (*prompt, bool) {
	p, ok := c.snapshot(ctx).promptByName[name]
	return p, ok
}

// lookupTemplate returns the resource template of exactly this exposed URI
// template.
func (c *Catalog) lookupTemplate(ctx context.Context, uri string) (*resource, bool) {
	t, ok := c.snapshot(ctx).templateByURI[uri]
	return t, ok
}

// completes reports whether u declared the completions capability when last
// listed.
func (c *Catalog) completes(ctx context.Context, u *upstream) bool {
	o := c.snapshot(ctx).upstream[u.cfg.Name]
	return o != nil && o.completions
}

// session runs f on the caller's session to u, within CallTimeout.
func (u *upstream) session(ctx context.Context, f func(context.Context, *mcp.ClientSession) error) error {
	c, ok := CallerFromContext(ctx)
	if !ok {
		return errors.New("no caller in the context")
	}
	ctx, cancel := context.WithTimeout(ctx, u.cat.opts.CallTimeout)
	defer cancel()
	_, rounds := roundOf(ctx)
	conn, err := u.cat.pool.acquire(ctx, u, connKey{upstream: u.cfg.Name, subject: c.Subject, rounds: rounds})
	if err != nil {
		return fmt.Errorf("connect to upstream %s: %w", u.cfg.Name, err)
	}
	defer u.cat.pool.release(conn)
	// Its response stream is watched (see sseTap) for an end without the
	// answer; nothing of it is passed on.
	watch := &inflight{ctx: ctx, upstream: u.cfg.Name}
	return u.requestFailed(conn, watch, f(context.WithValue(ctx, inflightKey{}, watch), conn.session))
}

// request sends a request that may ask the caller for input (prompts/get,
// resources/read) on the caller's session to u, as send sends it, within
// CallTimeout; action and name say what it asks for (name as exposed).
// The upstream's requests for input go to the caller as during a tool
// call. With CatalogOptions.RelayRequests, a stateful caller of a
// protocol with a handshake has them relayed (see relay). For a caller of
// protocol 2026-07-28 the session offers the upstream what the caller
// declared (see round.offers), and an upstream's round comes back as an
// incomplete tools/call result (see heldAskOf), whatever the request; an
// upstream of an earlier protocol asks with requests of its own, and the
// request is then held open for the caller's rounds (see heldCall): a
// retry of such a round resumes it, here or on the replica that holds
// it, whose result decode reads.
func (u *upstream) request(ctx context.Context, action Action, name string, send func(context.Context, *mcp.ClientSession) (mcp.Result, error), decode heldDecoder) (mcp.Result, error) {
	c, ok := CallerFromContext(ctx)
	if !ok {
		return nil, errors.New("no caller in the context")
	}
	ctx, cancel := context.WithTimeout(ctx, u.cat.opts.CallTimeout)
	defer cancel()
	key, r, rounds, ds := u.sessionOf(ctx, c)
	conn, err := u.cat.pool.acquire(ctx, u, key)
	if err != nil {
		return nil, fmt.Errorf("connect to upstream %s: %w", u.cfg.Name, err)
	}
	held := rounds && !speaksRounds(conn.session)
	if held && r.resumesHeld() {
		// A later round of a held request: it is already open.
		u.cat.pool.release(conn)
		return u.resumeHeld(ctx, c.Subject, r, decode, refuseRequest)
	}
	// Its response stream is watched (see sseTap) for an end without the
	// answer; of what the upstream sends during it, only its requests are
	// passed on.
	f := &inflight{ctx: ctx, downstream: ds, id: rand.Text(), upstream: u.cfg.Name, action: action, tool: name,
		relayMeta: !rounds && key.offers != "" && speaksRounds(conn.session)}
	run := func(ctx context.Context) (mcp.Result, error) {
		res, err := send(context.WithValue(ctx, inflightKey{}, f), conn.session)
		if cancelled := heldCancelled(ctx, u.cfg.Name, err); held && cancelled != nil {
			return nil, cancelled
		}
		if err := u.requestFailed(conn, f, err); err != nil {
			return nil, err
		}
		return res, nil
	}
	if held {
		// The upstream's requests find the request by its session's
		// requests in flight (see heldTarget).
		conn.track(f)
		return u.startHeld(ctx, conn, f, r, run).round(ctx)
	}
	defer u.cat.pool.release(conn)
	if key.offers != "" {
		// So do the requests relayed to a stateful caller (see
		// relayTarget).
		conn.track(f)
		defer conn.untrack(f)
	}
	return run(ctx)
}

// requestParams returns the _meta, input responses and request state of
// a request other than a tool call that request sends: a round's, or for
// an upstream of protocol 2026-07-28 on a session that relays its
// requests for input, the capabilities that session offers (see
// relayMeta).
func requestParams(ctx context.Context) (mcp.Meta, mcp.InputResponseMap, string) {
	if r, ok := roundOf(ctx); ok {
		return r.meta(nil), r.responses, r.state
	}
	if f, _ := ctx.Value(inflightKey{}).(*inflight); f != nil && f.relayMeta {
		return relayMeta(nil), nil, ""
	}
	return nil, nil, ""
}

// requestFailed is the error of a request to u on conn that failed with
// err (nil for none), which f watched: a conn whose request may have been
// sent is not used again.
func (u *upstream) requestFailed(conn *conn, f *inflight, err error) error {
	if err == nil {
		return nil
	}
	if !notSent(err) {
		u.cat.pool.broken(conn)
	}
	if f.stream.ended.Load() {
		return fmt.Errorf("%w: upstream %s: %v", errStreamEnded, u.cfg.Name, err)
	}
	return fmt.Errorf("upstream %s: %w", u.cfg.Name, err)
}

// refuseRequest answers a retry of a held request other than a tool call
// that cannot go on.
func refuseRequest(text string) (mcp.Result, error) {
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: text}
}

// roundResult is an upstream's round of a request other than a tool call
// (its input requests and its own state), as request returns it: an
// incomplete tools/call result (see heldAskOf).
func roundResult(ask *inputAsk) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{}, InputRequests: ask.requests, RequestState: ask.state}
}

// maxSubscriptions bounds the resources the catalog subscribes to at its
// upstreams.
const maxSubscriptions = 1024

// errTooManySubscriptions refuses a subscription beyond maxSubscriptions.
var errTooManySubscriptions = errors.New("too many resources are subscribed to")

// subscribe subscribes the catalog's own session to the upstream of t to
// the resource t, once per session: an update the upstream sends is
// passed on under its exposed URI (see Catalog.watchUpdates). It stays
// subscribed until unsubscribe (see Server.subscribe).
func (c *Catalog) subscribe(ctx context.Context, t readTarget) error {
	key := t.upstream.cfg.Name + "\x00" + t.orig
	conn, err := c.pool.acquire(ctx, t.upstream, connKey{upstream: t.upstream.cfg.Name})
	if err != nil {
		return err
	}
	defer c.pool.release(conn)
	c.changeMu.Lock()
	if c.subscribed == nil {
		c.subscribed = map[string]*mcp.ClientSession{}
	}
	switch {
	case c.subscribed[key] == conn.session:
		c.changeMu.Unlock()
		return nil
	case c.subscribed[key] == nil && len(c.subscribed) >= maxSubscriptions:
		c.changeMu.Unlock()
		return errTooManySubscriptions
	}
	c.subscribed[key] = conn.session
	c.changeMu.Unlock()
	if err := conn.session.Subscribe(ctx, &mcp.SubscribeParams{URI: t.orig}); err != nil {
		c.changeMu.Lock()
		if c.subscribed[key] == conn.session {
			delete(c.subscribed, key)
		}
		c.changeMu.Unlock()
		return err
	}
	return nil
}

// unsubscribe unsubscribes the catalog's session to the upstream of t from
// the resource t, on the session it subscribed on (a session closed since
// is subscribed to nothing).
func (c *Catalog) unsubscribe(ctx context.Context, t readTarget) {
	key := t.upstream.cfg.Name + "\x00" + t.orig
	c.changeMu.Lock()
	cs := c.subscribed[key]
	delete(c.subscribed, key)
	c.changeMu.Unlock()
	if cs == nil {
		return
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: t.orig}); err != nil {
		c.log.WarnContext(ctx, "mcpserver: unsubscribing at the upstream failed", "upstream", t.upstream.cfg.Name, "uri", truncate(t.uri, 256), "err", err)
	}
}

// watchUpdates calls f with the exposed URI of each resource an upstream
// says was updated (notifications/resources/updated on the catalog's own
// session).
func (c *Catalog) watchUpdates(f func(uri string)) {
	c.changeMu.Lock()
	defer c.changeMu.Unlock()
	c.updateWatchers = append(c.updateWatchers, f)
}

// updated passes on an upstream's notifications/resources/updated.
func (c *Catalog) updated(u *upstream, uri string) {
	exposed := u.cfg.prefix() + uri
	if !exposedURI(exposed) {
		return
	}
	c.changeMu.Lock()
	watchers := slices.Clone(c.updateWatchers)
	c.changeMu.Unlock()
	for _, w := range watchers {
		w(exposed)
	}
}

// Feature is what a tools/call, resources/read, prompts/get or
// completion/complete names, as the catalog resolves it for the policy:
// the inputs of a decision on it (see Call).
type Feature struct {
	// Name is the exposed tool name, URI, URI template or prompt name
	// (Call.Tool).
	Name string
	// Template is the exposed URI template a read URI matched, or the
	// template of a completion; empty for a listed resource or a prompt.
	Template string
	// Server is the upstream's name, or policy.BuiltinServer for a
	// built-in tool.
	Server string
	// Hash is the definition hash of the tool, or of the listed resource,
	// template or prompt.
	Hash string
}

// ErrNoFeature is the error of Catalog.Resolve when the catalog offers
// nothing of that name.
var ErrNoFeature = errors.New("mcpserver: the catalog offers no such tool, resource, template or prompt")

// Resolve lists the upstreams afresh and resolves what a request of action
// names, as the enforcement point does: for ActionCallTool a tool's name;
// for ActionReadResource a URI (a
// listed resource, or a URI one of its upstream's templates matches); for
// ActionGetPrompt a prompt's name; for ActionComplete a prompt's name
// (ref RefPrompt) or a template's URI (RefResource). It is what
// `usher policy explain` decides on. With an error listing some upstream,
// it resolves on what they last listed and returns that error too.
func (c *Catalog) Resolve(ctx context.Context, action Action, ref, name string) (Feature, error) {
	c.refreshMu.Lock()
	listErr := c.refreshLocked(ctx).listErrors
	c.refreshMu.Unlock()
	var f Feature
	ok := false
	switch {
	case action == ActionCallTool:
		var t *tool
		if t, ok = c.lookup(ctx, name); ok {
			f = Feature{Name: t.def.Name, Server: cmp.Or(t.server, policy.BuiltinServer), Hash: t.hash}
		}
	case action == ActionReadResource:
		var t readTarget
		if t, ok = c.lookupResource(ctx, name); ok {
			f = Feature{Name: t.uri, Template: t.template, Server: t.upstream.cfg.Name, Hash: t.hash}
		}
	case action == ActionGetPrompt || action == ActionComplete && ref == RefPrompt:
		var p *prompt
		if p, ok = c.lookupPrompt(ctx, name); ok {
			f = Feature{Name: p.name, Server: p.upstream.cfg.Name, Hash: p.hash}
		}
	case action == ActionComplete && ref == RefResource:
		var t *resource
		if t, ok = c.lookupTemplate(ctx, name); ok {
			f = Feature{Name: t.uri, Template: t.uri, Server: t.upstream.cfg.Name, Hash: t.hash}
		}
	}
	if !ok {
		return Feature{}, errors.Join(ErrNoFeature, listErr)
	}
	return f, listErr
}

// resourceNotFound is the error of a resources/read of a URI the catalog
// does not offer. Protocol 2026-07-28 standardises it as -32602 (Invalid
// params, SEP-2164); the earlier protocols' callers get MCP's -32002, as
// their specifications say. Its data names the URI.
func resourceNotFound(meta mcp.Meta, uri string) *jsonrpc.Error {
	code := int64(CodeResourceNotFound)
	if sessionless(meta) {
		code = jsonrpc.CodeInvalidParams
	}
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf("There is no resource %.128q.", uri), Data: data}
}

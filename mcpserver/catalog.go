package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/policy"
)

// ToolDefinition is what a tool's definition hash covers: exactly the
// fields that, if they changed, would change what a reviewer approved. Its
// fields match policy.ToolDefinition, so one converts to the other.
type ToolDefinition struct {
	Name         string // as Usher exposes it, with an upstream's prefix
	Title        string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage // nil when the tool declares none
	Annotations  json.RawMessage // nil when the tool declares none
}

// Definition is a tool of the catalog as the tool lock sees it.
type Definition struct {
	ToolDefinition
	// Server is the upstream offering the tool; empty for a built-in one.
	Server string
	// Hash is the definition hash (CatalogOptions.DefinitionHash).
	Hash string
}

// CatalogOptions configures a Catalog. Fields marked required have no
// default; every other zero value selects its default.
type CatalogOptions struct {
	// DefinitionHash returns the hash of a tool definition, which the tool
	// lock and approvals compare. Default: policy.DefinitionHash, the
	// SHA-256 of its RFC 8785 canonical JSON.
	DefinitionHash func(ToolDefinition) (string, error)
	// Runs reads the caller's runs for sessions_list and session_read;
	// store.Store implements it. Required.
	Runs Runs
	// Approvals lists the caller's approvals for approvals_list;
	// store.Store implements it. Required.
	Approvals ApprovalLister
	// DemoTools adds notes_list, notes_read, notes_write and notes_delete,
	// which keep short notes per user in Notes.
	DemoTools bool
	// Notes stores the demo notes; store.Store implements it. Required
	// with DemoTools.
	Notes Notes
	// Upstreams are the MCP servers whose tools the catalog re-exposes.
	Upstreams []Upstream
	// UpstreamTokens gives the upstreams with BrokerToken set a broker
	// token for their own audience: of the caller on whose behalf the
	// upstream is called, or of CatalogSubject when the catalog lists the
	// upstream's tools. It is asked for every HTTP request to such an
	// upstream, so it should cache its tokens (broker.TokenCache does).
	// Required when an upstream sets BrokerToken.
	UpstreamTokens TokenSource
	// RelayRequests makes the callers' sessions to the upstreams offer
	// sampling and elicitation, and relays an upstream's sampling and
	// elicitation requests during a tool call to the caller, when the
	// caller's session offers them, audited (see KindSamplingRequested);
	// otherwise the upstream is refused. Set it with Options.Stateful: a
	// stateless endpoint has no channel for a request to the caller.
	// Default false: an upstream may ask the caller for nothing.
	RelayRequests bool
	// Handover passes the rounds of a call held open for a caller of
	// protocol 2026-07-28 (an older upstream's input request during the
	// call) between replicas, so that the caller's retry may reach any
	// of them: the one that holds the call delivers the answers and hands
	// the result over. Without it a retry must reach the replica that
	// holds its call. A store.Store does.
	Handover HeldHandover
	// UpstreamSessions records the callers' sessions to HTTP upstreams so
	// that the replicas share them: a replica that needs a caller's
	// session to an upstream and holds none joins the one another replica
	// recorded (its Mcp-Session-Id, protocol version and InitializeResult)
	// instead of initializing another, so that an upstream that keeps
	// state per session sees one session of the caller whichever replica
	// calls it. A store.Store does. Set it with Options.Stateful; it needs
	// UpstreamSessionSecret. The catalog's own sessions (which list the
	// upstreams) and stdio upstreams (a process per replica) are not
	// shared. Without it each replica opens sessions of its own. With
	// it the catalog sweeps the records every minute: a session no
	// replica has used for IdleTimeout, CallTimeout and two minutes is
	// ended upstream and its record deleted (see sweepUpstreamSessions).
	UpstreamSessions UpstreamSessions
	// UpstreamSessionSecret seals the upstreams' session ids recorded in
	// UpstreamSessions: key material every replica shares (Options.Secret
	// will do), at least 32 bytes. Required with UpstreamSessions.
	UpstreamSessionSecret []byte
	// PreviousUpstreamSessionSecrets are secrets UpstreamSessionSecret
	// replaced: the records they sealed still open, until they end.
	PreviousUpstreamSessionSecrets [][]byte
	// RefreshInterval is how long the upstreams' tool lists are used before
	// the next use lists them again. Default 1 min.
	RefreshInterval time.Duration
	// IdleTimeout closes a caller's upstream session (a process, for
	// stdio) after this long unused. Default 5 min. The catalog's own
	// session to each upstream, which lists it and hears of changes to its
	// lists, stays open (it is closed only at MaxSessions, as an idle one).
	IdleTimeout time.Duration
	// MaxSessions bounds the upstream sessions open at once, across
	// upstreams and callers (each caller has its own session to each
	// upstream: for stdio, a process). At the bound, a new session closes
	// the least recently used idle one; when none is idle, the call that
	// needs it fails before anything is sent. Default DefaultMaxSessions.
	MaxSessions int
	// MaxSessionsPerUser bounds the upstream sessions one caller subject
	// has open at once, across upstreams, counting sessions that failed
	// while calls were still using them. At the bound, a new session
	// closes the subject's least recently used idle one; when none is
	// idle, the call gets a tool error before anything is sent. Default
	// DefaultMaxSessionsPerUser.
	MaxSessionsPerUser int
	// CallTimeout bounds a call of an upstream tool. Default
	// DefaultCallTimeout. A Sweeper of the calls is told it
	// (SweeperOptions.CallTimeout).
	CallTimeout time.Duration
	// HTTPClient is the base of the clients of HTTP upstreams; its
	// redirect policy is replaced by one that follows none, so credentials
	// never go to another URL. Default: a client on a copy of
	// http.DefaultTransport that keeps up to 64 idle connections per host,
	// where http.DefaultTransport keeps 2, so that concurrent calls to one
	// upstream reuse their connections rather than open one each.
	HTTPClient *http.Client
	// Version is the client version announced to upstreams. Default
	// "devel".
	Version string
	// Logger receives upstream failures, never a credential. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Registerer receives the metrics of the upstream calls when not nil:
	// usher_upstream_call_errors_total and
	// usher_upstream_call_duration_seconds, of this process.
	Registerer prometheus.Registerer
}

// Catalog is the set of tools the endpoint offers: the built-in tools, the
// demo tools when enabled, and the tools of the upstream servers, each with
// its definition hash. It lists upstream tools lazily and again every
// RefreshInterval, and keeps upstream sessions open across calls (see
// Close).
type Catalog struct {
	opts      CatalogOptions
	log       *slog.Logger
	builtins  []*tool
	upstreams []*upstream
	pool      *pool

	refreshMu sync.Mutex
	current   atomic.Pointer[catalogSnapshot]

	// stop ends the refreshes that changes start (see changed); work
	// waits for them.
	stop   context.Context
	cancel context.CancelFunc
	work   sync.WaitGroup

	changeMu   sync.Mutex
	refreshing bool // a refresh for a change is running
	again      bool // another change came meanwhile
	// announced counts the upstreams' announcements of changed lists;
	// covered is how many of them the latest listing installed had heard
	// of when it began; covering is closed (and replaced) when covered
	// grows. A call waits for the listing that covers what was announced
	// before it (see settle).
	announced, covered uint64
	covering           chan struct{}
	watchers           []func(listChanges) // told what a refresh changed
	// subscribed names the resources (upstream and URI) the catalog's
	// session to their upstream is subscribed to, with that session.
	subscribed     map[string]*mcp.ClientSession
	updateWatchers []func(uri string) // told of updated resources
	// held are the upstream calls held open for their callers' rounds.
	held heldCalls
	// handover passes held calls' rounds between replicas; nil without
	// CatalogOptions.Handover.
	handover *handover
	// sessionSealer seals the upstream session ids recorded in
	// CatalogOptions.UpstreamSessions; nil without.
	sessionSealer *seal.Sealer
}

// listChanges says which of the catalog's lists a refresh changed.
type listChanges struct {
	tools, resources, prompts bool
}

// any reports whether anything changed.
func (l listChanges) any() bool { return l.tools || l.resources || l.prompts }

// watch calls f, in a goroutine of the catalog, after each refresh that
// an upstream's change notification caused and that changed a list.
func (c *Catalog) watch(f func(listChanges)) {
	c.changeMu.Lock()
	defer c.changeMu.Unlock()
	c.watchers = append(c.watchers, f)
}

// changed lists the upstreams again, at once, because one said that its
// tools, resources or prompts changed (notifications/*/list_changed), and
// tells the watchers what changed. Changes that come while it lists are
// served by one more listing, not one each, so that an upstream sending a
// flood of them costs at most one listing every changeSpacing. What is
// new or changed is no more trusted than before: a tool's definition hash
// is compared with the tool lock at each call.
func (c *Catalog) changed() {
	c.changeMu.Lock()
	defer c.changeMu.Unlock()
	c.announced++
	if c.refreshing {
		c.again = true
		return
	}
	if c.stop.Err() != nil {
		return
	}
	c.refreshing = true
	c.work.Go(func() {
		for {
			c.refreshMu.Lock()
			prev := c.current.Load()
			var next *catalogSnapshot
			if c.stop.Err() == nil {
				next = c.refreshLocked(c.stop)
			}
			c.refreshMu.Unlock()
			c.changeMu.Lock()
			again := c.again && c.stop.Err() == nil
			c.refreshing, c.again = again, false
			c.changeMu.Unlock()
			c.tell(prev, next)
			if !again {
				return
			}
			t := time.NewTimer(changeSpacing)
			select {
			case <-c.stop.Done():
			case <-t.C:
			}
			t.Stop()
		}
	})
}

// tell tells the watchers what changed from prev to next, when anything
// did.
func (c *Catalog) tell(prev, next *catalogSnapshot) {
	if ch := diff(prev, next); next != nil && ch.any() {
		c.changeMu.Lock()
		watchers := slices.Clone(c.watchers)
		c.changeMu.Unlock()
		for _, w := range watchers {
			w(ch)
		}
	}
}

// settle waits, for a call, until a listing that began after every
// change the upstreams announced before it has been installed, so that
// the call is decided on the definitions offered after the change, not
// before: an announced change counts from its announcement, not from the
// listing it causes. It waits at most for that listing (each upstream's
// bounded by listTimeout), and not at all when ctx ends or the catalog
// closes.
func (c *Catalog) settle(ctx context.Context) {
	c.changeMu.Lock()
	target := c.announced
	done, covering := c.covered >= target, c.covering
	c.changeMu.Unlock()
	for !done {
		select {
		case <-covering:
		case <-ctx.Done():
			return
		case <-c.stop.Done():
			return
		}
		c.changeMu.Lock()
		done, covering = c.covered >= target, c.covering
		c.changeMu.Unlock()
	}
}

// changeSpacing is the least time between two listings that changes
// cause: the first comes at once, and changes that come meanwhile are
// served together by the next.
const changeSpacing = 100 * time.Millisecond

// diff says which lists differ between two snapshots (names and
// definition hashes); from nothing, every list has changed.
func diff(prev, next *catalogSnapshot) listChanges {
	if prev == nil || next == nil {
		return listChanges{tools: true, resources: true, prompts: true}
	}
	var ch listChanges
	ch.tools = !slices.EqualFunc(prev.tools, next.tools, func(a, b *tool) bool { return a.def.Name == b.def.Name && a.hash == b.hash })
	same := func(a, b *resource) bool { return a.uri == b.uri && a.hash == b.hash }
	ch.resources = !slices.EqualFunc(prev.resources, next.resources, same) || !slices.EqualFunc(prev.templates, next.templates, same)
	ch.prompts = !slices.EqualFunc(prev.prompts, next.prompts, func(a, b *prompt) bool { return a.name == b.name && a.hash == b.hash })
	return ch
}

// tool is one tool of the catalog.
type tool struct {
	def    ToolDefinition
	server string // the upstream's name; empty for a built-in tool
	hash   string
	listed *mcp.Tool // as tools/list shows it
	// validate checks a built-in tool's canonical arguments before the
	// decision, so that no approval is ever requested for a call that
	// could not run; nil for upstream tools, whose servers validate.
	validate func(json.RawMessage) error
	// call runs the tool. Its context carries the Caller.
	call func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error)
}

// catalogSnapshot is the catalog at one time.
type catalogSnapshot struct {
	tools    []*tool // in name order
	byName   map[string]*tool
	upstream map[string]*offering // what each upstream last listed

	resources     []*resource // in URI order
	resourceByURI map[string]*resource
	templates     []*resource // in URI template order
	templateByURI map[string]*resource
	prompts       []*prompt // in name order
	promptByName  map[string]*prompt

	listedAt   time.Time
	listErrors error
}

// NewCatalog returns a catalog. Nil opts is an error: several fields are
// required. It does no I/O: upstreams are reached on first use.
func NewCatalog(opts *CatalogOptions) (*Catalog, error) {
	var o CatalogOptions
	if opts != nil {
		o = *opts
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = time.Minute
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessionsPerUser == 0 {
		o.MaxSessionsPerUser = DefaultMaxSessionsPerUser
	}
	if o.HTTPClient == nil {
		o.HTTPClient = defaultHTTPClient()
	}
	if o.Version == "" {
		o.Version = "devel"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}

	if o.DefinitionHash == nil {
		o.DefinitionHash = func(d ToolDefinition) (string, error) {
			return policy.DefinitionHash(policy.ToolDefinition(d))
		}
	}

	var errs []error
	if o.Runs == nil {
		errs = append(errs, errors.New("a Runs reader is required"))
	}
	if o.Approvals == nil {
		errs = append(errs, errors.New("an ApprovalLister is required"))
	}
	if o.DemoTools && o.Notes == nil {
		errs = append(errs, errors.New("the demo tools need Notes"))
	}
	if o.RefreshInterval < 0 || o.IdleTimeout < 0 || o.CallTimeout < 0 || o.MaxSessions < 0 {
		errs = append(errs, errors.New("the RefreshInterval, IdleTimeout, CallTimeout and MaxSessions must not be negative"))
	}
	if o.MaxSessionsPerUser < 0 {
		errs = append(errs, errors.New("MaxSessionsPerUser must not be negative"))
	}
	var sessionSealer *seal.Sealer
	if o.UpstreamSessions != nil {
		var err error
		if sessionSealer, err = newUpstreamSessionSealer(o.UpstreamSessionSecret, o.PreviousUpstreamSessionSecrets...); err != nil {
			errs = append(errs, err)
		}
	}
	ups, err := checkUpstreams(o.Upstreams, o.UpstreamTokens != nil)
	if err != nil {
		errs = append(errs, err)
	}
	c := &Catalog{opts: o, log: o.Logger, sessionSealer: sessionSealer, covering: make(chan struct{})}
	c.stop, c.cancel = context.WithCancel(context.Background())
	builtins := builtinTools(o)
	if o.DemoTools {
		builtins = append(builtins, noteTools(o.Notes)...)
	}
	for _, b := range builtins {
		t, err := c.newTool(b.def, "", b.validate, b.call)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.builtins = append(c.builtins, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mcpserver: catalog options: %w", err)
	}
	calls, err := newCallMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: catalog: %w", err)
	}
	for _, u := range ups {
		c.upstreams = append(c.upstreams, &upstream{cfg: u, cat: c, stats: newUpstreamStats(calls, u.Name)})
	}
	c.pool = &pool{conns: map[connKey]*conn{}, idle: o.IdleTimeout, max: o.MaxSessions,
		maxUser: o.MaxSessionsPerUser, byUser: map[string]int{}}
	if o.UpstreamSessions != nil {
		// The shared sessions no replica uses any more are ended
		// upstream (see sweepUpstreamSessions).
		c.work.Add(1)
		go c.sweepUpstreamSessionsEvery()
	}
	if o.Handover != nil {
		if err := c.startHandover(o.Handover); err != nil {
			c.cancel()
			return nil, fmt.Errorf("hearing the held calls' rounds of other replicas: %w", err)
		}
	}
	return c, nil
}

// defaultHTTPClient is the default CatalogOptions.HTTPClient.
func defaultHTTPClient() *http.Client {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultClient // replaced by the program: use it as is
	}
	t := base.Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}

// newTool hashes a definition and makes the tool of it.
func (c *Catalog) newTool(def ToolDefinition, server string, validate func(json.RawMessage) error,
	call func(context.Context, json.RawMessage) (*mcp.CallToolResult, error)) (*tool, error) {
	hash, err := c.opts.DefinitionHash(def)
	if err != nil {
		return nil, fmt.Errorf("hash the definition of %q: %w", def.Name, err)
	}
	listed := &mcp.Tool{Name: def.Name, Title: def.Title, Description: def.Description, InputSchema: def.InputSchema}
	if def.OutputSchema != nil {
		listed.OutputSchema = def.OutputSchema
	}
	if def.Annotations != nil {
		var a mcp.ToolAnnotations
		if err := json.Unmarshal(def.Annotations, &a); err != nil {
			return nil, fmt.Errorf("annotations of %q: %w", def.Name, err)
		}
		listed.Annotations = &a
	}
	return &tool{def: def, server: server, hash: hash, listed: listed, validate: validate, call: call}, nil
}

// Definitions lists every tool with its definition hash, in name order,
// after listing the upstreams afresh: what `usher tools lock` writes and
// `usher tools diff` compares. With an error (naming the upstreams that
// could not be listed) the list lacks their tools or has old ones.
func (c *Catalog) Definitions(ctx context.Context) ([]Definition, error) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	snap := c.refreshLocked(ctx)
	defs := make([]Definition, 0, len(snap.tools))
	for _, t := range snap.tools {
		defs = append(defs, Definition{ToolDefinition: t.def, Server: t.server, Hash: t.hash})
	}
	return defs, snap.listErrors
}

// Hashes maps each tool's name to its definition hash in the catalog as
// it is: what the approvals sweeper compares approvals against
// (approvals.ToolHashes). It lists the upstreams only when the catalog's
// listing is older than RefreshInterval: a Health's checks and the
// upstreams' announcements keep it current, so that the sweeper adds no
// listing of its own. With an error (naming the upstreams the latest
// listing could not list) the map lacks their tools or has old ones.
func (c *Catalog) Hashes(ctx context.Context) (map[string]string, error) {
	snap := c.snapshot(ctx)
	hashes := make(map[string]string, len(snap.tools))
	for _, t := range snap.tools {
		hashes[t.def.Name] = t.hash
	}
	return hashes, snap.listErrors
}

// BuiltinLock is a tool lock that reviews the built-in tools only, which
// ship with the binary: what an installation without a lock starts with,
// so that its read-only built-ins run unattended while every upstream
// tool waits for an operator's review (`usher tools lock`). Like `usher
// tools lock`, it keeps each definition beside its hash, so that a
// built-in changed by a later release shows a reviewer what changed
// since; a definition is kept only when its hash is the lock's own
// (policy.DefinitionHash), which a catalog with another
// CatalogOptions.DefinitionHash does not take.
func (c *Catalog) BuiltinLock() *policy.Lock {
	lock := &policy.Lock{
		Tools:       make(map[string]string, len(c.builtins)),
		Definitions: make(map[string]policy.ToolDefinition, len(c.builtins)),
	}
	for _, t := range c.builtins {
		lock.Tools[t.def.Name] = t.hash
		d := policy.ToolDefinition(t.def)
		if h, err := policy.DefinitionHash(d); err == nil && h == t.hash {
			lock.Definitions[t.def.Name] = d
		}
	}
	return lock
}

// DefaultCallTimeout is the default of CatalogOptions.CallTimeout.
const DefaultCallTimeout = 5 * time.Minute

// CallTimeout is the longest a call of an upstream tool runs
// (CatalogOptions.CallTimeout).
func (c *Catalog) CallTimeout() time.Duration { return c.opts.CallTimeout }

// Close closes every upstream session and stops their processes. Calls in
// flight fail. It is idempotent; the catalog cannot reach upstreams
// afterwards.
func (c *Catalog) Close() error {
	c.changeMu.Lock()
	c.cancel()
	c.changeMu.Unlock()
	c.pool.close()
	c.work.Wait()
	return nil
}

// lookup returns the tool of exactly this name. There is no folding of case
// or of look-alike characters: any other spelling is an unknown tool.
func (c *Catalog) lookup(ctx context.Context, name string) (*tool, bool) {
	if t, ok := c.snapshot(ctx).byName[name]; !ok || t.server != "" {
		// Not a built-in tool: an upstream may have announced a change
		// of it.
		c.settle(ctx)
	}
	t, ok := c.snapshot(ctx).byName[name]
	return t, ok
}

// snapshot returns the current catalog, listing the upstreams again when it
// is older than RefreshInterval. While one caller lists them, others use
// the previous catalog rather than wait.
func (c *Catalog) snapshot(ctx context.Context) *catalogSnapshot {
	cur := c.current.Load()
	if cur != nil && (len(c.upstreams) == 0 || c.opts.Now().Sub(cur.listedAt) < c.opts.RefreshInterval) {
		return cur
	}
	if cur != nil {
		if !c.refreshMu.TryLock() {
			return cur
		}
	} else {
		c.refreshMu.Lock()
		if cur = c.current.Load(); cur != nil {
			c.refreshMu.Unlock()
			return cur
		}
	}
	defer c.refreshMu.Unlock()
	return c.refreshLocked(ctx)
}

// listTimeout bounds the listing of one upstream's tools.
const listTimeout = 30 * time.Second

// refreshLocked lists every upstream (concurrently) and installs the new
// catalog. The listing runs for the catalog, not for whoever triggered it:
// its context keeps no cancellation and no caller.
func (c *Catalog) refreshLocked(ctx context.Context) *catalogSnapshot {
	return c.listAll(withoutCaller(context.WithoutCancel(ctx)), listTimeout)
}

// recheck lists every upstream, each within timeout, installs the new
// catalog and tells the watchers what changed: the health check's listing
// (see Health), which so serves the calls too. It ends when ctx does.
func (c *Catalog) recheck(ctx context.Context, timeout time.Duration) {
	c.refreshMu.Lock()
	prev := c.current.Load()
	next := c.listAll(withoutCaller(ctx), timeout)
	c.refreshMu.Unlock()
	if prev != nil {
		c.tell(prev, next)
	}
}

// listAll lists every upstream (concurrently, each within timeout) and
// installs the new catalog. It must be called with refreshMu held.
func (c *Catalog) listAll(ctx context.Context, timeout time.Duration) *catalogSnapshot {
	prev := c.current.Load()
	c.changeMu.Lock()
	covers := c.announced
	unheard := c.covered < covers // a change was announced since the last listing began
	c.changeMu.Unlock()
	listed := make([]*offering, len(c.upstreams))
	failed := make([]error, len(c.upstreams))
	var wg sync.WaitGroup
	for i, u := range c.upstreams {
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			listed[i], failed[i] = u.list(lctx)
		})
	}
	wg.Wait()

	snap := &catalogSnapshot{byName: map[string]*tool{}, upstream: map[string]*offering{}, listedAt: c.opts.Now()}
	for _, t := range c.builtins {
		snap.byName[t.def.Name] = t
	}
	var errs []error
	refused := make([][]refusal, len(c.upstreams))
	offered := map[string]int{} // how many upstream tools claim a name
	for i, u := range c.upstreams {
		o := listed[i]
		if failed[i] != nil {
			errs = append(errs, fmt.Errorf("upstream %s: %w", u.cfg.Name, failed[i]))
			o = &offering{}
			if unheard {
				// What it listed last may be what it announced it changed:
				// none of it is offered until it is listed again.
				c.log.Warn("mcpserver: listing an upstream failed after a change was announced; none of its last list is offered until it is listed", "upstream", u.cfg.Name, "err", failed[i])
			} else {
				if prev != nil && prev.upstream[u.cfg.Name] != nil {
					o = prev.upstream[u.cfg.Name]
				}
				c.log.Debug("mcpserver: listing an upstream failed; keeping its last list", "upstream", u.cfg.Name, "err", failed[i])
			}
		} else {
			refused[i] = o.refused
		}
		o, refused[i] = c.unshadowed(u, o, refused[i])
		snap.upstream[u.cfg.Name] = o
		for _, t := range o.tools {
			offered[t.def.Name]++
		}
	}
	for i, u := range c.upstreams {
		for _, t := range snap.upstream[u.cfg.Name].tools {
			switch {
			case snap.byName[t.def.Name] != nil && snap.byName[t.def.Name].server == "":
				refused[i] = append(refused[i], refusal{kind: "tool", name: t.def.Name, why: "it has the name of a built-in tool"})
			case offered[t.def.Name] > 1:
				refused[i] = append(refused[i], refusal{kind: "tool", name: t.def.Name, why: "another upstream offers a tool of the same name; neither is offered"})
			default:
				snap.byName[t.def.Name] = t
			}
		}
	}
	c.mergeFeatures(snap)
	for _, t := range snap.byName {
		snap.tools = append(snap.tools, t)
	}
	slices.SortFunc(snap.tools, func(a, b *tool) int { return strings.Compare(a.def.Name, b.def.Name) })
	snap.listErrors = errors.Join(errs...)
	for i, u := range c.upstreams {
		if failed[i] == nil {
			c.offered(u, snap, refused[i])
		}
	}
	c.current.Store(snap)
	c.changeMu.Lock()
	if covers > c.covered {
		c.covered = covers
		close(c.covering)
		c.covering = make(chan struct{})
	}
	c.changeMu.Unlock()
	return snap
}

// refusal is a tool, resource or prompt an upstream listed that the
// catalog does not offer, and why.
type refusal struct {
	kind string // "tool", "resource" or "prompt"
	name string // as exposed; for a resource, its URI
	why  string
}

// offered records what u offers in snap, for its health (the tools, by
// definition hash, and what was refused), and logs each refusal once: when
// it first appears, or its reason changes.
func (c *Catalog) offered(u *upstream, snap *catalogSnapshot, refused []refusal) {
	tools := map[string]string{}
	for _, t := range snap.upstream[u.cfg.Name].tools {
		if snap.byName[t.def.Name] == t {
			tools[t.def.Name] = t.hash
		}
	}
	for _, r := range u.stats.offered(tools, refused) {
		c.log.Error("mcpserver: an upstream's "+r.kind+" is not offered", "upstream", u.cfg.Name, r.kind, truncate(fmt.Sprintf("%+q", r.name), 256), "why", r.why)
	}
}

// unshadowed returns what u offers without the names and URIs that lie in
// another upstream's namespace, which only an upstream without a prefix
// can list (a name that begins with another's prefix would be routed
// there), and refused with those added.
func (c *Catalog) unshadowed(u *upstream, o *offering, refused []refusal) (*offering, []refusal) {
	if u.cfg.prefix() != "" {
		return o, refused
	}
	other := func(kind, name string) bool {
		r, _, ok := c.route(name)
		if ok && r != u {
			refused = append(refused, refusal{kind: kind, name: name, why: "it begins with another upstream's prefix (upstream " + r.cfg.Name + ")"})
		}
		return ok && r != u
	}
	out := &offering{completions: o.completions}
	for _, t := range o.tools {
		if !other("tool", t.def.Name) {
			out.tools = append(out.tools, t)
		}
	}
	for _, r := range o.resources {
		if !other("resource", r.uri) {
			out.resources = append(out.resources, r)
		}
	}
	for _, r := range o.templates {
		if !other("resource", r.uri) {
			out.templates = append(out.templates, r)
		}
	}
	for _, p := range o.prompts {
		if !other("prompt", p.name) {
			out.prompts = append(out.prompts, p)
		}
	}
	return out, refused
}

type noCallerKey struct{}

// withoutCaller returns ctx with its Caller, if any, hidden.
func withoutCaller(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerKey{}, noCallerKey{})
}

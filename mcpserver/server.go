package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/jcs"
	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/internal/workers"
)

// DefaultMaxBodyBytes is the default limit of a request body.
const DefaultMaxBodyBytes = 1 << 20

// minSecretBytes is the shortest Options.Secret.
const minSecretBytes = 32

// Options configures a Server. Fields marked required have no default;
// every other zero value selects its default.
type Options struct {
	// PublicURL is Usher's public base URL, e.g.
	// "https://usher.example.com". The endpoint is PublicURL + "/mcp": that
	// exact URL is the resource of the metadata, and the audience broker
	// tokens must name. Required: an absolute http or https URL without
	// query, fragment or user information.
	PublicURL string
	// Issuer is the broker's issuer, listed as the one authorization
	// server in the metadata. Default PublicURL.
	Issuer string
	// Verifier checks broker tokens; it must require the audience
	// PublicURL + "/mcp" (broker.NewVerifier does iss, aud, typ, lifetime
	// and scope). Required.
	Verifier TokenVerifier
	// Catalog is the tool catalog. Required. The Server does not close it.
	Catalog *Catalog
	// Decider decides every call and whether tools/list shows a tool.
	// Required.
	Decider Decider
	// Approvals consumes and requests approvals. Required.
	Approvals Approvals
	// Executions keeps calls to one run per idempotency key. Required.
	Executions Executions
	// Auditor records every decision and execution. Required.
	Auditor Auditor
	// Secret is the key material, shared by every replica, that the
	// requestState of Usher's incomplete results (protocol 2026-07-28) is
	// sealed under (HKDF-SHA256, then AES-256-GCM): the state of one
	// round, which the caller's retry brings to any replica, says which
	// call it belongs to, and no one can read, alter or reuse it for
	// another. Required: at least 32 bytes (cmd/usher gives the broker's
	// key encryption key).
	Secret []byte
	// PreviousSecrets are secrets Secret replaced (cmd/usher gives
	// broker.previous_key_encryption_keys): what they sealed — request
	// states, session handles, relayed requests' ids — still opens, until
	// it expires; nothing is sealed under them.
	PreviousSecrets [][]byte
	// InputLifetime is how long the caller has to answer a round's input
	// requests: a requestState older than that is refused. Default
	// DefaultInputLifetime (10 min).
	InputLifetime time.Duration
	// Canonicalize returns the RFC 8785 canonical form of a JSON text; the
	// arguments' hash is the SHA-256 of it. Default jcs.Canonicalize.
	Canonicalize func([]byte) ([]byte, error)
	// ApprovalURL returns the address at which a person reviews the
	// approval id, given in approval-required results. Default
	// PublicURL + "/approvals/" + id.
	ApprovalURL func(id string) string
	// Stateful keeps SDK sessions (Mcp-Session-Id). It allows a
	// standalone GET stream (listChanged), server-to-client requests
	// (relayed from upstreams, see CatalogOptions.RelayRequests) and
	// resumable response streams (an event store in memory, in this
	// process). A request that names no session and begins none (not an
	// initialize; a request of the sessionless protocol 2026-07-28, say)
	// is served as the stateless endpoint serves it. Without
	// Sessions a session lives in one process, so several replicas need
	// sticky routing; with Sessions any replica serves it. The default
	// (false) is stateless: any replica serves any request.
	Stateful bool
	// SessionTimeout closes a stateful session after this long without a
	// request. Default 30 min; ignored when stateless. With Sessions, it
	// closes this replica's copy of the session, not the session.
	SessionTimeout time.Duration
	// Sessions keeps the stateful sessions in the database, so that any
	// replica serves any request of a session (see sessions.go): its
	// Mcp-Session-Id is then a sealed handle of its record. Default nil:
	// a session lives in the process that opened it. Ignored when
	// stateless.
	Sessions SessionStore
	// SessionLifetime ends a session kept in Sessions this long after it
	// began, whatever happens before. Default DefaultSessionLifetime
	// (24 h).
	SessionLifetime time.Duration
	// AllowedOrigins are the browser origins (scheme://host[:port]) besides
	// PublicURL's that may call the endpoint. A request with any other
	// Origin is refused (403); one without an Origin (not from a browser)
	// is not.
	AllowedOrigins []string
	// AllowedHosts are host names besides PublicURL's and the loopback
	// names that a request reaching a loopback listener may carry in Host.
	// When set, every request must carry one of them (or a loopback name,
	// or PublicURL's host).
	AllowedHosts []string
	// MaxBodyBytes limits a request body (413 beyond). Default 1 MiB.
	MaxBodyBytes int64
	// Version is the server version announced to clients. Default "devel".
	Version string
	// Logger receives refusals and failures, never a token. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// RecordAttempts is how often a record that follows a tool call is
	// tried before the call's outcome counts as unknown: the execution's
	// finish (with its audit record), and the read-back of a start whose
	// write failed but may have committed. Default 8.
	RecordAttempts int
	// RecordBackoff is the wait before the second attempt; it doubles up
	// to 2 s. Default 50 ms: with 8 attempts, a finish that cannot be
	// written is given up on after about 5 s, and the execution is marked
	// outcome_unknown as soon as the database takes a write.
	RecordBackoff time.Duration
	// Registerer receives the Server's metrics (the stages of tool calls,
	// usher_mcp_tool_call_stage_seconds). Default none: not exported.
	Registerer prometheus.Registerer
}

// warmIdle is how long a goroutine of Server.warm waits for its next
// request's work before it ends: long enough to carry a steady load's
// gaps, so that a request rarely starts a goroutine, and to let a burst's
// goroutines go once it has passed.
const warmIdle = 10 * time.Second

// Server is Usher's MCP endpoint: a resource server that authenticates
// broker tokens and an enforcement point in front of the catalog.
type Server struct {
	opts Options
	// unknown counts the executions this process reported
	// outcome_unknown.
	unknown  prometheus.Counter
	catalog  *Catalog
	log      *slog.Logger
	origins  map[string]bool
	hosts    map[string]bool
	handler  http.Handler
	metadata http.Handler

	authAudits authAudits     // samples the records of refused tokens
	outcomes   *outcomes      // writes how calls ended after they answered
	detached   sync.WaitGroup // the SDK's handlers going on after their response (serveToResponse)
	warm       *workers.Pool  // runs a request's deep parts on goroutines grown to them (see dispatch)
	subs       *subscriptions
	durable    *durableSessions // the sessions kept in Options.Sessions; nil without
	states     *seal.Sealer     // seals the requestState of incomplete results
	stages     *stages          // times the stages of tool calls
	sdk        *mcp.Server
	// calls counts the tool calls and the governed requests (resource
	// reads, prompts) in progress (see callTool, govern): one that ends
	// with none other in progress writes its outcome at once
	// (store.WriteNow).
	calls atomic.Int64

	endpointPath  string   // the path of the endpoint
	metadataPaths []string // the paths of the metadata document
	metadataURL   string   // the resource_metadata of the challenges
}

// New returns a Server. Nil opts is an error: several fields are required.
func New(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Issuer == "" {
		o.Issuer = o.PublicURL
	}
	if o.Canonicalize == nil {
		o.Canonicalize = jcs.Canonicalize
	}
	base := strings.TrimSuffix(o.PublicURL, "/")
	if o.ApprovalURL == nil {
		o.ApprovalURL = func(id string) string { return base + "/approvals/" + url.PathEscape(id) }
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	if o.SessionLifetime == 0 {
		o.SessionLifetime = DefaultSessionLifetime
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
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
	if o.RecordAttempts == 0 {
		o.RecordAttempts = defaultRecordAttempts
	}
	if o.RecordBackoff == 0 {
		o.RecordBackoff = defaultRecordBackoff
	}
	if o.InputLifetime == 0 {
		o.InputLifetime = DefaultInputLifetime
	}

	var errs []error
	public, err := checkPublicURL("PublicURL", o.PublicURL)
	if err != nil {
		errs = append(errs, err)
	}
	if _, err := checkPublicURL("Issuer", o.Issuer); err != nil {
		errs = append(errs, err)
	}
	for _, dep := range []struct {
		name    string
		missing bool
	}{
		{"Verifier", o.Verifier == nil}, {"Catalog", o.Catalog == nil}, {"Decider", o.Decider == nil},
		{"Approvals", o.Approvals == nil}, {"Executions", o.Executions == nil}, {"Auditor", o.Auditor == nil},
	} {
		if dep.missing {
			errs = append(errs, fmt.Errorf("a %s is required", dep.name))
		}
	}
	origins := map[string]bool{}
	for _, origin := range o.AllowedOrigins {
		c := httpx.Origin(origin)
		if c == "" || strings.TrimSuffix(strings.ToLower(origin), "/") != c {
			errs = append(errs, fmt.Errorf("allowed origin %q must be an origin as a browser sends it: scheme://host[:port], without a default port or a path", origin))
		}
		origins[c] = true
	}
	hosts := map[string]bool{}
	for _, h := range o.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			errs = append(errs, fmt.Errorf("allowed host %q must be a host name without port", h))
		}
		hosts[strings.ToLower(h)] = true
	}
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes must not be negative, got %d", o.MaxBodyBytes))
	}
	if o.RecordAttempts < 0 || o.RecordBackoff < 0 {
		errs = append(errs, fmt.Errorf("RecordAttempts and RecordBackoff must not be negative, got %d and %s", o.RecordAttempts, o.RecordBackoff))
	}
	if len(o.Secret) < minSecretBytes {
		errs = append(errs, fmt.Errorf("a Secret of at least %d bytes is required, got %d", minSecretBytes, len(o.Secret)))
	}
	for i, p := range o.PreviousSecrets {
		if len(p) < minSecretBytes {
			errs = append(errs, fmt.Errorf("previous secret %d has %d bytes, want at least %d", i+1, len(p), minSecretBytes))
		}
	}
	if o.InputLifetime < 0 {
		errs = append(errs, fmt.Errorf("InputLifetime must not be negative, got %s", o.InputLifetime))
	}
	if o.SessionTimeout < 0 {
		errs = append(errs, fmt.Errorf("SessionTimeout must not be negative, got %s", o.SessionTimeout))
	}
	if o.SessionLifetime < 0 {
		errs = append(errs, fmt.Errorf("SessionLifetime must not be negative, got %s", o.SessionLifetime))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mcpserver: options: %w", err)
	}
	states, err := newStateSealer(o.Secret, o.PreviousSecrets...)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: options: %w", err)
	}
	st, err := newStages(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: metrics: %w", err)
	}
	unknown, err := newOutcomeUnknown(o.Registerer, unknownCall)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: metrics: %w", err)
	}
	origins[httpx.Origin(o.PublicURL)] = true
	hosts[strings.ToLower(public.Hostname())] = true

	// Each decision about a call and each audit write is a span.
	o.Decider, o.Auditor, o.Executions = tracedDecider{o.Decider}, tracedAuditor{o.Auditor}, tracedExecutions{o.Executions}
	warm := workers.New(warmIdle)
	s := &Server{
		opts: o, catalog: o.Catalog, log: o.Logger, origins: origins, hosts: hosts, warm: warm,
		outcomes: newOutcomes(o.RecordAttempts, o.RecordBackoff, warm),
		subs:     newSubscriptions(), states: states, stages: st, unknown: unknown,
		endpointPath:  strings.TrimSuffix(public.Path, "/") + "/mcp",
		metadataPaths: []string{wellKnown, wellKnown + strings.TrimSuffix(public.Path, "/") + "/mcp"},
	}
	s.metadataURL = public.Scheme + "://" + public.Host + s.metadataPaths[1]
	s.metadata = auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               base + "/mcp",
		AuthorizationServers:   []string{o.Issuer},
		ScopesSupported:        []string{scope},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Usher",
	})

	sopts := &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       sdkLogger(o.Logger, o.Stateful),
		// Tools are served by dispatch, not registered with the SDK, so
		// the capabilities are stated rather than inferred.
		Capabilities: capabilities(),
	}
	// Subscriptions are kept per session: a stateful one's, or a
	// stateless subscriptions/listen request's (protocol 2026-07-28).
	sopts.SubscribeHandler, sopts.UnsubscribeHandler = s.subscribeResource, s.unsubscribeResource
	if o.Stateful && o.Sessions != nil {
		if s.durable, err = newDurableSessions(s, o.Sessions, o.Secret); err != nil {
			return nil, fmt.Errorf("mcpserver: options: %w", err)
		}
		sopts.GetSessionID = s.durable.newHandle
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "usher", Title: "Usher", Version: o.Version}, sopts)
	srv.AddReceivingMiddleware(s.dispatch)
	// Added last, so outermost: the span covers the whole request.
	srv.AddReceivingMiddleware(s.traceRequests)
	srv.AddSendingMiddleware(s.filterUpdates)
	s.sdk = srv
	o.Catalog.watch(s.announce)
	o.Catalog.watchUpdates(s.resourceUpdated)
	var events mcp.EventStore
	if o.Stateful {
		// Its response streams are resumable (event ids, a priming event
		// for protocol 2025-11-25, Last-Event-ID) within this process, as
		// the session is. The SDK keeps at most 10 MiB of events.
		events = mcp.NewMemoryEventStore(nil)
		if o.Sessions != nil {
			// Any replica resumes them, as any serves the session.
			events = newDurableEvents(o.Sessions, s.log)
		}
	}
	handler := func(stateless bool, events mcp.EventStore) *mcp.StreamableHTTPHandler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
			Stateless:      stateless,
			EventStore:     events,
			SessionTimeout: o.SessionTimeout,
			Logger:         sdkLogger(o.Logger, !stateless),
			// checkHTTP does this check, and also allows the public
			// host, which a reverse proxy in front of a loopback
			// listener sends.
			DisableLocalhostProtection: true,
			MaxRequestBodyBytes:        o.MaxBodyBytes,
		})
	}
	sdk := handler(!o.Stateful, events)
	var endpoint http.Handler = sdk
	if s.durable != nil {
		s.durable.sdk, s.durable.events = sdk, events
		if err := s.durable.start(); err != nil {
			return nil, fmt.Errorf("mcpserver: hearing the answers of other replicas: %w", err)
		}
		endpoint = s.durable
	}
	sessionless := endpoint
	if o.Stateful {
		// The requests that name no session and begin none are served
		// as the stateless endpoint serves them (see Server.servedStateless).
		sessionless = handler(true, nil)
	}
	s.handler = s.checkHTTP(s.requireCaller(s.readBody(endpoint, sessionless)))
	return s, nil
}

// inSession reports whether a request belongs to a session that outlives
// it (a stateful endpoint's session, not a sessionless request's).
func inSession(req mcp.Request) bool {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	return ok && ss != nil && ss.ID() != ""
}

// wellKnown is the RFC 9728 well-known path of resource metadata.
const wellKnown = "/.well-known/oauth-protected-resource"

// instructions tell a model how calls are governed.
const instructions = "Usher runs each tool call under an approval policy. " +
	"A call may be denied, or may need a person's approval first: its result then says so and links the approval; " +
	"after it is approved, retry exactly the same call."

// checkPublicURL parses an absolute http(s) URL without query, fragment or
// user information.
func checkPublicURL(field, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("a %s is required", field)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("the %s %q must be an absolute http or https URL without query, fragment or user information", field, raw)
	}
	return u, nil
}

// Drain ends the Server's work: it closes the stateful sessions it holds
// (their subscriptions end, unsubscribed upstream), writes the priming
// events of their streams still waiting (see primeDelay), and waits until the
// records of every call that has answered are written (a call's outcome
// is recorded after its result is sent). When ctx ends
// first, it stops the writes still being retried, waits for them to
// return, and returns ctx's error: those executions stay started, to be
// reported outcome_unknown by a Sweeper. Call it after the HTTP server has
// stopped taking requests and before the store closes; it may be called
// again.
func (s *Server) Drain(ctx context.Context) error {
	for ss := range s.sdk.Sessions() {
		ss.Close()
	}
	s.subs.watchers.Wait() // each ends with its session
	if s.durable != nil {
		s.durable.wait()
		if events, ok := s.durable.events.(*durableEvents); ok {
			events.flushPrimes()
		}
	}
	// The SDK's handlers going on after their response close their
	// requests' sessions once their calls' outcomes are written; when ctx
	// ends first, the writes are still stopped, whatever is left of them.
	detached := waitGroup(ctx, &s.detached)
	defer s.warm.Close()
	if err := s.outcomes.wait(ctx); err != nil {
		return err
	}
	return detached
}

// InputLifetime is how long a caller has to answer a round's input
// requests (Options.InputLifetime).
func (s *Server) InputLifetime() time.Duration { return s.opts.InputLifetime }

// Handler returns the MCP endpoint, to serve at the path of PublicURL +
// "/mcp" (see Mount).
func (s *Server) Handler() http.Handler { return s.handler }

// MetadataHandler returns the RFC 9728 protected resource metadata of the
// endpoint, to serve at both "/.well-known/oauth-protected-resource" and
// "/.well-known/oauth-protected-resource/mcp" (see Mount). It answers GET,
// and CORS preflights from any origin: the document is public.
func (s *Server) MetadataHandler() http.Handler { return s.metadata }

// Mount registers Handler and MetadataHandler on mux at their paths.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle(s.endpointPath, s.handler)
	for _, p := range s.metadataPaths {
		mux.Handle(p, s.metadata)
	}
}

// methods are the MCP methods the endpoint serves; every other method is
// refused, whatever the SDK would do with it.
var methods = map[string]bool{
	"initialize":                       true,
	"notifications/initialized":        true,
	"notifications/cancelled":          true,
	"notifications/roots/list_changed": true,
	"server/discover":                  true,
	"ping":                             true,
	"logging/setLevel":                 true,
	"tools/list":                       true,
	"tools/call":                       true,
	"resources/list":                   true,
	"resources/templates/list":         true,
	"resources/read":                   true,
	"prompts/list":                     true,
	"prompts/get":                      true,
	"completion/complete":              true,
	// Served by the SDK, with subscribeResource: resources/subscribe and
	// resources/unsubscribe when stateful, subscriptions/listen (protocol
	// 2026-07-28) in either mode.
	"resources/subscribe":   true,
	"resources/unsubscribe": true,
	"subscriptions/listen":  true,
}

// dispatch is the SDK middleware that serves the listings, tools/call,
// resources/read, prompts/get and completion/complete from the catalog,
// through the enforcement point, for the caller that requireCaller
// attached to the request.
func (s *Server) dispatch(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !methods[method] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
		}
		var c Caller
		ok := false
		if extra := req.GetExtra(); extra != nil {
			c, ok = callerOf(extra.TokenInfo)
		}
		if !ok {
			// Unreachable through Handler; refuses a server wired
			// without it.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
		}
		ctx = withCaller(ctx, c)
		switch method {
		case "resources/subscribe", "resources/unsubscribe":
			if !inSession(req) {
				// A stateless session ends with its request: it has
				// nothing to send updates on. (Protocol 2026-07-28
				// subscribes with subscriptions/listen.)
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
			}
			if s.durable != nil {
				return s.recordSubscription(ctx, next, method, req)
			}
		case "initialize":
			return s.initialize(ctx, c, next, method, req)
		case "logging/setLevel":
			return s.setLevel(ctx, next, method, req)
		}
		// A call that goes through the policy, the store and an upstream
		// runs on a goroutine of s.warm, whose stack has grown to that
		// depth before: on the SDK's goroutine, new for each request, its
		// stack would grow there, copied each time, every call.
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			return s.listTools(ctx, c), nil
		case *mcp.CallToolRequest:
			ctx = withDownstream(ctx, r, inSession(r), s.record)
			var res *mcp.CallToolResult
			ctx, rejected := withRejection(ctx)
			s.warm.Run(func() { res = s.callTool(ctx, c, r.Params, r.ClientCapabilities()) })
			if *rejected != nil {
				return nil, *rejected
			}
			if !sessionless(r.Params.Meta) || res.NeedsInput() {
				return res, nil
			}
			return completeResult(res), nil
		case *mcp.ListResourcesRequest:
			return s.listResources(ctx, c), nil
		case *mcp.ListResourceTemplatesRequest:
			return s.listResourceTemplates(ctx, c), nil
		case *mcp.ReadResourceRequest:
			ctx = withRequestDownstream(ctx, r.Session, s.record)
			var res mcp.Result
			var err error
			s.warm.Run(func() { res, err = s.readResource(ctx, c, r.Params, r.ClientCapabilities()) })
			return res, err
		case *mcp.ListPromptsRequest:
			return s.listPrompts(ctx, c), nil
		case *mcp.GetPromptRequest:
			ctx = withRequestDownstream(ctx, r.Session, s.record)
			var res mcp.Result
			var err error
			s.warm.Run(func() { res, err = s.getPrompt(ctx, c, r.Params, r.ClientCapabilities()) })
			return res, err
		case *mcp.CompleteRequest:
			return s.complete(ctx, c, r.Params)
		}
		return next(ctx, method, req)
	}
}

// initialize answers the handshake of protocols before 2026-07-28. A
// stateless endpoint's capabilities name listChanged and subscribe for
// the callers of 2026-07-28, who hear of changes on a subscriptions/listen
// request; a caller of the handshake protocols would need a session to
// hear them on, which a stateless endpoint does not keep: its handshake
// answers them without.
func (s *Server) initialize(ctx context.Context, c Caller, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	res, err := next(ctx, method, req)
	ir, ok := res.(*mcp.InitializeResult)
	if err == nil && ok && s.durable != nil {
		if r, isInit := req.(*mcp.ServerRequest[*mcp.InitializeParams]); isInit && r.Session != nil && r.Session.ID() != "" {
			if err := s.durable.record(ctx, c, r, ir); err != nil {
				return nil, err
			}
		}
	}
	if err != nil || !ok || inSession(req) || ir.Capabilities == nil {
		return res, err
	}
	out := *ir
	out.Capabilities = capabilities()
	out.Capabilities.Tools.ListChanged, out.Capabilities.Prompts.ListChanged = false, false
	out.Capabilities.Resources.ListChanged, out.Capabilities.Resources.Subscribe = false, false
	return &out, nil
}

// sessionlessVersion is the first protocol version without sessions.
const sessionlessVersion = "2026-07-28"

// sessionless reports whether a request's _meta names protocol 2026-07-28
// or later, as the SDK decides it.
func sessionless(meta mcp.Meta) bool {
	v, _ := meta[mcp.MetaKeyProtocolVersion].(string)
	return v >= sessionlessVersion
}

// completeResult returns res with "resultType": "complete", which protocol
// 2026-07-28 requires of every tools/call result. The SDK sets it on the
// results of tool handlers registered with it, but the field is unexported
// and the endpoint answers tools/call itself, so the one way to set it is
// the SDK's own decoding: completeTemplate is decoded once, and each result
// is a copy of it with the fields of res that Usher passes on (see
// plainResult). A result that passes input requests on is not complete
// (see incompleteTool).
func completeResult(res *mcp.CallToolResult) *mcp.CallToolResult {
	tmpl, err := completeTemplate()
	if err != nil {
		return res // not with the SDK this is built with: TestCompleteResult checks
	}
	out := *tmpl
	out.Meta, out.Content, out.StructuredContent, out.IsError = res.Meta, res.Content, res.StructuredContent, res.IsError
	if out.Content == nil {
		out.Content = []mcp.Content{} // never null
	}
	return &out
}

// completeTemplate is an empty result whose resultType is "complete".
var completeTemplate = sync.OnceValues(func() (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[],"resultType":"complete"}`), &r); err != nil {
		return nil, err
	}
	return &r, nil
})

// listTools lists the tools the Decider does not deny the caller, in name
// order. A tool whose listing decision fails is not shown. The list depends
// on the caller, so only the caller's own client may cache it, and it is
// stale at once: policy or the catalog may change.
func (s *Server) listTools(ctx context.Context, c Caller) *mcp.ListToolsResult {
	res := &mcp.ListToolsResult{Tools: []*mcp.Tool{}, Cacheable: mcp.Cacheable{CacheScope: "private"}}
	for _, t := range s.catalog.snapshot(ctx).tools {
		v, err := s.opts.Decider.Decide(ctx, Call{
			Principal: c.Subject, Tenant: c.Tenant, Groups: c.Groups, ClientID: c.ClientID, RunID: c.RunID, TokenID: c.TokenID,
			Tool: t.def.Name, Server: t.server, DefinitionHash: t.hash, Listing: true,
		})
		if err != nil {
			s.log.ErrorContext(ctx, "mcpserver: the policy failed while listing; hiding the tool", "tool", t.def.Name, "err", err)
			continue
		}
		if v.Decision == Allow || v.Decision == Approve {
			res.Tools = append(res.Tools, t.listed)
		}
	}
	return res
}

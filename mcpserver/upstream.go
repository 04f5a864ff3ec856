package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/internal/httpx"
)

// Upstream is an MCP server whose tools the catalog re-exposes, reached
// over streamable HTTP (URL) or stdio (Command).
type Upstream struct {
	// Name names the upstream in logs, audit records and Call.Server.
	// Required: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'; unique.
	Name string
	// URL is the streamable HTTP endpoint. It must be https, or http on a
	// loopback host (or with InsecureAllowHTTP). Exactly one of URL and
	// Command is required.
	URL string
	// Command and Args start a stdio server, one process per caller
	// subject (and one for listing the tools).
	Command string
	Args    []string
	// Env is the stdio process's environment: exactly these variables,
	// plus PATH, HOME, TMPDIR and LANG from Usher's own unless Env sets
	// them. Nothing else of Usher's environment, which holds its secrets,
	// is passed on.
	Env map[string]string
	// Prefix is put before each of the upstream's tool and prompt names and
	// resource URIs (and URI templates). Default Name + "__"; 1 to 63 of
	// the characters of Name, or PrefixNone. A tool or prompt whose
	// prefixed name does not fit ^[a-zA-Z0-9_-]{1,64}$ is not offered.
	Prefix string
	// Headers are sent with every HTTP request to URL: the upstream's own
	// credentials, configured for it. They are never logged.
	Headers map[string]string
	// BrokerToken sends "Authorization: Bearer" with a broker token whose
	// audience is URL, from CatalogOptions.UpstreamTokens.
	BrokerToken bool
	// InsecureAllowHTTP allows a plain http URL on a host that is not
	// loopback, where credentials travel in the clear.
	InsecureAllowHTTP bool
}

// PrefixNone, as an Upstream's Prefix, exposes the upstream's names and
// URIs as they are. At most one upstream may have it: two would share one
// namespace. A name of it that begins with another upstream's prefix, or is
// a built-in tool's, is not offered (see Catalog).
const PrefixNone = "none"

// prefix returns what is put before the upstream's names: "" for
// PrefixNone.
func (u Upstream) prefix() string {
	if u.Prefix == PrefixNone {
		return ""
	}
	return u.Prefix
}

// toolName is the form of every tool name the catalog exposes.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// upstreamName is the form of an upstream's name.
var upstreamName = toolName

// prefixForm is the form of a prefix: it must leave room for a name.
var prefixForm = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,63}$`)

// reservedHeaders are set by the transport or the protocol; a configured
// header may not override them.
var reservedHeaders = []string{"Host", "Content-Length", "Content-Type", "Accept", "Connection", "Transfer-Encoding"}

// checkUpstreams validates the upstreams and fills in their prefixes. Two
// prefixes of which one begins the other could expose one name twice, so
// they are refused along with equal ones.
func checkUpstreams(ups []Upstream, haveToken bool) ([]Upstream, error) {
	var errs []error
	out := make([]Upstream, 0, len(ups))
	names := map[string]bool{}
	for i, u := range ups {
		if u.Prefix == "" {
			u.Prefix = u.Name + "__"
		}
		where := fmt.Sprintf("upstream %d (%q)", i, u.Name)
		if !upstreamName.MatchString(u.Name) {
			errs = append(errs, fmt.Errorf("%s: the name must be 1 to 64 of a-z, A-Z, 0-9, '_', '-'", where))
		}
		if names[u.Name] {
			errs = append(errs, fmt.Errorf("%s: the name is used twice", where))
		}
		names[u.Name] = true
		switch {
		case u.Prefix == PrefixNone:
			for _, v := range out {
				if v.Prefix == PrefixNone {
					errs = append(errs, fmt.Errorf("%s: prefix %q is also that of %q: two upstreams without a prefix would share one namespace, and their names could collide; give one of them a prefix", where, PrefixNone, v.Name))
				}
			}
		case !prefixForm.MatchString(u.Prefix):
			errs = append(errs, fmt.Errorf("%s: the prefix %q must be 1 to 63 of a-z, A-Z, 0-9, '_', '-', or %q", where, u.Prefix, PrefixNone))
		default:
			for _, v := range out {
				if v.Prefix != PrefixNone && (strings.HasPrefix(u.Prefix, v.Prefix) || strings.HasPrefix(v.Prefix, u.Prefix)) {
					errs = append(errs, fmt.Errorf("%s: the prefix %q overlaps the prefix %q of %q", where, u.Prefix, v.Prefix, v.Name))
				}
			}
		}
		switch {
		case (u.URL == "") == (u.Command == ""):
			errs = append(errs, fmt.Errorf("%s: exactly one of url and command is required", where))
		case u.URL != "":
			if err := checkUpstreamURL(u.URL, u.InsecureAllowHTTP); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
			if len(u.Args) > 0 || len(u.Env) > 0 {
				errs = append(errs, fmt.Errorf("%s: args and env are for a command", where))
			}
		default:
			if len(u.Headers) > 0 || u.BrokerToken {
				errs = append(errs, fmt.Errorf("%s: headers and broker tokens are for a url; give a command its credentials in env", where))
			}
			for k := range u.Env {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					errs = append(errs, fmt.Errorf("%s: the environment variable name %q is not valid", where, k))
				}
			}
		}
		for k, v := range u.Headers {
			if !isToken(k) || strings.ContainsAny(v, "\r\n\x00") {
				errs = append(errs, fmt.Errorf("%s: the header %q is not a valid header", where, k))
			}
			if slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, k) }) ||
				strings.HasPrefix(strings.ToLower(k), "mcp-") {
				errs = append(errs, fmt.Errorf("%s: the header %q is set by the transport", where, k))
			}
			if u.BrokerToken && strings.EqualFold(k, "Authorization") {
				errs = append(errs, fmt.Errorf("%s: an Authorization header and a broker token exclude each other", where))
			}
		}
		if u.BrokerToken && !haveToken {
			errs = append(errs, fmt.Errorf("%s: a broker token needs CatalogOptions.UpstreamTokens", where))
		}
		out = append(out, u)
	}
	return out, errors.Join(errs...)
}

// checkUpstreamURL requires https, or http on loopback unless insecure.
func checkUpstreamURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("the url %q must be an absolute URL without user information or fragment", raw)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (insecure || httpx.IsLoopbackHost(u.Hostname())):
	default:
		return fmt.Errorf("the url %q must be https (or http on a loopback host, or set insecure_allow_http)", raw)
	}
	return nil
}

// upstream is a configured upstream within its catalog.
type upstream struct {
	cfg   Upstream
	cat   *Catalog
	stats *upstreamStats
}

// maxUpstreamPages bounds the pages of one tools/list.
const maxUpstreamPages = 50

// list lists the upstream's tools, resources, resource templates and
// prompts, as the catalog exposes them, and records whether it could.
func (u *upstream) list(ctx context.Context) (*offering, error) {
	o, err := u.listOnce(ctx)
	u.stats.record(u.cat.opts.Now(), o, err)
	return o, err
}

// listOnce lists the upstream on the catalog's own session to it.
func (u *upstream) listOnce(ctx context.Context) (*offering, error) {
	c, err := u.cat.pool.acquire(ctx, u, connKey{upstream: u.cfg.Name})
	if err != nil {
		return nil, err
	}
	defer u.cat.pool.release(c)
	o := &offering{}
	if ir := c.session.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Tools != nil {
		err = u.listTools(ctx, c.session, o)
	}
	if err == nil {
		err = u.listFeatures(ctx, c.session, o)
	}
	if err != nil {
		if !notSent(err) {
			u.cat.pool.broken(c)
		}
		return nil, err
	}
	return o, nil
}

// listTools lists the upstream's tools on the session cs.
func (u *upstream) listTools(ctx context.Context, cs *mcp.ClientSession, o *offering) error {
	return pages(func(cursor string) (string, error) {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return "", err
		}
		for _, t := range res.Tools {
			exposed := u.cfg.prefix() + t.Name
			if !toolName.MatchString(exposed) {
				o.refused = append(o.refused, refusal{kind: "tool", name: exposed, why: "its name does not fit " + toolName.String()})
				continue
			}
			def, err := definitionOf(exposed, t)
			if err == nil {
				var tl *tool
				if tl, err = u.cat.newTool(def, u.cfg.Name, nil, u.caller(t.Name)); err == nil {
					o.tools = append(o.tools, tl)
					continue
				}
			}
			o.refused = append(o.refused, refusal{kind: "tool", name: exposed, why: "its definition is not usable: " + truncate(err.Error(), 256)})
		}
		return res.NextCursor, nil
	})
}

// definitionOf is the definition of an upstream tool under its exposed
// name, its schemas and annotations re-encoded as JSON.
func definitionOf(exposed string, t *mcp.Tool) (ToolDefinition, error) {
	def := ToolDefinition{Name: exposed, Title: t.Title, Description: t.Description}
	var err error
	if def.InputSchema, err = json.Marshal(t.InputSchema); err != nil {
		return def, err
	}
	if t.OutputSchema != nil {
		if def.OutputSchema, err = json.Marshal(t.OutputSchema); err != nil {
			return def, err
		}
	}
	if t.Annotations != nil {
		if def.Annotations, err = json.Marshal(t.Annotations); err != nil {
			return def, err
		}
	}
	return def, nil
}

// notSent reports whether err, from a call to an upstream, says that the
// call did not run: the upstream answered it with a JSON-RPC error, or the
// request could not be sent at all (no connection could be made, or the
// upstream had forgotten the shared session it went out on and no other
// could be opened: see sharedSession). The SDK
// reports every failure of its HTTP round trip as "rejected by transport",
// also a connection lost after the request went out, when the upstream
// may have run the call: that is not a refusal.
func notSent(err error) bool {
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	if rpcErr.Code != codeRejectedByTransport || errors.Is(err, errUpstreamNotSent) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// codeRejectedByTransport is the go-sdk's JSON-RPC code for a request its
// transport failed to deliver or to get an answer to.
const codeRejectedByTransport = -32005

// errOutcomeUnknown marks a failure after which a call may or may not have
// taken effect.
var errOutcomeUnknown = errors.New("outcome unknown")

// caller returns the handler that calls the upstream tool name (its own
// name, without the prefix) on the caller's session.
func (u *upstream) caller(name string) func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
		c, ok := CallerFromContext(ctx)
		if !ok {
			return nil, errors.New("no caller in the context")
		}
		ctx, span := startUpstreamCall(ctx, u, name)
		defer span.End()
		ctx, cancel := context.WithTimeout(ctx, u.cat.opts.CallTimeout)
		defer cancel()
		key, r, rounds, ds := u.sessionOf(ctx, c)
		conn, err := u.cat.pool.acquire(ctx, u, key)
		if errors.Is(err, errTooManySessions) || errors.Is(err, errTooManyUserSessions) {
			u.stats.failed(CallBusy)
			// Nothing was sent: the call did not run, and may be tried
			// again once a session is free (a 429, as a tool error).
			u.cat.log.WarnContext(ctx, "mcpserver: an upstream call was refused", "upstream", u.cfg.Name, "err", err)
			if errors.Is(err, errTooManyUserSessions) {
				return errorResult(fmt.Sprintf("Too many of your calls to upstream tools are in progress at once (at most %d sessions per user). Nothing was run; try again when one has finished.", u.cat.pool.maxUser)), nil
			}
			return errorResult("Too many upstream sessions are in use on this server. Nothing was run; try again in a moment."), nil
		}
		if err != nil {
			u.stats.failed(CallNotSent)
			// Nothing was sent: the call certainly did not run.
			return nil, fmt.Errorf("connect to upstream %s: %w", u.cfg.Name, err)
		}
		held := rounds && !speaksRounds(conn.session)
		if held && r.resumesHeld() {
			// A later round of a held call: the call is already open.
			u.cat.pool.release(conn)
			return toolRound(u.resumeHeld(ctx, c.Subject, r, heldResult[mcp.CallToolResult], refuseTool))
		}

		f := &inflight{ctx: ctx, downstream: ds, id: rand.Text(), upstream: u.cfg.Name, tool: u.cfg.prefix() + name}
		ctx = context.WithValue(ctx, inflightKey{}, f)
		conn.track(f)
		meta := mcp.Meta{}
		if ds.progressToken != nil {
			meta["progressToken"] = f.id
		}
		askForLogs(meta, ds)
		params := &mcp.CallToolParams{Meta: meta, Name: name, Arguments: args}
		if rounds && !held {
			params.Meta, params.InputResponses, params.RequestState = r.meta(meta), r.responses, r.state
		} else if !rounds && key.offers != "" && speaksRounds(conn.session) {
			// The SDK meets an upstream's input requests itself here, and
			// roots from a list of its own (empty): such an upstream is
			// told of no roots, so it asks for none.
			params.Meta = relayMeta(params.Meta)
		} else if held && r.state != "" {
			// The upstream's own round ended its held call (see outcome):
			// its answers go with its state, as a new call.
			params.InputResponses, params.RequestState = r.responses, r.state
		}
		sent := time.Now()
		outcome := func(ctx context.Context, res *mcp.CallToolResult, err error) (*mcp.CallToolResult, error) {
			return u.outcome(ctx, conn, f, sent, res, err)
		}
		if held {
			// The upstream asks for input on its stream, as its protocol
			// does: the call is held open for the caller's rounds.
			h := u.startHeld(ctx, conn, f, r, func(ctx context.Context) (mcp.Result, error) {
				res, err := conn.session.CallTool(ctx, params)
				if cancelled := heldCancelled(ctx, u.cfg.Name, err); cancelled != nil {
					return nil, cancelled
				}
				return result(outcome(ctx, res, err))
			})
			return toolRound(h.round(ctx))
		}
		defer u.cat.pool.release(conn)
		defer conn.untrack(f)
		res, err := conn.session.CallTool(ctx, params)
		return outcome(ctx, res, err)
	}
}

// sessionOf returns the pool key of the session on which a request of
// caller c goes to u, with the round the request is (and whether c speaks
// rounds) and the downstream it serves: the session offers the upstream
// what a caller of rounds declared (see round.offers), or what a stateful
// caller's requests are relayed for (see relayOffers).
func (u *upstream) sessionOf(ctx context.Context, c Caller) (connKey, *round, bool, downstream) {
	r, rounds := roundOf(ctx)
	ds, _ := ctx.Value(downstreamKey{}).(downstream)
	key := connKey{upstream: u.cfg.Name, subject: c.Subject, rounds: rounds}
	switch {
	case rounds:
		key.offers = r.offers()
	case u.cat.opts.RelayRequests:
		key.offers = relayOffers(ds)
	}
	return key, r, rounds, ds
}

// toolRound is a held tool call's round or result as a tools/call
// result.
func toolRound(res mcp.Result, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		return nil, err
	}
	r, ok := res.(*mcp.CallToolResult)
	if !ok {
		return nil, fmt.Errorf("%w: a held tool call ended with a result of another kind (%T)", errOutcomeUnknown, res)
	}
	return r, nil
}

// refuseTool answers a retry of a held tool call that cannot go on with a
// tool error.
func refuseTool(text string) (mcp.Result, error) { return errorResult(text), nil }

// outcome turns how a call to the upstream on conn, sent at sent, ended
// into the call's result or error.
func (u *upstream) outcome(ctx context.Context, conn *conn, f *inflight, sent time.Time, res *mcp.CallToolResult, err error) (*mcp.CallToolResult, error) {
	span := trace.SpanFromContext(ctx)
	if u.cfg.Command != "" {
		conn.awaitNotes(ctx)
	}
	u.stats.duration.Observe(time.Since(sent).Seconds())
	if err != nil {
		u.stats.failed(callKind(ctx, err))
		span.SetStatus(codes.Error, "")
		if notSent(err) {
			// The upstream answered (it refused the call), or the
			// request never left: the call did not run.
			return nil, fmt.Errorf("upstream %s refused the call: %w", u.cfg.Name, err)
		}
		u.cat.pool.broken(conn)
		if f.stream.ended.Load() {
			return nil, fmt.Errorf("%w: upstream %s: %v", errStreamEnded, u.cfg.Name, err)
		}
		return nil, fmt.Errorf("%w: upstream %s: %v", errOutcomeUnknown, u.cfg.Name, err)
	}
	// An upstream may not speak for Usher: the "usher/" keys of
	// _meta (an approval link, say) are Usher's alone, and the
	// protocol's own keys described the upstream hop, not this one.
	for k := range res.Meta {
		if strings.HasPrefix(k, "usher/") || strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(res.Meta, k)
		}
	}
	if res.IsError {
		u.stats.failed(CallUpstreamError)
	}
	out := plainResult(res)
	// An upstream of an earlier protocol has no resultType, and its SDK
	// fulfils one round of its handler's input requests with requests of
	// its own, then answers the next with the handler's input requests.
	if ask := askOf(res.NeedsInput() || res.InputRequests != nil, res.InputRequests, res.RequestState); ask != nil {
		// A round that asks for input has no content of its own.
		out.Content, out.StructuredContent, out.IsError = []mcp.Content{}, nil, false
		out.InputRequests, out.RequestState = ask.requests, ask.state
	}
	return out, nil
}

// connect opens a client session to the upstream for the conn's subject.
func (u *upstream) connect(ctx context.Context, c *conn) (*mcp.ClientSession, error) {
	ctx, cancel := connectContext(ctx)
	defer cancel()
	copts := &mcp.ClientOptions{
		// Sampling, elicitation and roots only when passed on to the
		// caller: otherwise an upstream may not ask the caller for
		// anything.
		Capabilities: &mcp.ClientCapabilities{},
		Logger:       u.cat.log.With("upstream", u.cfg.Name),
	}
	var roots rootsHandler
	if c.key.rounds {
		// The caller speaks protocol 2026-07-28: the upstream's requests
		// for input reach Usher as incomplete results, to be passed on
		// through the enforcement point, and each request declares the
		// caller's capabilities (see round.meta).
		copts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
		// An upstream of an earlier protocol asks with requests of its
		// own, which become rounds (see heldCall).
		roots = c.handleHeldRequests(copts, &u.cat.held, c.key.offers)
	} else if u.cat.opts.RelayRequests && c.key.subject != "" {
		roots = c.handleRequests(copts, c.key.offers)
	}
	if u.cfg.Command != "" {
		// Over HTTP, the credentials transport passes notifications on
		// as it reads them (see sseTap); over stdio only the SDK sees
		// them.
		c.handleNotifications(copts)
	}
	if c.key.subject == "" {
		// The catalog's own session hears of changes to the upstream's
		// lists (see Catalog.changed); the callers' sessions need not.
		copts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { u.cat.changed() }
		copts.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) { u.cat.changed() }
		copts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) { u.cat.changed() }
		copts.ResourceUpdatedHandler = func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if req.Params != nil {
				u.cat.updated(u, req.Params.URI)
			}
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "usher", Version: u.cat.opts.Version}, copts)
	client.AddReceivingMiddleware(upstreamRequests(roots, copts.ElicitationHandler))
	var t mcp.Transport
	if u.cfg.URL != "" {
		base := u.cat.opts.HTTPClient
		cred := u.credentials(c.key.subject)
		var transport http.RoundTripper = cred
		if shared := u.sharedSession(c.key, cred); shared != nil {
			// The replicas share the caller's session to the upstream
			// (see sharedSession).
			transport = shared
			c.shared.Store(shared)
		}
		t = &mcp.StreamableClientTransport{
			Endpoint: u.cfg.URL,
			HTTPClient: &http.Client{Transport: transport, Timeout: base.Timeout,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
			// Notifications are passed on only on the stream of the call
			// that caused them; the catalog's own session keeps the
			// standalone stream, on which an upstream announces changes
			// to its lists.
			DisableStandaloneSSE: c.key.subject != "",
		}
	} else {
		cmd := exec.Command(u.cfg.Command, u.cfg.Args...)
		cmd.Env = u.env()
		cmd.Stderr = &stderrLog{log: u.cat.log, upstream: u.cfg.Name}
		t = &notesTransport{Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, c: c}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, err
	}
	if err := askSessionForLogs(ctx, cs); err != nil {
		u.cat.log.Debug("mcpserver: an upstream refused a logging level", "upstream", u.cfg.Name, "err", err)
	}
	return cs, nil
}

// credentials returns the transport of the HTTP requests to the upstream
// on behalf of subject ("" for the catalog's own): the upstream's headers
// and, with BrokerToken, the subject's token.
func (u *upstream) credentials(subject string) *credentials {
	rt := u.cat.opts.HTTPClient.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	cred := &credentials{base: rt, headers: http.Header{}, subject: subject}
	for k, v := range u.cfg.Headers {
		cred.headers.Set(k, v)
	}
	if u.cfg.BrokerToken {
		cred.tokens, cred.audience = u.cat.opts.UpstreamTokens, u.cfg.URL
	}
	return cred
}

// connectContext returns the context an upstream session is opened with:
// the deadline and cancellation of ctx, the request that needs the
// session, and none of its values. The session outlives that request and
// the SDK keeps the values of the context it was opened with: the
// caller's protocol version (which the SDK would send in the upstream's
// handshake, refused by an upstream that does not speak it), its stream
// and its identity are that request's, not the upstream session's.
func connectContext(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancelCause(context.Background())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	if deadline, ok := ctx.Deadline(); ok {
		var cancelDeadline context.CancelFunc
		out, cancelDeadline = context.WithDeadline(out, deadline)
		return out, func() { stop(); cancelDeadline(); cancel(context.Canceled) }
	}
	return out, func() { stop(); cancel(context.Canceled) }
}

// env is the environment of a stdio upstream.
func (u *upstream) env() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if _, set := u.cfg.Env[k]; !set {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(u.cfg.Env)) {
		env = append(env, k+"="+u.cfg.Env[k])
	}
	if env == nil {
		env = []string{} // not nil, which would mean Usher's whole environment
	}
	return env
}

// credentials is the HTTP transport to an upstream: every request carries
// the upstream's configured headers and, if configured, a broker token for
// its URL, and nothing else of the kind.
type credentials struct {
	base     http.RoundTripper
	headers  http.Header
	tokens   TokenSource
	audience string
	subject  string // the session's caller subject; empty for the catalog
}

// RoundTrip sends r with the upstream's credentials.
func (t *credentials) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	for k, v := range t.headers {
		r.Header[k] = slices.Clone(v)
	}
	if t.tokens != nil {
		subject := t.subject
		if subject == "" {
			subject = CatalogSubject
		}
		tok, err := t.tokens.Token(r.Context(), subject, t.audience)
		if err != nil {
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, fmt.Errorf("mcpserver: a token for the upstream: %w", err)
		}
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	// The trace context of the call (W3C traceparent), when tracing is
	// on: the upstream's spans join the caller's trace.
	otel.GetTextMapPropagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	resp, err := t.base.RoundTrip(r)
	if f, ok := r.Context().Value(inflightKey{}).(*inflight); ok && err == nil && isEventStream(resp) {
		resp.Body = &sseTap{body: resp.Body, f: f}
	}
	return resp, err
}

// stderrLog logs what a stdio upstream writes to its standard error.
type stderrLog struct {
	log      *slog.Logger
	upstream string
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.log.Debug("mcpserver: upstream stderr", "upstream", w.upstream, "text", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connKey names an upstream session: one per upstream and caller subject,
// so that no upstream session ever serves two users, and per the way the
// upstream's requests for input are met (passed on to a caller of protocol
// 2026-07-28, or relayed as requests to a stateful caller).
type connKey struct {
	upstream string
	subject  string // "" for the catalog's own session
	rounds   bool   // the upstream's incomplete results reach Usher
	// offers is what a session of rounds offers an upstream of a protocol
	// before 2026-07-28, which asks by the session's capabilities: the
	// caller's (see round.offers).
	offers string
}

// DefaultMaxSessions is the default of CatalogOptions.MaxSessions: enough
// for a few hundred users active at once on a few upstreams, few enough
// that their stdio processes fit one machine.
const DefaultMaxSessions = 256

// DefaultMaxSessionsPerUser is the default of
// CatalogOptions.MaxSessionsPerUser: a user's sessions to as many
// upstreams, and a few opened again after failing while their calls were
// still running.
const DefaultMaxSessionsPerUser = 16

// conn is a session to an upstream, shared by the calls of one subject.
type conn struct {
	key   connKey
	ready chan struct{} // closed once session and err are set

	session *mcp.ClientSession
	err     error

	// Guarded by pool.mu.
	refs     int
	idle     *time.Timer
	failed   bool
	lastUsed uint64 // pool.uses when it was last released
	retired  bool   // no longer counted against its subject's bound

	// shared is the transport of a session the replicas share, set
	// as it is opened; nil for any other.
	shared atomic.Pointer[sharedSession]

	mu       sync.Mutex
	inflight map[string]*inflight // by the id given to the upstream as progress token
	// Over stdio: the progress and log notifications read from the
	// process, those handed over (see notes), and a channel closed at
	// each hand-over.
	notesRead, notesHanded int64
	noteHanded             chan struct{}
}

func (c *conn) track(f *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight[f.id] = f
}

func (c *conn) untrack(f *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, f.id)
}

// errCatalogClosed is returned by calls after Catalog.Close.
var errCatalogClosed = errors.New("mcpserver: the catalog is closed")

// pool keeps the upstream sessions: opened on first use, shared by one
// subject's calls, closed after being idle, on failure, when the least
// recently used of max, and by close.
type pool struct {
	mu      sync.Mutex
	conns   map[connKey]*conn
	idle    time.Duration
	max     int
	maxUser int            // sessions one subject may have open, across upstreams
	byUser  map[string]int // sessions open per subject, failed ones still in use included
	uses    uint64         // counts releases, to order idle sessions by last use
	closed  bool
}

// errTooManySessions refuses a session when max are open and all in use.
var errTooManySessions = errors.New("mcpserver: too many upstream sessions are in use; try again later")

// errTooManyUserSessions refuses a session when its subject has maxUser
// open and all in use.
var errTooManyUserSessions = errors.New("mcpserver: too many upstream sessions of this user are in use; try again later")

// evictLocked makes room for one more session of subject: at the
// subject's bound, it takes the subject's least recently used idle
// session out of the pool; at max, the least recently used idle session
// of anyone. It returns what it took out, to be closed outside the lock,
// also when it then fails because every session that counts is in use.
func (p *pool) evictLocked(subject string) ([]*conn, error) {
	var out []*conn
	if subject != "" && p.byUser[subject] >= p.maxUser {
		lru := p.lruIdleLocked(subject)
		if lru == nil {
			return out, errTooManyUserSessions
		}
		out = append(out, p.takeOutLocked(lru))
	}
	if len(p.conns) < p.max {
		return out, nil
	}
	lru := p.lruIdleLocked("")
	if lru == nil {
		return out, errTooManySessions
	}
	return append(out, p.takeOutLocked(lru)), nil
}

// lruIdleLocked returns the least recently used idle session of subject,
// or of anyone for "", or nil when there is none.
func (p *pool) lruIdleLocked(subject string) *conn {
	var lru *conn
	for _, c := range p.conns {
		if c.refs == 0 && c.idle != nil && (subject == "" || c.key.subject == subject) && (lru == nil || c.lastUsed < lru.lastUsed) {
			lru = c
		}
	}
	return lru
}

// takeOutLocked takes an idle session out of the pool, to be closed.
func (p *pool) takeOutLocked(c *conn) *conn {
	c.idle.Stop()
	c.idle = nil
	delete(p.conns, c.key)
	p.retireLocked(c)
	return c
}

// retireLocked stops counting c against its subject's bound, once: c is
// being closed.
func (p *pool) retireLocked(c *conn) {
	if c.retired || c.key.subject == "" {
		c.retired = true
		return
	}
	c.retired = true
	if p.byUser[c.key.subject]--; p.byUser[c.key.subject] <= 0 {
		delete(p.byUser, c.key.subject)
	}
}

// acquire returns the session key names, opening it if needed. The
// caller must release it.
func (p *pool) acquire(ctx context.Context, u *upstream, key connKey) (*conn, error) {
	subject := key.subject
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errCatalogClosed
	}
	c := p.conns[key]
	opener := c == nil
	var evicted []*conn
	if opener {
		var err error
		if evicted, err = p.evictLocked(subject); err != nil {
			p.mu.Unlock()
			for _, e := range evicted {
				e.close()
			}
			return nil, err
		}
		c = &conn{key: key, ready: make(chan struct{}), inflight: map[string]*inflight{}}
		p.conns[key] = c
		if subject != "" {
			p.byUser[subject]++
		}
	}
	c.refs++
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	p.mu.Unlock()
	for _, e := range evicted {
		e.close()
	}

	if opener {
		cs, err := u.connect(ctx, c)
		p.mu.Lock()
		if err == nil && p.closed {
			_ = cs.Close()
			cs, err = nil, errCatalogClosed
		}
		c.session, c.err = cs, err
		close(c.ready)
		p.mu.Unlock()
	} else {
		select {
		case <-c.ready:
		case <-ctx.Done():
			p.release(c)
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		p.broken(c)
		p.release(c)
		return nil, c.err
	}
	return c, nil
}

// release gives a session back. The last user of a failed session closes
// it; an idle one is closed after the idle timeout.
func (p *pool) release(c *conn) {
	p.mu.Lock()
	c.refs--
	if c.refs > 0 {
		p.mu.Unlock()
		return
	}
	if !c.failed && !p.closed {
		p.uses++
		c.lastUsed = p.uses
		if c.key.subject == "" {
			// The catalog's session (one per upstream) stays open to hear
			// of changes to the upstream's lists: it never expires, but is
			// idle (a timer that never fires), so that at the bound it is
			// closed like any other idle session, to be opened again by
			// the next listing.
			c.idle = time.AfterFunc(math.MaxInt64, func() {})
			p.mu.Unlock()
			return
		}
		c.idle = time.AfterFunc(p.idle, func() { p.expire(c) })
		p.mu.Unlock()
		return
	}
	if p.conns[c.key] == c {
		delete(p.conns, c.key)
	}
	p.retireLocked(c)
	p.mu.Unlock()
	c.close()
}

// broken takes a failed session out of the pool: the next call opens a new
// one.
func (p *pool) broken(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.failed = true
	if p.conns[c.key] == c {
		delete(p.conns, c.key)
	}
}

// expire closes a session that stayed idle.
func (p *pool) expire(c *conn) {
	p.mu.Lock()
	if c.refs > 0 || c.idle == nil || p.conns[c.key] != c {
		p.mu.Unlock()
		return
	}
	c.idle = nil
	delete(p.conns, c.key)
	p.retireLocked(c)
	p.mu.Unlock()
	c.close()
}

// close closes every session; later acquires fail.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	var open []*conn
	for _, c := range p.conns {
		if c.idle != nil {
			c.idle.Stop()
			c.idle = nil
		}
		select {
		case <-c.ready:
			open = append(open, c)
		default:
			// Its opener sees closed and closes it.
		}
	}
	clear(p.conns)
	p.mu.Unlock()
	for _, c := range open {
		c.close()
	}
}

// close closes the session, once it is open.
func (c *conn) close() {
	<-c.ready
	if c.session != nil {
		_ = c.session.Close()
	}
}

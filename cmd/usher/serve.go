package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usherhq/usher/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/auditsink"
	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/telemetry"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/status"
	"github.com/usherhq/usher/store"
)

// serve runs `usher serve`: it starts the parts below in order, each
// stopped (in reverse order) when serving ends or a later part fails to
// start, and serves until ctx is done. What can fail without leaving state
// behind is checked first: the listen address and the API's verifier (an
// external issuer's discovery) come before the database is migrated or a
// key file is written.
func (e *environment) serve(ctx context.Context, args []string) error {
	s := &serving{env: e, mux: http.NewServeMux()}
	fs := e.flagSet("serve")
	s.flags.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig(&s.flags)
	if err != nil {
		return err
	}
	s.cfg, s.log = cfg, log
	if d := drainOf(ctx); d != nil {
		var cancel context.CancelFunc
		ctx, cancel = d.serving(cfg.Server.ShutdownDelay.Std(), s.startDraining)
		defer cancel()
	}
	defer tuneGC(log)()
	defer s.stop()
	for _, start := range []func(context.Context) error{
		s.listen,
		s.debug,
		s.telemetry,
		s.identity,
		s.open,
		s.brokerKeys,
		s.health,
		s.devProvider,
		s.web,
		s.statusView,
		s.assistant,
		s.mcp,
		s.auditCheckpoints,
		s.oauth,
		s.review,
		s.sweeps,
		s.auditSinks,
		s.notFound,
	} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	return s.serve(ctx)
}

// serving is what serve has started so far.
type serving struct {
	env   *environment
	flags installFlags
	cfg   config.Config
	log   *slog.Logger
	mux   *http.ServeMux
	// stops are the started parts' stops, run last first.
	stops []func()
	// draining is set once SIGTERM has come: /readyz answers 503.
	draining atomic.Bool

	ln                  net.Listener
	localURL, publicURL string
	selfURL             string // where the process calls itself: see selfURL
	debugAddr           string // where the profiles are served, if they are
	metricsURL          string // where /metrics is served
	tel                 *telemetry.Telemetry
	in                  *installation
	keys                *broker.Keyring
	mint                *broker.Broker
	reg                 *prometheus.Registry
	verifier            *identity.Verifier
	authenticated       func(http.Handler) http.Handler
	runtime             *assistant.Runtime
	mcpStack            *mcpStack
	// auditKeys sign the audit checkpoints and publish their verifier
	// keys (auditCheckpoints sets them; review checks the checkpoints
	// against them).
	auditKeys *audit.Keys
	// upstreams is what the heartbeat reports of the upstreams: the
	// configured ones until the MCP server's health check reports them.
	upstreams *status.CheckedUpstreams
	oauthSrv  *oauth.Server
}

// onStop adds f to what stop runs.
func (s *serving) onStop(f func()) { s.stops = append(s.stops, f) }

// stop stops the started parts, the last started first.
func (s *serving) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// startDraining fails the readiness probe for server.shutdown_delay
// before the shutdown (see drain).
func (s *serving) startDraining() {
	s.draining.Store(true)
	s.log.Info("draining: /readyz answers 503 until the shutdown", "delay", s.cfg.Server.ShutdownDelay.Std())
}

// listen listens first: with port 0 the public URL is only known afterwards.
func (s *serving) listen(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.onStop(func() { ln.Close() })
	s.ln = ln
	s.localURL = "http://" + ln.Addr().String()
	s.publicURL = cmp.Or(s.cfg.Server.PublicURL, s.localURL)
	s.selfURL = selfURL(ln.Addr())
	return nil
}

// selfURL is where this process calls itself (the development provider's
// keys and tokens): the listener's address, or loopback on its port when
// it listens on every address (0.0.0.0, ::), as in a container. Go's
// wildcard listener takes IPv4 as well, so 127.0.0.1 reaches either.
func selfURL(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	return "http://" + addr.String()
}

// checkDevIdentity explains, before the verifier's own checks would in
// terms of its options, why the development provider cannot run here: it
// is its own issuer at the public URL, and calls itself at selfURL.
func checkDevIdentity(publicURL, selfURL string) error {
	if u, err := url.Parse(publicURL); err != nil || (u.Scheme != "https" && !httpx.IsLoopbackHost(u.Hostname())) {
		return fmt.Errorf("the development sign-in (no identity.issuer) is its own issuer at the public URL, %s, which must be https or http on a loopback host: set server.public_url (e.g. http://127.0.0.1:8080, reached through a port forward), or identity.issuer", publicURL)
	}
	if u, err := url.Parse(selfURL); err != nil || !httpx.IsLoopbackHost(u.Hostname()) {
		return fmt.Errorf("the development sign-in (no identity.issuer) calls this process at %s, which is not loopback: listen on loopback or on every address (server.addr), or set identity.issuer", selfURL)
	}
	return nil
}

// debug serves the profiles on server.debug_addr, or turns heap sampling
// off when there is none.
func (s *serving) debug(ctx context.Context) error {
	if s.cfg.Server.DebugAddr == "" {
		stopHeapSampling()
		return nil
	}
	d, err := startDebug(ctx, s.cfg.Server.DebugAddr, s.log)
	if err != nil {
		return err
	}
	s.onStop(func() { d.stop() }) //nolint:errcheck // the process is stopping
	s.debugAddr = d.addr
	return nil
}

// telemetry exports traces when the OTEL_* variables name an OTLP
// endpoint; the spans still batched are sent when serving ends.
func (s *serving) telemetry(ctx context.Context) error {
	tel, err := telemetry.Setup(ctx, s.env.getenv, buildinfo.Read().Version, s.log.With("component", "telemetry"))
	if err != nil {
		return err
	}
	s.tel = tel
	s.onStop(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Server.ShutdownTimeout.Std())
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			s.log.Warn("telemetry: not every span was exported", "err", err)
		}
	})
	return nil
}

// identity makes the API's verifier: of the configured issuer, whose
// discovery fails for one that is wrong or unreachable, or of the built-in
// development provider, which is this very process, not serving yet (its
// keys are fetched lazily, over loopback). Both fail before the database
// is touched.
func (s *serving) identity(ctx context.Context) error {
	opts := &identity.Options{
		Issuer:         s.cfg.Identity.Issuer,
		Audiences:      s.cfg.Identity.Audiences,
		RequiredScopes: s.cfg.Identity.RequiredScopes,
		Tenants:        s.cfg.Identity.Tenants,
		Logger:         s.log.With("component", "identity"),
	}
	if s.cfg.DevIdentity() {
		if err := checkDevIdentity(s.publicURL, s.selfURL); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
		opts.Issuer = s.publicURL + devOIDCPath
		opts.JWKSURL = s.selfURL + devOIDCPath + "/jwks"
	}
	v, err := identity.New(ctx, opts) // its errors say "identity: " already
	if err != nil {
		return err
	}
	s.verifier = v
	return nil
}

// open opens and migrates the store, whose statements are traced when
// telemetry is on, and loads the seal key.
func (s *serving) open(ctx context.Context) error {
	in, err := setUp(ctx, s.cfg, s.log, s.tel.TracerProvider())
	if err != nil {
		return err
	}
	s.onStop(func() { in.Close() })
	s.in = in
	return nil
}

// brokerKeys starts the broker's signing keys and the broker that mints
// with them.
func (s *serving) brokerKeys(ctx context.Context) error {
	keys, err := s.in.keyring(purposeBroker, broker.MaxTokenLifetime)
	if err != nil {
		return err
	}
	if err := keys.Start(ctx); err != nil {
		return fmt.Errorf("broker keys: %w", s.in.sealHint(err))
	}
	s.onStop(keys.Stop)
	s.keys = keys
	s.mint, err = broker.New(keys, &broker.Options{
		Issuer:        s.publicURL,
		TokenLifetime: s.cfg.Broker.TokenLifetime.Std(),
		ClientID:      s.cfg.Broker.ClientID,
	})
	return err
}

// health mounts the probes, the metrics (see metrics) and the broker's
// public keys.
func (s *serving) health(ctx context.Context) error {
	s.reg = prometheus.NewRegistry()
	build := buildinfo.Read()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build.Collector(),
		assistant.BacklogCollector(s.in.store, nil, s.log.With("component", "assistant")))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": build.Version})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			httpx.WriteError(w, r, s.log, httpx.Errorf(http.StatusServiceUnavailable, "draining", "The server is shutting down."))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.in.store.Ready(ctx); err != nil {
			s.log.WarnContext(ctx, "not ready", "err", err)
			httpx.WriteError(w, r, s.log, httpx.Errorf(http.StatusServiceUnavailable, "not_ready", "The database is unreachable or its schema is not current."))
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	s.mux.Handle("GET /.well-known/jwks.json", s.keys.JWKSHandler())
	return s.metrics(ctx)
}

// metrics serves /metrics on server.metrics_addr, and then not on the
// public listener, or else on the public listener.
func (s *serving) metrics(ctx context.Context) error {
	h := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
	s.metricsURL = s.publicURL + "/metrics"
	if s.cfg.Server.MetricsAddr == "" {
		s.mux.Handle("GET /metrics", h)
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Server.MetricsAddr)
	if err != nil {
		return fmt.Errorf("server.metrics_addr: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	s.onStop(func() {
		srv.Close()
		<-done
	})
	s.metricsURL = "http://" + ln.Addr().String() + "/metrics"
	s.log.Info("metrics listener", "listen", ln.Addr().String())
	return nil
}

// devProvider starts the built-in development OIDC provider when no
// issuer is configured.
func (s *serving) devProvider(ctx context.Context) error {
	if !s.cfg.DevIdentity() {
		return nil
	}
	keys, err := s.in.keyring(purposeDevOIDC, devoidc.DefaultTokenLifetime)
	if err != nil {
		return err
	}
	if err := keys.Start(ctx); err != nil {
		return fmt.Errorf("development provider keys: %w", s.in.sealHint(err))
	}
	s.onStop(keys.Stop)
	dev, err := s.in.devProvider(s.publicURL, keys)
	if err != nil {
		return err
	}
	s.mux.Handle(devOIDCPath+"/", http.StripPrefix(devOIDCPath, dev.Handler()))
	s.log.Warn("DEVELOPMENT SIGN-IN IS ON: the built-in OIDC provider signs in anyone who types a user name. Configure identity.issuer for any real use.",
		"issuer", s.publicURL+devOIDCPath)
	return nil
}

// web mounts the Sessions UI at / and its sign-in at /auth/; from here on
// the API takes a bearer token or a signed-in browser's session cookie.
// It also mounts /api/me and the API's OpenAPI document (public: it
// describes the API and holds no data).
func (s *serving) web(ctx context.Context) error {
	authenticated, stopWeb, err := s.in.mountWeb(ctx, s.mux, s.publicURL, s.selfURL, s.verifier)
	if err != nil {
		return err
	}
	s.onStop(stopWeb)
	s.authenticated = authenticated
	s.mux.Handle("GET /api/me", authenticated(assistant.MeHandler(assistant.Roles{
		Reviewer: review.Reviewers(s.cfg.Review.Groups).IsReviewer,
		Admin:    status.Admins(s.cfg.Admin.Groups).IsAdmin,
	})))
	s.mux.Handle("GET /api/openapi.json", assistant.OpenAPIHandler())
	return nil
}

// assistant builds the assistant runtime (started by sweeps, once what
// its turns call is mounted).
func (s *serving) assistant(context.Context) error {
	rt, err := s.in.buildAssistant(s.publicURL, s.mint, s.reg, s.tel.Transport(http.DefaultTransport))
	if err != nil {
		return err
	}
	s.runtime = rt
	s.in.approvalDecided = func(ctx context.Context, a store.Approval) { rt.ApprovalDecided(ctx, a.Binding.RunID) }
	return nil
}

// mcp mounts the MCP endpoint, with its policy, approvals and audit log.
// When it stops, the outcomes of calls that have answered are still being
// written: it drains them before the store closes.
func (s *serving) mcp(ctx context.Context) error {
	st, err := s.in.buildMCP(s.publicURL, s.keys, s.mint, s.reg, s.verifier)
	if err != nil {
		return err
	}
	s.onStop(func() { st.catalog.Close() })
	if err := st.health.Start(ctx); err != nil {
		return err
	}
	s.onStop(st.health.Stop)
	s.upstreams.Use(st.health)
	s.onStop(func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Server.ShutdownTimeout.Std())
		defer cancel()
		if err := st.server.Drain(dctx); err != nil {
			s.log.Warn("not every tool call's outcome was recorded; those executions will be reported as outcome_unknown", "err", err)
		}
	})
	st.mount(s.mux, s.authenticated, s.publicURL)
	s.mcpStack = st
	return nil
}

// auditCheckpoints signs checkpoints of the audit log's head every
// audit.checkpoint_interval, and publishes the keys that verify them.
func (s *serving) auditCheckpoints(ctx context.Context) error {
	keys, cp, err := s.in.checkpointer(s.publicURL)
	if err != nil {
		return err
	}
	if err := cp.Start(ctx); err != nil {
		return err
	}
	s.onStop(cp.Stop)
	s.auditKeys = keys
	s.mux.Handle("GET /.well-known/usher-audit-key", audit.KeyHandler(keys, s.log))
	return nil
}

// oauth mounts the authorization server external MCP clients sign in
// with, and the API of the apps a person has let in.
func (s *serving) oauth(ctx context.Context) error {
	srv, err := s.in.oauthServer(s.publicURL, s.mint, s.mcpStack.audit, s.verifier)
	if err != nil {
		return err
	}
	if err := srv.PutConfiguredClients(ctx); err != nil {
		return err
	}
	if err := mountOAuth(s.mux, s.publicURL, srv.Handler()); err != nil {
		return err
	}
	mountApps(s.mux, s.authenticated, s.publicURL, srv)
	s.oauthSrv = srv
	return nil
}

// sweeps starts the background work: the approvals' expiry and
// revocation, the executions abandoned by a stopped process, the ended
// OAuth grants, and the assistant's runs. They stop (after the MCP
// endpoint's drain is registered, so before it runs) before the store
// closes.
func (s *serving) sweeps(ctx context.Context) error {
	as, es, err := s.in.sweepers(s.mcpStack, s.reg)
	if err != nil {
		return err
	}
	// Ended codes and refresh tokens, kept oauth.refresh_idle for the
	// reuse detection, and expired client assertions.
	oauthSweeper, err := oauth.NewSweeper(s.oauthSrv, nil)
	if err != nil {
		return err
	}
	for _, sw := range []interface {
		Start(context.Context) error
		Stop()
	}{as, es, oauthSweeper} {
		if err := sw.Start(ctx); err != nil {
			return err
		}
		s.onStop(sw.Stop)
	}
	mountAssistant(s.mux, s.runtime, s.authenticated, s.tel.Routed, s.publicURL)
	if err := s.runtime.Start(ctx); err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	s.onStop(s.runtime.Stop)
	return nil
}

// auditSinks starts the delivery of the audit log to audit.sinks. It
// stops, giving its leases back, before the store closes.
func (s *serving) auditSinks(ctx context.Context) error {
	if len(s.cfg.Audit.Sinks) == 0 {
		return nil
	}
	var targets []auditsink.Target
	for _, c := range s.cfg.Audit.Sinks {
		spec := auditsink.Spec{Name: c.Name}
		if c.Webhook != nil {
			secret, err := c.Webhook.Secret()
			if err != nil {
				return fmt.Errorf("audit.sinks %s: %w", c.Name, err)
			}
			spec.WebhookURL, spec.Secret = c.Webhook.URL, secret
		}
		if c.File != nil {
			spec.FilePath = c.File.Path
		}
		t, err := auditsink.NewTarget(spec, s.env.stdout)
		if err != nil {
			return err
		}
		targets = append(targets, t, auditsink.CheckpointsOf(t, s.in.store))
	}
	d, err := auditsink.New(s.in.store, targets, &auditsink.Options{
		Records: auditsink.Records{Log: s.in.store}, Logger: s.log, Registerer: s.reg,
	})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	s.onStop(d.Stop)
	return nil
}

// notFound answers every other path.
func (s *serving) notFound(context.Context) error {
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, s.log, httpx.ErrNotFound)
	})
	return nil
}

// serve serves until ctx is done, then shuts down within
// server.shutdown_timeout.
func (s *serving) serve(ctx context.Context) error {
	metrics := httpx.NewMetrics(s.reg)
	handler, timeout := s.tel.Handler(metrics.Wrap(s.mux)), s.cfg.Server.ReadTimeout.Std()
	srv := &http.Server{
		// No ReadTimeout: it would stay on the connection after the body,
		// ending the context of long-lived responses; ReadBodyFor bounds
		// the body instead, refused at the OAuth endpoints in OAuth's
		// error shape; an attachment's upload has a bound of its own.
		Handler: s.runtime.ReadUploads(timeout, handler,
			httpx.ReadBodyFor(s.cfg.Server.MaxBodyBytes, timeout, s.oauthSrv.RefuseBody(nil), handler)),
		ReadHeaderTimeout: s.cfg.Server.ReadTimeout.Std(),
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Live-update streams never end on their own: close them when the
	// server shuts down, so that draining does not wait for them.
	srv.RegisterOnShutdown(s.runtime.CloseStreams)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(s.ln) }()
	s.log.Info("usher is serving", "url", s.publicURL, "listen", s.ln.Addr().String(), "version", buildinfo.Read().String(), "database", s.in.engine())
	s.env.banner(s.publicURL, s.metricsURL, s.cfg, &s.flags, s.ln.Addr().String())
	if s.debugAddr != "" {
		fmt.Fprintf(s.env.stdout, "  profiles (pprof, expvar, loopback only): http://%s/debug/pprof/\n\n", s.debugAddr)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "timeout", s.cfg.Server.ShutdownTimeout.Std())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Server.ShutdownTimeout.Std())
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// sweepers builds the background sweeps of the MCP stack's records: the
// approvals' expiry and revocation, and the executions abandoned by a
// stopped process; reg receives the count of those.
func (in *installation) sweepers(mcp *mcpStack, reg prometheus.Registerer) (*approvals.Sweeper, *mcpserver.Sweeper, error) {
	as, err := approvals.NewSweeper(mcp.approvals, &approvals.SweeperOptions{
		Tools: mcp.catalog.Hashes, Logger: in.log.With("component", "approvals"),
	})
	if err != nil {
		return nil, nil, err
	}
	es, err := mcpserver.NewSweeper(&mcpserver.SweeperOptions{
		Executions:  mcpserver.AuditedExecutions{Store: in.store, Log: mcp.audit},
		CallTimeout: mcp.catalog.CallTimeout(), InputLifetime: mcp.server.InputLifetime(),
		Logger: in.log.With("component", "mcp"), Registerer: reg,
	})
	if err != nil {
		return nil, nil, err
	}
	return as, es, nil
}

// banner tells a person at the terminal what to open and how to sign in:
// in a browser, when browser sign-in is on (the development provider, or
// web.client_id); else with an access token of the issuer.
func (e *environment) banner(url, metricsURL string, cfg config.Config, f *installFlags, listenAddr string) {
	fmt.Fprintf(e.stdout, "\nUsher is running at %s\n\n", url)
	if cfg.DevIdentity() || cfg.Web.ClientID != "" {
		fmt.Fprintf(e.stdout, "  Open it in a browser and sign in to talk to the assistant.\n\n")
	} else {
		fmt.Fprintf(e.stdout, "  Browser sign-in is off: the API takes access tokens only, and MCP clients cannot sign in.\n")
		fmt.Fprintf(e.stdout, "  Set web.client_id (and web.client_secret, web.scopes) to sign in in a browser.\n\n")
	}
	fmt.Fprintf(e.stdout, "  health:    %s/healthz   readiness: %s/readyz   metrics: %s\n", url, url, metricsURL)
	fmt.Fprintf(e.stdout, "  broker keys (JWKS): %s/.well-known/jwks.json\n", url)
	if cfg.DevIdentity() {
		fmt.Fprintf(e.stdout, "\n  Sign-in uses the built-in DEVELOPMENT provider at %s%s (any user name, no password).\n", url, devOIDCPath)
		fmt.Fprintf(e.stdout, "  Get an API token and call the API:\n\n")
		fmt.Fprintf(e.stdout, "    TOKEN=$(usher token user --sub alice%s)\n", f.echo(listenAddr))
		fmt.Fprintf(e.stdout, "    curl -H \"Authorization: Bearer $TOKEN\" %s/api/me\n\n", url)
		return
	}
	fmt.Fprintf(e.stdout, "\n  Identity provider: %s\n\n", issuerLine(cfg.Identity))
}

// issuerLine names the identity provider: its issuer, or for a
// multi-tenant template the tenants whose issuers it stands for.
func issuerLine(id config.Identity) string {
	if !strings.Contains(id.Issuer, identity.TenantPlaceholder) {
		return id.Issuer
	}
	return strings.Replace(id.Issuer, identity.TenantPlaceholder, "<tenant>", 1) +
		" for the tenants " + strings.Join(id.Tenants, ", ")
}

// echo repeats the installation flags serve was given, so that a printed
// command reaches the same installation; --addr names the address actually
// listened on (a port 0 was chosen by the system). A database URL may hold
// a password: it is referred to, never printed.
func (f *installFlags) echo(listenAddr string) string {
	s := ""
	if f.configPath != "" {
		s += " --config " + f.configPath
	}
	if f.overrides.Addr != "" {
		s += " --addr " + listenAddr
	}
	if f.overrides.DataDir != "" {
		s += " --data-dir " + f.overrides.DataDir
	}
	if f.overrides.DatabaseURL != "" {
		s += " --database-url \"$USHER_DATABASE_URL\""
	}
	return s
}

// engine names the database engine for logs, without credentials.
func (in *installation) engine() string {
	if in.cfg.Database.URL != "" {
		return "postgresql"
	}
	return "sqlite"
}

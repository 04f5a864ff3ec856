package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/usherhq/usher/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/store"
)

func (e *environment) serve(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("serve")
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	defer tuneGC(log)()

	// Listen first: with port 0 the public URL is only known afterwards.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	var debugAddr string // where the profiles are served, if they are
	if cfg.Server.DebugAddr == "" {
		stopHeapSampling()
	} else {
		debug, err := startDebug(ctx, cfg.Server.DebugAddr, log)
		if err != nil {
			return err
		}
		defer debug.stop() //nolint:errcheck // the process is stopping
		debugAddr = debug.addr
	}
	localURL := "http://" + ln.Addr().String()
	publicURL := cfg.Server.PublicURL
	if publicURL == "" {
		publicURL = localURL
	}

	in, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer in.Close()

	brokerKeys, err := in.keyring(purposeBroker, broker.MaxTokenLifetime)
	if err != nil {
		return err
	}
	if err := brokerKeys.Start(ctx); err != nil {
		return fmt.Errorf("broker keys: %w", err)
	}
	defer brokerKeys.Stop()

	mint, err := broker.New(brokerKeys, &broker.Options{
		Issuer:        publicURL,
		TokenLifetime: cfg.Broker.TokenLifetime.Std(),
		ClientID:      cfg.Broker.ClientID,
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	reg := prometheus.NewRegistry()
	build := buildinfo.Read()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build.Collector())
	metrics := httpx.NewMetrics(reg)

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": build.Version})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := in.store.Ready(ctx); err != nil {
			log.WarnContext(ctx, "not ready", "err", err)
			httpx.WriteError(w, r, log, httpx.Errorf(http.StatusServiceUnavailable, "not_ready", "The database is unreachable or its schema is not current."))
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("GET /.well-known/jwks.json", brokerKeys.JWKSHandler())

	idOpts := &identity.Options{
		Issuer:         cfg.Identity.Issuer,
		Audiences:      cfg.Identity.Audiences,
		RequiredScopes: cfg.Identity.RequiredScopes,
		Tenants:        cfg.Identity.Tenants,
		Logger:         log.With("component", "identity"),
	}
	if cfg.DevIdentity() {
		devKeys, err := in.keyring(purposeDevOIDC, devoidc.DefaultTokenLifetime)
		if err != nil {
			return err
		}
		if err := devKeys.Start(ctx); err != nil {
			return fmt.Errorf("development provider keys: %w", err)
		}
		defer devKeys.Stop()
		issuer := publicURL + devOIDCPath
		dev, err := in.devProvider(publicURL, devKeys)
		if err != nil {
			return err
		}
		mux.Handle(devOIDCPath+"/", http.StripPrefix(devOIDCPath, dev.Handler()))
		idOpts.Issuer = issuer
		// The provider is this very process, which is not serving yet:
		// fetch its keys lazily, over loopback.
		idOpts.JWKSURL = localURL + devOIDCPath + "/jwks"
		log.Warn("DEVELOPMENT SIGN-IN IS ON: the built-in OIDC provider signs in anyone who types a user name. Configure identity.issuer for any real use.",
			"issuer", issuer)
	}
	verifier, err := identity.New(ctx, idOpts)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	// The Sessions UI at / and its sign-in at /auth/; from here on the API
	// takes a bearer token or a signed-in browser's session cookie.
	authenticated, stopWeb, err := in.mountWeb(ctx, mux, publicURL, localURL, verifier)
	if err != nil {
		return err
	}
	defer stopWeb()
	mux.Handle("GET /api/me", authenticated(assistant.MeHandler()))
	// The API's OpenAPI document: public — it describes the API and holds no data.
	mux.Handle("GET /api/openapi.json", assistant.OpenAPIHandler())
	runtime, err := in.buildAssistant(publicURL, mint, reg)
	if err != nil {
		return err
	}
	in.approvalDecided = func(ctx context.Context, a store.Approval) { runtime.ApprovalDecided(ctx, a.Binding.RunID) }
	mcp, err := in.buildMCP(ctx, publicURL, brokerKeys, mint, reg)
	if err != nil {
		return err
	}
	defer mcp.catalog.Close()
	defer func() {
		// Outcomes of calls that have answered are still being written;
		// the store closes after this.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout.Std())
		defer cancel()
		if err := mcp.server.Drain(dctx); err != nil {
			log.Warn("not every tool call's outcome was recorded; those executions will be reported as outcome_unknown", "err", err)
		}
	}()
	mcp.mount(mux, authenticated, publicURL)
	oauthSrv, err := in.oauthServer(publicURL, mint, mcp.audit, verifier)
	if err != nil {
		return err
	}
	if err := oauthSrv.PutConfiguredClients(ctx); err != nil {
		return err
	}
	if err := mountOAuth(mux, publicURL, oauthSrv.Handler()); err != nil {
		return err
	}
	mountApps(mux, authenticated, publicURL, oauthSrv)
	// The sweeps stop (deferred after Drain) before the store closes.
	approvalSweeper, executionSweeper, err := in.sweepers(mcp)
	if err != nil {
		return err
	}
	if err := approvalSweeper.Start(ctx); err != nil {
		return err
	}
	defer approvalSweeper.Stop()
	if err := executionSweeper.Start(ctx); err != nil {
		return err
	}
	defer executionSweeper.Stop()
	// Ended codes and refresh tokens, kept oauth.refresh_idle for the
	// reuse detection, and expired client assertions.
	oauthSweeper, err := oauth.NewSweeper(oauthSrv, nil)
	if err != nil {
		return err
	}
	if err := oauthSweeper.Start(ctx); err != nil {
		return err
	}
	defer oauthSweeper.Stop()
	mountAssistant(mux, runtime, authenticated, publicURL)
	if err := runtime.Start(ctx); err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	defer runtime.Stop()

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, log, httpx.ErrNotFound)
	})

	srv := &http.Server{
		// No ReadTimeout: it would stay on the connection after the body,
		// ending the context of long-lived responses; ReadBody bounds the
		// body instead.
		Handler:           httpx.ReadBody(cfg.Server.MaxBodyBytes, cfg.Server.ReadTimeout.Std(), metrics.Wrap(mux)),
		ReadHeaderTimeout: cfg.Server.ReadTimeout.Std(),
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Live-update streams never end on their own: close them when the
	// server shuts down, so that draining does not wait for them.
	srv.RegisterOnShutdown(runtime.CloseStreams)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("usher is serving", "url", publicURL, "listen", ln.Addr().String(), "version", build.String(), "database", in.engine())
	e.banner(publicURL, cfg, &f, ln.Addr().String())
	if debugAddr != "" {
		fmt.Fprintf(e.stdout, "  profiles (pprof, expvar, loopback only): http://%s/debug/pprof/\n\n", debugAddr)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout.Std())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout.Std())
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// sweepers builds the background sweeps of the MCP stack's records: the
// approvals' expiry and revocation, and the executions abandoned by a
// stopped process.
func (in *installation) sweepers(mcp *mcpStack) (*approvals.Sweeper, *mcpserver.Sweeper, error) {
	as, err := approvals.NewSweeper(mcp.approvals, &approvals.SweeperOptions{
		Tools: toolHashes(mcp.catalog), Logger: in.log.With("component", "approvals"),
	})
	if err != nil {
		return nil, nil, err
	}
	es, err := mcpserver.NewSweeper(&mcpserver.SweeperOptions{
		Executions:  executions{in.store, mcp.audit},
		CallTimeout: mcp.catalog.CallTimeout(), InputLifetime: mcp.server.InputLifetime(),
		Logger: in.log.With("component", "mcp"),
	})
	if err != nil {
		return nil, nil, err
	}
	return as, es, nil
}

// banner tells a person at the terminal what to open and how to sign in.
func (e *environment) banner(url string, cfg config.Config, f *installFlags, listenAddr string) {
	fmt.Fprintf(e.stdout, "\nUsher is running at %s\n\n", url)
	fmt.Fprintf(e.stdout, "  Open it in a browser and sign in to talk to the assistant.\n\n")
	fmt.Fprintf(e.stdout, "  health:    %s/healthz   readiness: %s/readyz   metrics: %s/metrics\n", url, url, url)
	fmt.Fprintf(e.stdout, "  broker keys (JWKS): %s/.well-known/jwks.json\n", url)
	if cfg.DevIdentity() {
		fmt.Fprintf(e.stdout, "\n  Sign-in uses the built-in DEVELOPMENT provider at %s%s (any user name, no password).\n", url, devOIDCPath)
		fmt.Fprintf(e.stdout, "  Get an API token and call the API:\n\n")
		fmt.Fprintf(e.stdout, "    TOKEN=$(usher token user --sub alice%s)\n", f.echo(listenAddr))
		fmt.Fprintf(e.stdout, "    curl -H \"Authorization: Bearer $TOKEN\" %s/api/me\n\n", url)
	} else {
		fmt.Fprintf(e.stdout, "\n  Sign-in: %s\n\n", cfg.Identity.Issuer)
	}
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

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/usherhq/usher/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/review"
)

// loadPolicy reads the configured policy, or the shipped default.
func (in *installation) loadPolicy() (*policy.Policy, error) {
	if in.cfg.Policy.File == "" {
		return policy.Default(), nil
	}
	p, err := policy.Load(in.cfg.Policy.File)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return p, nil
}

// loadLock reads the tool lock. A missing lock reviews nothing.
func (in *installation) loadLock() (*policy.Lock, error) {
	lock, err := policy.ReadLock(in.cfg.Policy.LockFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tool lock: %w", err)
	}
	return lock, nil
}

// toolLock reads the tool lock or, when there is none, writes a first
// one that reviews the built-in tools only (Catalog.BuiltinLock): upstream
// tools stay unreviewed until an operator runs `usher tools lock`.
func (in *installation) toolLock(cat *mcpserver.Catalog) (*policy.Lock, error) {
	lock, err := in.loadLock()
	if err != nil || lock != nil {
		return lock, err
	}
	lock = cat.BuiltinLock()
	if err := os.MkdirAll(filepath.Dir(in.cfg.Policy.LockFile), 0o700); err != nil {
		return nil, fmt.Errorf("tool lock: %w", err)
	}
	if err := lock.Write(in.cfg.Policy.LockFile); err != nil {
		return nil, fmt.Errorf("tool lock: %w", err)
	}
	in.log.Warn("no tool lock found: wrote one with the built-in tools only; review upstream tools with `usher tools diff` and `usher tools lock`",
		"file", in.cfg.Policy.LockFile, "tools", len(lock.Tools))
	return lock, nil
}

// catalog builds the tool catalog from the configuration. mint mints
// upstream broker tokens; reg, when not nil, receives the metrics of the
// upstream calls.
func (in *installation) catalog(mint *broker.Broker, reg prometheus.Registerer) (*mcpserver.Catalog, error) {
	var ups []mcpserver.Upstream
	for _, u := range in.cfg.MCP.Upstreams {
		ups = append(ups, mcpserver.Upstream{
			Name: u.Name, URL: u.URL, Command: u.Command, Args: u.Args, Env: u.Env,
			Prefix: u.Prefix, Headers: u.Headers, BrokerToken: u.BrokerToken,
		})
	}
	opts := &mcpserver.CatalogOptions{
		Runs:      in.store,
		Approvals: in.store,
		DemoTools: in.cfg.DemoTools(),
		Notes:     in.store,
		Upstreams: ups,
		// Zero: the catalog's default.
		MaxSessionsPerUser: in.cfg.MCP.MaxUpstreamSessionsPerUser,
		// A stateful endpoint has a channel for requests to its callers.
		RelayRequests: in.cfg.MCP.Stateful,
		// A retry of a held call may reach any replica.
		Handover:   in.store,
		Version:    buildinfo.Read().Version,
		Logger:     in.log.With("component", "catalog"),
		Registerer: reg,
	}
	if mint != nil {
		opts.UpstreamTokens = broker.NewTokenCache(mint, 0)
	}
	if in.cfg.MCP.Stateful {
		// Any replica serves a stateful session: the replicas share its
		// caller's sessions to the HTTP upstreams too.
		opts.UpstreamSessions, opts.UpstreamSessionSecret = in.store, in.sealKey
		opts.PreviousUpstreamSessionSecrets = in.previousSealKeys
	}
	return mcpserver.NewCatalog(opts)
}

// mcpStack is the MCP server and what it needs, built for serve.
type mcpStack struct {
	server    *mcpserver.Server
	catalog   *mcpserver.Catalog
	approvals *approvals.Service
	audit     *audit.Log
	// policy and lock are what the server decides with, for reviewers.
	policy *policy.Policy
	lock   *policy.Lock
	// health lists the upstreams every mcp.upstream_check_interval.
	health *mcpserver.Health
}

// buildMCP wires the MCP server, the policy, approvals and the audit log.
func (in *installation) buildMCP(publicURL string, keys *broker.Keyring, b *broker.Broker, reg prometheus.Registerer, api *identity.Verifier) (*mcpStack, error) {
	pol, err := in.loadPolicy()
	if err != nil {
		return nil, err
	}
	auditLog, err := audit.New(in.store, nil)
	if err != nil {
		return nil, err
	}
	svc, err := approvals.New(in.store, &approvals.Options{
		TTL: in.cfg.Approval.TTL.Std(), PublicURL: publicURL, Audit: auditLog,
		Logger: in.log.With("component", "approvals"), Decided: in.approvalDecided,
		IsReviewer: review.Reviewers(in.cfg.Review.Groups).IsReviewer,
	})
	if err != nil {
		return nil, err
	}
	cat, err := in.catalog(b, reg)
	if err != nil {
		return nil, err
	}
	lock, err := in.toolLock(cat)
	if err != nil {
		cat.Close()
		return nil, err
	}
	verifier, err := in.mcpVerifier(keys, publicURL, api)
	var health *mcpserver.Health
	if err == nil {
		health, err = in.upstreamHealth(cat, lock, reg)
	}
	if err != nil {
		cat.Close()
		return nil, err
	}
	srv, err := mcpserver.New(&mcpserver.Options{
		PublicURL:  publicURL,
		Verifier:   verifier,
		Catalog:    cat,
		Decider:    mcpserver.PolicyDecider{Policy: pol, Lock: lock},
		Approvals:  mcpserver.ServiceApprovals{Service: svc},
		Executions: mcpserver.AuditedExecutions{Store: in.store, Log: auditLog},
		Auditor:    mcpserver.LogAuditor{Log: auditLog},
		// The replicas share them: a round's requestState opens on any.
		Secret: in.sealKey, PreviousSecrets: in.previousSealKeys,
		ApprovalURL: svc.URL,
		Stateful:    in.cfg.MCP.Stateful, Sessions: in.store, // sessions any replica serves
		AllowedOrigins: in.cfg.MCP.AllowedOrigins,
		MaxBodyBytes:   in.cfg.Server.MaxBodyBytes,
		Version:        buildinfo.Read().Version,
		Logger:         in.log.With("component", "mcp"),
		Registerer:     reg,
	})
	if err != nil {
		cat.Close()
		return nil, err
	}
	in.log.Info("policy loaded", "policy", pol.Name(), "hash", pol.Hash(), "lock", in.cfg.Policy.LockFile)
	return &mcpStack{server: srv, catalog: cat, approvals: svc, audit: auditLog, policy: pol, lock: lock, health: health}, nil
}

// mcpVerifier verifies the broker's tokens at publicURL's /mcp, and
// refuses the access tokens of a revoked OAuth grant and of a tenant the
// API's verifier no longer admits.
func (in *installation) mcpVerifier(keys *broker.Keyring, publicURL string, api *identity.Verifier) (*broker.Verifier, error) {
	return broker.NewVerifier(keys, &broker.VerifierOptions{
		Issuer: publicURL, Audience: publicURL + "/mcp", GrantRevoked: in.store.GrantRevoked,
		TenantAdmitted: api.AdmitsTenant,
	})
}

// upstreamHealth checks cat's upstreams every mcp.upstream_check_interval
// against lock, with its metrics registered with reg.
func (in *installation) upstreamHealth(cat *mcpserver.Catalog, lock *policy.Lock, reg prometheus.Registerer) (*mcpserver.Health, error) {
	return mcpserver.NewHealth(cat, &mcpserver.HealthOptions{
		Interval: in.cfg.MCP.UpstreamCheckInterval.Std(), Lock: lock, Registerer: reg,
		Logger: in.log.With("component", "catalog"),
	})
}

// mount adds the MCP endpoint, its metadata and the approvals API.
func (st *mcpStack) mount(mux *http.ServeMux, authenticated func(http.Handler) http.Handler, brokerIssuer string) {
	st.server.Mount(mux)
	api := broker.RefuseTokens(brokerIssuer, authenticated(st.approvals.Handler(nil)))
	mux.Handle("/api/approvals", api)
	mux.Handle("/api/approvals/", api)
}

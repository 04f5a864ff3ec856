package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/usherhq/usher/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/mcpserver"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// The adapters below connect the packages the MCP server reaches through
// its own small interfaces. They only translate types.

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

// catalog builds the tool catalog from the configuration. mint mints
// upstream broker tokens.
func (in *installation) catalog(mint *broker.Broker) (*mcpserver.Catalog, error) {
	var ups []mcpserver.Upstream
	for _, u := range in.cfg.MCP.Upstreams {
		ups = append(ups, mcpserver.Upstream{
			Name: u.Name, URL: u.URL, Command: u.Command, Args: u.Args, Env: u.Env,
			Prefix: u.Prefix, Headers: u.Headers, BrokerToken: u.BrokerToken,
		})
	}
	opts := &mcpserver.CatalogOptions{
		DefinitionHash: func(d mcpserver.ToolDefinition) (string, error) {
			return policy.DefinitionHash(policy.ToolDefinition(d))
		},
		Runs:      in.store,
		Approvals: in.store,
		DemoTools: in.cfg.DemoTools(),
		Notes:     in.store,
		Upstreams: ups,
		// Zero: the catalog's default.
		MaxSessionsPerUser: in.cfg.MCP.MaxUpstreamSessionsPerUser,
		// A stateful endpoint has a channel for requests to its callers.
		RelayRequests: in.cfg.MCP.Stateful,
		Version:       buildinfo.Read().Version,
		Logger:        in.log.With("component", "catalog"),
	}
	if mint != nil {
		opts.UpstreamToken = upstreamTokens(mint)
	}
	return mcpserver.NewCatalog(opts)
}

// upstreamTokens gives an upstream a broker token for its own audience,
// of the caller (or, when the catalog lists tools for itself, of the
// assistant), from a bounded cache.
func upstreamTokens(b *broker.Broker) func(ctx context.Context, audience string) (string, error) {
	cache := broker.NewTokenCache(b, 0)
	return func(ctx context.Context, audience string) (string, error) {
		subject := "usher"
		if c, ok := mcpserver.CallerFromContext(ctx); ok {
			subject = c.Subject
		}
		return cache.Token(ctx, subject, audience)
	}
}

// approvalRequests adapts the approvals service to the MCP server.
type approvalRequests struct{ svc *approvals.Service }

func (a approvalRequests) Consume(ctx context.Context, b store.ApprovalBinding, e *store.Execution, ev mcpserver.Event) (store.Approval, store.Execution, bool, error) {
	entry, err := auditEntry(ev)
	if err != nil {
		return store.Approval{}, store.Execution{}, false, err
	}
	used, rec, started, err := a.svc.Consume(ctx, b, e, entry)
	if errors.Is(err, approvals.ErrNotApproved) {
		err = mcpserver.ErrNotApproved
	}
	return used, rec, started, err
}

// Request records (or finds) the request for this exact call, for the
// tool's current definition (approvals.Service.RequestCurrent).
func (a approvalRequests) Request(ctx context.Context, r mcpserver.ApprovalRequest) (store.Approval, error) {
	return a.svc.RequestCurrent(ctx, approvals.Request{
		Binding: r.Binding, Tenant: r.Tenant,
		Arguments: r.Arguments, PolicyIDs: r.PolicyIDs, Reason: r.Reason, Approvers: r.Approvers,
		ToolCallID: r.ToolCallID, IdempotencyKey: r.IdempotencyKey,
	})
}

// auditor writes the MCP server's events to the hash-chained audit log.
type auditor struct{ log *audit.Log }

func (a auditor) Record(ctx context.Context, e mcpserver.Event) error {
	entry, err := auditEntry(e)
	if err != nil {
		return err
	}
	return a.log.Append(ctx, entry)
}

// auditEntry is the audit log's entry of an MCP server event.
func auditEntry(e mcpserver.Event) (audit.Entry, error) {
	d := map[string]any{"server": e.Server, "reasons": e.Reasons, "idempotency_key": e.IdempotencyKey}
	if e.Action != "" {
		d["action"] = e.Action
	}
	if e.Suppressed > 0 {
		d["suppressed"] = e.Suppressed
	}
	details, err := json.Marshal(d)
	if err != nil {
		return audit.Entry{}, err
	}
	return audit.Entry{
		Kind: audit.Kind(e.Kind), EventID: e.EventID, At: e.At, Principal: e.Principal, ClientID: e.ClientID,
		TokenJTI: e.TokenID, Tool: e.Tool, DefinitionHash: e.DefinitionHash,
		ArgumentsHash: e.ArgumentsHash, Decision: string(e.Decision), PolicyIDs: e.PolicyIDs,
		PolicyHash: e.PolicyHash, ApprovalID: e.ApprovalID, RunID: e.RunID, Outcome: e.Outcome,
		Latency: e.Latency, Details: details,
	}, nil
}

// executions keeps the MCP server's executions in the store, writing each
// start, each finish, each round that asks for input and each sweep's
// marks of abandoned ones in one transaction with their audit records.
type executions struct {
	store store.Store
	log   *audit.Log
}

func (x executions) GetExecution(ctx context.Context, key string) (store.Execution, error) {
	return x.store.GetExecution(ctx, key)
}

func (x executions) BeginExecution(ctx context.Context, e store.Execution, ev mcpserver.Event) (store.Execution, bool, error) {
	build, err := x.builder(ev)
	if err != nil {
		return store.Execution{}, false, err
	}
	return x.store.BeginExecutionAudited(ctx, e, build)
}

func (x executions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev mcpserver.Event) (store.Execution, error) {
	build, err := x.builder(ev)
	if err != nil {
		return store.Execution{}, err
	}
	return x.store.FinishExecutionAudited(ctx, key, status, result, now, build)
}

func (x executions) AwaitInput(ctx context.Context, key, approvalID string, now time.Time, ev mcpserver.Event) error {
	build, err := x.builder(ev)
	if err != nil {
		return err
	}
	_, err = x.store.AwaitInputAudited(ctx, key, approvalID, now, build)
	return err
}

func (x executions) MarkAbandoned(ctx context.Context, olderThan time.Time, event func(store.Execution) mcpserver.Event) ([]store.Execution, error) {
	return x.store.MarkOutcomeUnknownAudited(ctx, olderThan, x.builders(event))
}

func (x executions) EndAwaitingInput(ctx context.Context, olderThan, now time.Time, result json.RawMessage, event func(store.Execution) mcpserver.Event) ([]store.Execution, error) {
	return x.store.EndAwaitingInputAudited(ctx, olderThan, now, result, x.builders(event))
}

// builders returns the function that makes event(e) the next audit
// record, for each execution e a sweep changes; an event that cannot be
// encoded fails the sweep's transaction.
func (x executions) builders(event func(store.Execution) mcpserver.Event) func(store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
	return func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		build, err := x.builder(event(e))
		if err != nil {
			return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, err }
		}
		return build
	}
}

// builder returns the function that makes ev the next audit record.
func (x executions) builder(ev mcpserver.Event) (func(store.AuditHead) (store.AuditRecord, error), error) {
	entry, err := auditEntry(ev)
	if err != nil {
		return nil, err
	}
	return x.log.Builder(entry)
}

// toolHashes gives the approvals sweeper the catalog's tools and their
// definition hashes; a listing that failed in part gives what was listed.
func toolHashes(cat *mcpserver.Catalog) approvals.ToolHashes {
	return func(ctx context.Context) (map[string]string, error) {
		defs, err := cat.Definitions(ctx)
		hashes := make(map[string]string, len(defs))
		for _, d := range defs {
			hashes[d.Name] = d.Hash
		}
		return hashes, err
	}
}

// mcpStack is the MCP server and what it needs, built for serve.
type mcpStack struct {
	server    *mcpserver.Server
	catalog   *mcpserver.Catalog
	approvals *approvals.Service
	audit     *audit.Log
}

// buildMCP wires the MCP server, the policy, approvals and the audit log.
func (in *installation) buildMCP(ctx context.Context, publicURL string, keys *broker.Keyring, b *broker.Broker, reg prometheus.Registerer) (*mcpStack, error) {
	pol, err := in.loadPolicy()
	if err != nil {
		return nil, err
	}
	lock, err := in.loadLock()
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
	})
	if err != nil {
		return nil, err
	}
	cat, err := in.catalog(b)
	if err != nil {
		return nil, err
	}
	if lock == nil {
		if lock, err = in.lockBuiltins(ctx, cat); err != nil {
			cat.Close()
			return nil, err
		}
	}
	verifier, err := broker.NewVerifier(keys, &broker.VerifierOptions{Issuer: publicURL, Audience: publicURL + "/mcp"})
	if err != nil {
		cat.Close()
		return nil, err
	}
	srv, err := mcpserver.New(&mcpserver.Options{
		PublicURL:  publicURL,
		Verifier:   verifier,
		Catalog:    cat,
		Decider:    mcpserver.PolicyDecider{Policy: pol, Lock: lock},
		Approvals:  approvalRequests{svc},
		Executions: executions{in.store, auditLog},
		Auditor:    auditor{auditLog},
		// The replicas share it: a round's requestState opens on any.
		Secret:         in.sealKey,
		ApprovalURL:    svc.URL,
		Stateful:       in.cfg.MCP.Stateful,
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
	return &mcpStack{server: srv, catalog: cat, approvals: svc, audit: auditLog}, nil
}

// lockBuiltins writes a first tool lock holding only the built-in tools,
// which ship with the binary, so that a new installation's read-only
// built-ins run unattended. Upstream tools stay unreviewed until an
// operator runs `usher tools lock`.
func (in *installation) lockBuiltins(ctx context.Context, cat *mcpserver.Catalog) (*policy.Lock, error) {
	defs, err := cat.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	lock := &policy.Lock{Tools: map[string]string{}}
	for _, d := range defs {
		if d.Server == "" {
			lock.Tools[d.Name] = d.Hash
		}
	}
	if err := lock.Write(in.cfg.Policy.LockFile); err != nil {
		return nil, fmt.Errorf("tool lock: %w", err)
	}
	in.log.Warn("no tool lock found: wrote one with the built-in tools only; review upstream tools with `usher tools diff` and `usher tools lock`",
		"file", in.cfg.Policy.LockFile, "tools", len(lock.Tools))
	return lock, nil
}

// mount adds the MCP endpoint, its metadata and the approvals API.
func (st *mcpStack) mount(mux *http.ServeMux, authenticated func(http.Handler) http.Handler, brokerIssuer string) {
	st.server.Mount(mux)
	api := broker.RefuseTokens(brokerIssuer, authenticated(st.approvals.Handler(nil)))
	mux.Handle("/api/approvals", api)
	mux.Handle("/api/approvals/", api)
}

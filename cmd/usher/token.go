package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/internal/devoidc"
)

func (e *environment) token(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "usage: usher token user --sub NAME [--group G]... | usher token mcp --sub PRINCIPAL [--audience URL] [--run ID] [--tenant TID] [--group G]...\n")
		return errUsage
	}
	switch args[0] {
	case "user":
		return e.tokenUser(ctx, args[1:])
	case "mcp":
		return e.tokenMCP(ctx, args[1:])
	}
	fmt.Fprintf(e.stderr, "usher token: unknown kind %q (want user or mcp)\n", args[0])
	return errUsage
}

// tokenUser prints an API access token from the built-in development
// provider, signed with the same persisted keys the server publishes.
func (e *environment) tokenUser(ctx context.Context, args []string) error {
	var f installFlags
	var sub string
	var groups []string
	fs := e.flagSet("token user")
	f.register(fs)
	fs.StringVar(&sub, "sub", "", "user `name` to sign in as (required)")
	fs.Var((*repeated)(&groups), "group", "a `group` the user belongs to (\"groups\"), for policies; repeat it for several")
	if err := parse(fs, args); err != nil {
		return err
	}
	if sub == "" {
		fmt.Fprintln(e.stderr, "usher token user: --sub is required")
		return errUsage
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	if !cfg.DevIdentity() {
		return errors.New("token user works only with the built-in development provider; identity.issuer is set, so get tokens from that issuer")
	}
	in, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer in.Close()
	keys, err := in.keyring(purposeDevOIDC, devoidc.DefaultTokenLifetime)
	if err != nil {
		return err
	}
	dev, err := in.devProvider(publicURL(cfg), keys)
	if err != nil {
		return err
	}
	tok, err := dev.IssueAccessToken(ctx, sub, groups...)
	if err != nil {
		return in.sealHint(err)
	}
	fmt.Fprintln(e.stdout, tok)
	return nil
}

// tokenMCP prints a broker token for an MCP server, as the assistant would
// mint for a turn — for operators and external-client testing.
func (e *environment) tokenMCP(ctx context.Context, args []string) error {
	var f installFlags
	var g broker.Grant
	fs := e.flagSet("token mcp")
	f.register(fs)
	fs.StringVar(&g.Subject, "sub", "", "principal `id` the token speaks for (required)")
	fs.StringVar(&g.Audience, "audience", "", "the MCP server's exact `URL` (default <public_url>/mcp)")
	fs.StringVar(&g.RunID, "run", "", "run `id` to bind the token to")
	fs.StringVar(&g.Tenant, "tenant", "", "the principal's tenant `id` (\"tid\"), for policies")
	fs.Var((*repeated)(&g.Groups), "group", fmt.Sprintf("a `group` of the principal (\"groups\"), for policies; repeat it for several, at most %d", broker.MaxGroups))
	if err := parse(fs, args); err != nil {
		return err
	}
	switch strings.TrimSpace(g.Subject) {
	case "":
		fmt.Fprintln(e.stderr, "usher token mcp: --sub is required")
		return errUsage
	case "null", "undefined":
		// What jq prints for a field that is not there: the command that
		// was to give the principal id failed.
		fmt.Fprintf(e.stderr, "usher token mcp: --sub %q names no one: pass the principal id GET /api/me returns (its \"id\"); did that call fail?\n", g.Subject)
		return errUsage
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	if g.Audience == "" {
		g.Audience = publicURL(cfg) + "/mcp"
	}
	in, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer in.Close()
	keys, err := in.keyring(purposeBroker, broker.MaxTokenLifetime)
	if err != nil {
		return err
	}
	b, err := broker.New(keys, &broker.Options{
		Issuer:        publicURL(cfg),
		TokenLifetime: cfg.Broker.TokenLifetime.Std(),
		ClientID:      cfg.Broker.ClientID,
	})
	if err != nil {
		return err
	}
	tok, err := b.Mint(ctx, g)
	if err != nil {
		return in.sealHint(err)
	}
	log.Info("minted broker token", "jti", tok.ID, "sub", g.Subject, "aud", g.Audience, "tid", g.Tenant, "groups", g.Groups, "expires", tok.Expiry)
	fmt.Fprintln(e.stdout, tok.Raw)
	return nil
}

// repeated is a flag that may be given several times, each adding a value.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, ",") }

func (r *repeated) Set(v string) error {
	*r = append(*r, v)
	return nil
}

// publicURL is server.public_url, or http:// + the listen address.
func publicURL(cfg config.Config) string {
	if cfg.Server.PublicURL != "" {
		return cfg.Server.PublicURL
	}
	return "http://" + cfg.Server.Addr
}

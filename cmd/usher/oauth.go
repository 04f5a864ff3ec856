package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// mountOAuth routes the authorization server's requests on mux to h, the
// handler of the server whose issuer is issuer (Usher's public URL): its
// endpoints under /oauth/ (after the issuer's path, which is stripped, so
// that h sees the oauth.Path* constants whatever the issuer), and its
// well-known documents at the paths RFC 8414 §3.1 and the MCP clients'
// discovery use, from the host's root and unchanged (see
// [oauth.Metadata.WellKnownPaths]: the metadata, path-inserted for an issuer
// with a path, and the OpenID configuration paths, which h answers 404 in
// OAuth error JSON rather than leaving them to the API's 404).
func mountOAuth(mux *http.ServeMux, issuer string, h http.Handler) error {
	m, err := oauth.NewMetadata(issuer)
	if err != nil {
		return err
	}
	u, err := url.Parse(issuer)
	if err != nil {
		return err
	}
	if prefix := u.Path; prefix != "" {
		mux.Handle(prefix+"/oauth/", http.StripPrefix(prefix, h))
	} else {
		mux.Handle("/oauth/", h)
	}
	for _, p := range m.WellKnownPaths() {
		mux.Handle(p, h)
	}
	return nil
}

// clientFetcher returns what resolves the clients whose client_id is the
// https URL of a Client ID Metadata Document, or nil when
// oauth.client_metadata_documents is off. Plain http documents, and
// documents on loopback addresses, are allowed only when Usher's own public
// URL is on loopback (development and tests, where the client runs on the
// same machine); anywhere else such a client_id could make the server call
// its own network.
func (in *installation) clientFetcher(publicURL string) (*clientmeta.Fetcher, error) {
	if !in.cfg.OAuth.ClientMetadataDocuments {
		return nil, nil
	}
	u, err := url.Parse(publicURL)
	if err != nil {
		return nil, fmt.Errorf("public url: %w", err)
	}
	return clientmeta.New(&clientmeta.Options{AllowLoopbackHTTP: httpx.IsLoopbackHost(u.Hostname())})
}

// oauthServer builds the authorization server of the MCP endpoint from the
// configuration: its Handler is for mountOAuth, its AppsHandler for
// mountApps. Its access tokens are the broker's tokens for the MCP
// endpoint, as the assistant's are. api is the API's verifier: the token
// exchange takes exactly the access tokens the API takes, and codes and
// refresh tokens are redeemed only for the people it admits.
func (in *installation) oauthServer(publicURL string, mint *broker.Broker, auditLog *audit.Log, api *identity.Verifier) (*oauth.Server, error) {
	clients, err := in.clientFetcher(publicURL)
	if err != nil {
		return nil, err
	}
	configured, keySets, err := in.configuredClients(publicURL)
	if err != nil {
		return nil, err
	}
	proxies, err := httpx.NewTrustedProxies(in.cfg.Server.TrustedProxies, in.cfg.Server.ForwardedHeader)
	if err != nil {
		return nil, fmt.Errorf("server.trusted_proxies: %w", err)
	}
	srv, err := oauth.NewServer(&oauth.ServerOptions{
		ConfiguredClients:    configured,
		KeySets:              keySets,
		Issuer:               publicURL,
		Resources:            []string{publicURL + "/mcp"},
		Store:                in.store,
		Broker:               mint,
		Clients:              clients,
		Audit:                auditLog,
		SignedIn:             in.sessions.SignedIn,
		LoginURL:             in.sessions.LoginURL,
		Admits:               api.Admits,
		Secret:               in.sealKey,
		PreviousSecrets:      in.previousSealKeys,
		Registration:         in.cfg.OAuth.Registration,
		RegistrationsPerHour: in.cfg.OAuth.RegistrationsPerHour,
		ClientAddr:           proxies.ClientAddr,
		RefreshIdle:          in.cfg.OAuth.RefreshIdle.Std(),
		RefreshAbsolute:      in.cfg.OAuth.RefreshAbsolute.Std(),
		RefreshReuseInterval: in.cfg.OAuth.RefreshReuseInterval.Std(),
		Logger:               in.log.With("component", "oauth"),
		VerifySubjectToken:   api.Verify,
		ExchangeClients:      in.cfg.OAuth.TokenExchangeClients,
	})
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return srv, nil
}

// configuredClients translates oauth.clients for the authorization
// server, and returns the fetcher of their jwks_uri key sets, under the
// rules of clientFetcher's (whether metadata documents are on or not).
func (in *installation) configuredClients(publicURL string) ([]oauth.ConfiguredClient, *clientmeta.Fetcher, error) {
	var out []oauth.ConfiguredClient
	for i, c := range in.cfg.OAuth.Clients {
		hash, err := c.Secret()
		if err != nil {
			return nil, nil, fmt.Errorf("oauth.clients[%d]: %w", i, err)
		}
		jwks, err := c.KeySet()
		if err != nil {
			return nil, nil, fmt.Errorf("oauth.clients[%d].jwks: %w", i, err)
		}
		out = append(out, oauth.ConfiguredClient{ID: c.ID, Name: c.Name, RedirectURIs: c.RedirectURIs, GrantTypes: c.GrantTypes,
			AuthMethod: c.Auth, SecretHash: hash, JWKSURI: c.JWKSURI, JWKS: jwks})
	}
	u, err := url.Parse(publicURL)
	if err != nil {
		return nil, nil, fmt.Errorf("public url: %w", err)
	}
	keySets, err := clientmeta.New(&clientmeta.Options{AllowLoopbackHTTP: httpx.IsLoopbackHost(u.Hostname())})
	return out, keySets, err
}

// mountApps adds the signed-in person's Connected apps API
// (oauth.PathApps) behind the API's authentication, as the approvals API
// is: people disconnect apps, and the apps' own broker tokens are refused
// there, plainly, before the authentication would refuse them anyway.
func mountApps(mux *http.ServeMux, authenticated func(http.Handler) http.Handler, brokerIssuer string, srv *oauth.Server) {
	api := broker.RefuseTokens(brokerIssuer, authenticated(srv.AppsHandler()))
	mux.Handle(oauth.PathApps, api)
	mux.Handle(oauth.PathApps+"/", api)
}

// clientsCmd runs `usher clients list|revoke`: the external MCP clients
// of the authorization server, whether registered (RFC 7591), known by
// their metadata document, or configured.
func (e *environment) clientsCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "revoke") {
		fmt.Fprint(e.stderr, "usage: usher clients list | usher clients revoke CLIENT_ID [flags]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("clients " + args[0])
	f.register(fs)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[string]int{"list": 0, "revoke": 1}[args[0]]
	if len(pos) != want {
		fmt.Fprint(e.stderr, "usage: usher clients list | usher clients revoke CLIENT_ID [flags]\n")
		return errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	if args[0] == "list" {
		return e.listClients(ctx, in.store)
	}
	return e.revokeClient(ctx, in, pos[0])
}

// listClients prints every client, revoked ones included, oldest first.
// Names and ids come from whoever registered the client: they are printed
// with control and formatting characters replaced and cut short, so that
// no client can write escape sequences to an operator's terminal.
func (e *environment) listClients(ctx context.Context, st store.Store) error {
	clients, err := st.ListOAuthClients(ctx)
	if err != nil {
		return err
	}
	if len(clients) == 0 {
		fmt.Fprintln(e.stdout, "no OAuth clients")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT ID\tKIND\tNAME\tREDIRECT HOSTS\tCREATED\tLAST USED\tSTATUS")
	for _, c := range clients {
		status := "active"
		if !c.RevokedAt.IsZero() {
			status = "revoked " + day(c.RevokedAt)
		}
		lastUsed := "never"
		if !c.LastUsedAt.IsZero() {
			lastUsed = day(c.LastUsedAt)
		}
		created := day(c.CreatedAt)
		if c.RegisteredBy != "" {
			created += " from " + terminalSafe(c.RegisteredBy, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", terminalSafe(c.ID, 0), c.Kind, terminalSafe(c.Name, 40),
			redirectHosts(c.RedirectURIs), created, lastUsed, status)
	}
	return tw.Flush()
}

// revokeClient revokes a client — with its refresh tokens and consents, in
// one transaction — and records it in the audit log. Access tokens already
// issued to it stay valid until they expire (broker.token_lifetime).
func (e *environment) revokeClient(ctx context.Context, in *installation, id string) error {
	c, err := in.store.GetOAuthClient(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no OAuth client %q (see usher clients list)", terminalSafe(id, 0))
	}
	if err != nil {
		return err
	}
	now := time.Now()
	if err := in.store.RevokeOAuthClient(ctx, id, now); err != nil {
		return err
	}
	log, err := audit.New(in.store, nil)
	if err != nil {
		return err
	}
	if err := log.Append(ctx, audit.Entry{Kind: audit.KindOAuthClientRevoked, At: now, ClientID: id,
		Details: []byte(`{"by":"usher clients revoke"}`)}); err != nil {
		return fmt.Errorf("the client is revoked, but the audit record was not written: %w", err)
	}
	if !c.RevokedAt.IsZero() {
		fmt.Fprintf(e.stdout, "%s was already revoked on %s; its refresh tokens and consents are revoked\n", terminalSafe(id, 0), day(c.RevokedAt))
		return nil
	}
	fmt.Fprintf(e.stdout, "revoked %s (%s): its refresh tokens and consents are revoked, and /mcp refuses the access tokens already issued to it\n",
		terminalSafe(id, 0), terminalSafe(c.Name, 40))
	return nil
}

// day is t's date in UTC, as the listing shows it.
func day(t time.Time) string { return t.UTC().Format("2006-01-02 15:04") }

// redirectHosts lists the hosts of a client's redirect URIs, which say
// more about where its codes go than its name does.
func redirectHosts(uris []string) string {
	var hosts []string
	seen := map[string]bool{}
	for _, raw := range uris {
		h := raw
		if u, err := url.Parse(raw); err == nil {
			h = u.Scheme + "://" + u.Host
			if u.Host == "" {
				h = u.Scheme + ":" // a private-use scheme (RFC 8252 §7.1)
			}
		}
		if h = terminalSafe(h, 60); !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return "-"
	}
	return strings.Join(hosts, ",")
}

// terminalSafe returns s with control, formatting (such as right-to-left
// overrides) and other invisible characters replaced by U+FFFD, and cut to
// max runes; with max 0, whole (an id, which a cut would make another).
func terminalSafe(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max && max > 0 {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = unicode.ReplacementChar
		}
		b.WriteRune(r)
		n++
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
)

// Config is the whole configuration of one Usher process. The yaml tag of
// each field is its key; the environment variable that overrides it is
// USHER_ + section + "_" + key, upper-cased (server.public_url →
// USHER_SERVER_PUBLIC_URL). Lists are comma-separated in the environment.
type Config struct {
	Server   Server   `yaml:"server"`
	Log      Log      `yaml:"log"`
	Database Database `yaml:"database"`
	Identity Identity `yaml:"identity"`
	Broker   Broker   `yaml:"broker"`
	MCP      MCP      `yaml:"mcp"`
	Policy   Policy   `yaml:"policy"`
	Approval Approval `yaml:"approvals"`
	// Assistant and Model configure the assistant runtime.
	Assistant Assistant `yaml:"assistant"`
	Model     Model     `yaml:"model"`
	// Events configures live updates.
	Events Events `yaml:"events"`
	// Web configures the Sessions UI's browser sign-in.
	Web Web `yaml:"web"`
	// OAuth configures the authorization server external MCP clients sign
	// in through (docs/api.md, "OAuth").
	OAuth OAuth `yaml:"oauth"`
	// Review names the security reviewers (docs/api.md, "Reviewers").
	Review Review `yaml:"review"`
	// Audit configures the audit log's delivery (docs/audit.md).
	Audit Audit `yaml:"audit"`
	// Admin names the operators who read the status, and how often each
	// replica reports to it (docs/operations.md, "Status").
	Admin Admin `yaml:"admin"`
}

// Server configures the HTTP listener and the process's files.
type Server struct {
	// Addr is the listen address. Default "127.0.0.1:8080".
	Addr string `yaml:"addr"`
	// PublicURL is the URL clients use to reach this server; it is the
	// broker's issuer, the authorization server's issuer and the base of
	// every link Usher hands out; a trailing slash is dropped. Default:
	// http:// + the listen address. Plain http is accepted only on
	// loopback, and a path not at all: Usher is served at the root of an
	// origin of its own (checkOwnOrigin).
	PublicURL string `yaml:"public_url"`
	// DataDir holds the SQLite database and generated key files. Default
	// "./data".
	DataDir string `yaml:"data_dir"`
	// ShutdownTimeout bounds graceful shutdown. Default 15s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// ShutdownDelay is how long `usher serve` keeps serving after SIGTERM
	// with /readyz answering 503, so that a balancer stops sending it new
	// requests before its listener closes; then it shuts down within
	// ShutdownTimeout. SIGINT does not wait. Default 5s; 0 turns it off.
	ShutdownDelay Duration `yaml:"shutdown_delay"`
	// MaxBodyBytes limits every request body. Default 1048576 (1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadTimeout bounds the reading of a request: its headers must arrive
	// within it, then its body within it again (408 after). Long-lived
	// responses (live-update streams, WebSockets) are not bounded by it.
	// Default 20s; between 1s and 10m.
	ReadTimeout Duration `yaml:"read_timeout"`
	// TrustedProxies are the reverse proxies in front of Usher, as
	// addresses or CIDR prefixes (10.0.0.0/8): only a request whose
	// connection comes from one of them has its client's address read from
	// ForwardedHeader. Default none: every client is its connection's peer.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ForwardedHeader is the header the trusted proxies write the client's
	// address in: X-Forwarded-For or Forwarded (RFC 7239). Default
	// X-Forwarded-For.
	ForwardedHeader string `yaml:"forwarded_header"`
	// DebugAddr, when set, is a second listen address serving the Go
	// runtime's profiles (net/http/pprof, under /debug/pprof/) and expvar
	// (/debug/vars), without authentication. It must be on loopback.
	// Default empty: no debug listener.
	DebugAddr string `yaml:"debug_addr"`
	// MetricsAddr, when set, is a second listen address that serves
	// /metrics, which the public listener then no longer serves: the
	// metrics need not be reachable by whoever reaches Usher. Default
	// empty: /metrics is served on Addr.
	MetricsAddr string `yaml:"metrics_addr"`
}

// Log configures structured logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Format is text or json. Default "text".
	Format string `yaml:"format"`
}

// Database selects the store.
type Database struct {
	// URL is a postgres:// URL for PostgreSQL. Default "": an embedded
	// SQLite file, <data_dir>/usher.db.
	URL string `yaml:"url"`
	// MaxConns caps PostgreSQL pool connections. Default 0: pgx's default.
	MaxConns int `yaml:"max_conns"`
}

// Identity configures how callers of the API are authenticated.
type Identity struct {
	// Issuer is the OIDC issuer URL, e.g.
	// https://login.microsoftonline.com/<tenant-id>/v2.0. Default "": the
	// built-in development provider at <public_url>/dev/oidc.
	Issuer string `yaml:"issuer"`
	// Audiences lists the accepted "aud" values (Entra: the API's client id
	// and/or App ID URI). Required with an issuer; default ["usher-api"] for
	// the development provider.
	Audiences []string `yaml:"audiences"`
	// RequiredScopes must all be present in the token's "scp": the API's
	// delegated scope (Entra: the scope its app registration exposes, by
	// its name, e.g. access_as_user: "scp" carries no App ID URI), which
	// only a token for a signed-in person carries.
	// Required with an issuer; default ["usher.api"] for the development
	// provider.
	RequiredScopes []string `yaml:"required_scopes"`
	// Tenants is the allow-list of "tid" values. Default empty: any tenant
	// of a single-tenant issuer; required when Issuer contains
	// identity.TenantPlaceholder ("{tenantid}").
	Tenants []string `yaml:"tenants"`
}

// Broker configures the token broker.
type Broker struct {
	// TokenLifetime is the lifetime of minted broker tokens. Default 5m, at
	// most 15m.
	TokenLifetime Duration `yaml:"token_lifetime"`
	// RotationPeriod is how long a signing key signs before its successor
	// takes over. Default 720h (30 days); at least 1h.
	RotationPeriod Duration `yaml:"rotation_period"`
	// KeyEncryptionKey seals the private signing keys at rest: 32 bytes,
	// base64. Default "": a key generated into <data_dir>/broker.key
	// (mode 0600). Replicas sharing PostgreSQL must share this key.
	KeyEncryptionKey string `yaml:"key_encryption_key"`
	// PreviousKeyEncryptionKeys open what they sealed and seal nothing
	// (each 32 bytes, base64): while key_encryption_key is replaced, the
	// old key — the stored signing keys until `usher keys reseal`, the
	// sealed sessions and states until they expire — or, in the roll
	// before the swap, the new one. Default none.
	PreviousKeyEncryptionKeys []string `yaml:"previous_key_encryption_keys"`
	// ClientID names the assistant in the tokens it is minted ("client_id"
	// and "act"). Default "usher-assistant".
	ClientID string `yaml:"client_id"`
}

// MCP configures Usher's MCP server and the upstream servers it federates.
type MCP struct {
	// Stateful keeps MCP sessions (Mcp-Session-Id) for the clients of
	// the protocols with a handshake, recorded in the database so that
	// any replica serves any request of one; a client of the sessionless
	// protocol 2026-07-28 is served as without it. Default true; false
	// keeps no sessions (each request on its own), which costs a tool
	// call less and gives the clients of the protocols with a handshake
	// no requests from upstreams, subscriptions or change notifications.
	Stateful bool `yaml:"stateful"`
	// DemoTools offers the per-user notes tools. Default true with the
	// development provider, else false.
	DemoTools *bool `yaml:"demo_tools"`
	// AllowedOrigins are browser origins, besides public_url's, that may
	// call /mcp. Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// Upstreams are MCP servers whose tools Usher re-exposes under a
	// prefix. Set in the file only.
	Upstreams []Upstream `yaml:"upstreams"`
	// MaxUpstreamSessionsPerUser is how many upstream sessions (for stdio,
	// processes) one user may have open on one process, across upstreams.
	// Default 16.
	MaxUpstreamSessionsPerUser int `yaml:"max_upstream_sessions_per_user"`
	// UpstreamCheckInterval is how often each replica lists every upstream
	// to tell whether it is up (usher_upstream_up). Default 30s; between
	// 1s and 1h.
	UpstreamCheckInterval Duration `yaml:"upstream_check_interval"`
}

// Upstream is one federated MCP server: url for streamable HTTP, or command
// (with args and env) for stdio.
type Upstream struct {
	Name    string            `yaml:"name"`
	URL     string            `yaml:"url"`
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	// Prefix namespaces its tools, prompts and resource URIs. Default
	// "<name>__"; "none" keeps the upstream's own names (at most one
	// upstream).
	Prefix string `yaml:"prefix"`
	// Headers are sent on every request to it (its own credentials).
	Headers map[string]string `yaml:"headers"`
	// BrokerToken sends a broker token minted for the upstream's own URL.
	BrokerToken bool `yaml:"broker_token"`
}

// Policy locates the approval policy and the tool lock.
type Policy struct {
	// File is the Cedar policy. Default "": the shipped default policy.
	File string `yaml:"file"`
	// LockFile is the reviewed tool lock. Default "<data_dir>/tools.lock".
	LockFile string `yaml:"lock_file"`
}

// Approval configures approval requests.
type Approval struct {
	// TTL is how long an approval request stays open. Default 24h.
	TTL Duration `yaml:"ttl"`
}

// Review configures the security reviewers' seat.
type Review struct {
	// Groups are the groups whose members are reviewers: a signed-in
	// person with one of them among the groups or the app roles of their
	// token reads their tenant's audit log, and changes nothing. Default
	// none: nobody is a reviewer.
	Groups []string `yaml:"groups"`
}

// Admin configures the operators' status view.
type Admin struct {
	// Groups are the groups whose members are admins: a signed-in person
	// with one of them among the groups or the app roles of their token
	// reads the status (GET /api/admin/status, the Operator page).
	// Default none: nobody is an admin.
	Groups []string `yaml:"groups"`
	// HeartbeatInterval is how often each replica records itself in the
	// database; one silent for three intervals is no longer listed.
	// Default 10s; between 100ms and 10m.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
}

// Assistant configures the assistant runtime. Zero values take the
// runtime's defaults.
type Assistant struct {
	// MaxConcurrency is how many turns one process runs at once. Default 4.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxActiveRuns is how many active runs a user may have. Default 5.
	MaxActiveRuns int `yaml:"max_active_runs"`
	// HistoryMessages is how many messages of history a turn starts from.
	// Default 24.
	HistoryMessages int `yaml:"history_messages"`
	// MaxToolCallsPerSlice is how many tool calls a turn makes before it
	// yields the run to the queue. Default 16.
	MaxToolCallsPerSlice int `yaml:"max_tool_calls_per_slice"`
	// MaxSteps is how many model steps one turn may take. Default 250.
	MaxSteps int `yaml:"max_steps"`
	// MaxSlices is a run's budget: how many slices of work it may take
	// over its life before it stops, failed, with the reason in its log.
	// Default 250.
	MaxSlices int `yaml:"max_slices"`
	// Lease is how long a claim on a run lasts unless renewed. Default 30s.
	Lease Duration `yaml:"lease"`
	// SweepInterval is how often a process looks for runs with work that
	// nothing holds or has queued, and for quiet runs: a backstop, since
	// expired leases are taken over as they expire. Default 30s.
	SweepInterval Duration `yaml:"sweep_interval"`
	// HoldIdle is how long a run's MCP session is kept after its last
	// turn. Default 5m.
	HoldIdle Duration `yaml:"hold_idle"`
	// IdleAfter is how long a run stays quiet before it is parked Idle.
	// Default 30m.
	IdleAfter Duration `yaml:"idle_after"`
	// MaxMessageBytes is the largest user message. Default 65536.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// AttachmentsMaxBytes is the largest file a person may attach, at
	// most MaxAttachmentBytes. Default 0: 10485760 (10 MiB).
	AttachmentsMaxBytes int64 `yaml:"attachments_max_bytes"`
	// AttachmentsQuotaBytes bounds one person's attachments together.
	// Default 0: 1073741824 (1 GiB).
	AttachmentsQuotaBytes int64 `yaml:"attachments_quota_bytes"`
	// DailyTokens bounds the model tokens, input and output, one
	// person's requests may use in a day (UTC), counted across replicas.
	// Default 0: no limit.
	DailyTokens int64 `yaml:"daily_tokens"`
	// DailyTokensByGroup are the limits, instead of DailyTokens, of the
	// people in these groups or app roles: the largest of a person's,
	// 0 for none. In the environment: group=tokens,group=tokens.
	DailyTokensByGroup map[string]int64 `yaml:"daily_tokens_by_group"`
	// DeleteInactiveAfter is how long a conversation may go without
	// activity — Idle, or closed — before it is deleted, as its owner
	// could delete it (its open approvals withdrawn). Default 0: never;
	// else 24h or more.
	DeleteInactiveAfter Duration `yaml:"delete_inactive_after"`
	// PurgeDeletedAfter is how long a deleted conversation keeps its
	// content before it is erased: its messages, tool calls and their
	// results, approvals and summaries (its attachments go when it is
	// deleted; its audit records stay). Default 0: kept for good; else
	// 1h or more.
	PurgeDeletedAfter Duration `yaml:"purge_deleted_after"`
	// SystemPrompt opens every model session. Default: Usher's own.
	SystemPrompt string `yaml:"system_prompt"`
}

// Events configures the live updates of runs.
type Events struct {
	// Transport is auto (Server-Sent Events, WebSocket and long-poll), sse
	// (the same) or long-poll (the streaming routes answer 503, for
	// proxies that buffer responses). Default "auto".
	Transport string `yaml:"transport"`
	// Heartbeat is how often a quiet stream sends a heartbeat. Default
	// 15s.
	Heartbeat Duration `yaml:"heartbeat"`
	// MaxStreamsPerUser is how many live-update subscribers (SSE,
	// WebSocket, long-poll) one user may hold open on one process; the
	// next gets 429. Default 16.
	MaxStreamsPerUser int `yaml:"max_streams_per_user"`
}

// Model configures the model provider.
type Model struct {
	// Provider is "demo" (deterministic, no network) or "openai" (any
	// OpenAI-compatible Chat Completions endpoint). Default "demo".
	Provider string `yaml:"provider"`
	// BaseURL is the endpoint's base URL, such as
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (Ollama).
	BaseURL string `yaml:"base_url"`
	// APIKey is the endpoint's key. Set it through USHER_MODEL_API_KEY
	// rather than the file.
	APIKey string `yaml:"api_key"`
	// Name is the model, such as gpt-4.1-mini: the one runs use unless
	// they choose another of Models. Default: the first of Models.
	Name string `yaml:"name"`
	// Models are the models people may choose from, per conversation,
	// by name (as the endpoint knows them). Default: none, which offers
	// Name alone. When set, Name must be one of them.
	Models []string `yaml:"models"`
	// Timeout bounds one model step. Default 2m.
	Timeout Duration `yaml:"timeout"`
	// ContextTokens is the model's context limit, in tokens, against
	// which each run's context use is recorded and shown. Default 0:
	// 80000.
	ContextTokens int `yaml:"context_tokens"`
	// Images says that the model takes images: an attached image reaches
	// it as an image_url part. Default false: a text-only model, which
	// gets a placeholder naming the image instead.
	Images bool `yaml:"images"`
}

// Web configures the browser sign-in of the Sessions UI (docs/web.md).
type Web struct {
	// ClientID is the OIDC client the Sessions UI signs in as. Default "":
	// with the development provider its own client ("usher-web"); with an
	// external issuer, browser sign-in is off until it is set.
	ClientID string `yaml:"client_id"`
	// ClientSecret authenticates a confidential client (Entra's "Web"
	// platform) at the token endpoint. Default "": a public client, PKCE
	// only. Set it through USHER_WEB_CLIENT_SECRET rather than the file.
	ClientSecret string `yaml:"client_secret"`
	// Scopes are requested besides openid and profile so that the access
	// token is for the API, e.g. ["api://usher/access_as_user"]. Required
	// with an external issuer and a client id; default with the
	// development provider: identity.required_scopes.
	Scopes []string `yaml:"scopes"`
	// SessionLifetime is how long a browser sign-in lasts. Default 8h;
	// between 5m and 168h.
	SessionLifetime Duration `yaml:"session_lifetime"`
	// RevocationTTL is how long a replica trusts its last check of a
	// browser session against the database: a session signed out on one
	// replica stops working on the others within it. Default 5s; at most
	// 1m.
	RevocationTTL Duration `yaml:"revocation_ttl"`
}

// OAuth configures Usher's OAuth 2.1 authorization server for its MCP
// endpoint: how clients may register and how long a sign-in lasts.
type OAuth struct {
	// Registration turns on Dynamic Client Registration (RFC 7591) at
	// /oauth/register, which Claude Desktop, VS Code and the MCP Inspector
	// use. Default true.
	Registration bool `yaml:"registration"`
	// RegistrationsPerHour is how many clients one address may register in
	// an hour, counted across replicas. Default 20; between 1 and 10000.
	RegistrationsPerHour int `yaml:"registrations_per_hour"`
	// RefreshIdle is how long a refresh token lasts unused: each use
	// rotates it and starts the time again. Default 336h (14 days); at
	// least 5m and at most refresh_absolute. Ended codes and refresh
	// tokens are kept as long for reuse detection, then swept.
	RefreshIdle Duration `yaml:"refresh_idle"`
	// RefreshAbsolute is how long a sign-in lasts from its consent,
	// however often its refresh tokens are used; then the person signs in
	// again. Default 2160h (90 days); between 1h and 8760h (365 days).
	RefreshAbsolute Duration `yaml:"refresh_absolute"`
	// RefreshReuseInterval is how long after a refresh token's rotation
	// its client may present it again and get the same next refresh token
	// (and a new access token): a retry whose answer was lost, or two
	// refreshes at once, rather than a copy of the token, which revokes
	// the sign-in. Default 30s; between 0 (every second use revokes) and
	// 5m.
	RefreshReuseInterval Duration `yaml:"refresh_reuse_interval"`
	// ClientMetadataDocuments accepts clients whose client_id is the https
	// URL of their Client ID Metadata Document, fetched with SSRF
	// protection. Default true.
	ClientMetadataDocuments bool `yaml:"client_metadata_documents"`
	// Clients are clients pre-registered here, with ids the operator
	// chooses (see OAuthClient). Only in the file. Default none.
	Clients []OAuthClient `yaml:"clients"`
	// TokenExchangeClients are the client_ids that may exchange a person's
	// access token for the API (from identity.issuer) for an access token
	// for the MCP endpoint at /oauth/token (RFC 8693), each a confidential
	// client (client_secret_basic or private_key_jwt). Default none: the
	// exchange is off.
	TokenExchangeClients []string `yaml:"token_exchange_clients"`
}

// Duration is a time.Duration written as "5m", "15s", "720h".
type Duration time.Duration

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Default returns the configuration of the embedded default: SQLite under
// ./data, the development OIDC provider, 127.0.0.1:8080.
func Default() Config {
	return Config{
		Server: Server{
			Addr:            "127.0.0.1:8080",
			DataDir:         "./data",
			ShutdownTimeout: Duration(15 * time.Second),
			ShutdownDelay:   Duration(5 * time.Second),
			MaxBodyBytes:    1 << 20,
			ReadTimeout:     Duration(20 * time.Second),
			ForwardedHeader: httpx.HeaderXForwardedFor,
		},
		Log: Log{Level: "info", Format: "text"},
		Broker: Broker{
			TokenLifetime:  Duration(5 * time.Minute),
			RotationPeriod: Duration(30 * 24 * time.Hour),
			ClientID:       "usher-assistant",
		},
		MCP:      MCP{Stateful: true, UpstreamCheckInterval: Duration(30 * time.Second)},
		Approval: Approval{TTL: Duration(24 * time.Hour)},
		Model:    Model{Provider: "demo", Timeout: Duration(2 * time.Minute)},
		Events:   Events{Transport: "auto", Heartbeat: Duration(15 * time.Second), MaxStreamsPerUser: 16},
		Web:      Web{SessionLifetime: Duration(8 * time.Hour), RevocationTTL: Duration(5 * time.Second)},
		OAuth: OAuth{
			Registration:            true,
			RegistrationsPerHour:    20,
			RefreshIdle:             Duration(14 * 24 * time.Hour),
			RefreshAbsolute:         Duration(90 * 24 * time.Hour),
			RefreshReuseInterval:    Duration(30 * time.Second),
			ClientMetadataDocuments: true,
		},
		Audit: Audit{CheckpointInterval: Duration(time.Minute)},
		Admin: Admin{HeartbeatInterval: Duration(10 * time.Second)},
	}
}

// Overrides are the command-line flags shared by every subcommand; a
// non-empty field wins over the file and the environment.
type Overrides struct {
	Addr        string
	DataDir     string
	DatabaseURL string
}

// Load builds the configuration: defaults, then the YAML file at path (if
// path is not empty), then USHER_* variables from getenv, then flags. It
// returns one error naming every bad key.
func Load(path string, getenv func(string) string, o Overrides) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	var errs []error
	for _, k := range Keys() {
		v := getenv(k.Env)
		if v == "" {
			continue
		}
		if err := k.set(&c, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (from %s): %w", k.Name, k.Env, err))
		}
	}
	if o.Addr != "" {
		c.Server.Addr = o.Addr
	}
	if o.DataDir != "" {
		c.Server.DataDir = o.DataDir
	}
	if o.DatabaseURL != "" {
		c.Database.URL = o.DatabaseURL
	}
	c.applyDerivedDefaults()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return c, nil
}

// DevIdentity reports whether the built-in development OIDC provider is in
// use, i.e. no external issuer is configured.
func (c *Config) DevIdentity() bool { return c.Identity.Issuer == "" }

// EmbeddedDatabase reports whether the database is the embedded SQLite
// file under the data directory (no database.url), which one process
// serves.
func (c *Config) EmbeddedDatabase() bool { return c.Database.URL == "" }

// DemoTools reports whether the demo notes tools are offered: as
// configured, else only with the development provider.
func (c *Config) DemoTools() bool {
	if c.MCP.DemoTools != nil {
		return *c.MCP.DemoTools
	}
	return c.DevIdentity()
}

// MaxModels bounds model.models.
const MaxModels = 50

// DevAudience and DevScope are the audience and scope of the tokens the
// built-in development provider issues for the API.
const (
	DevAudience = "usher-api"
	DevScope    = "usher.api"
)

func (c *Config) applyDerivedDefaults() {
	// The public URL is the broker's issuer and the authorization server's,
	// compared as strings (RFC 8414 §3.3), and every link is built by
	// appending a path to it: one trailing slash would make two issuers.
	c.Server.PublicURL = strings.TrimSuffix(c.Server.PublicURL, "/")
	if c.Policy.LockFile == "" {
		c.Policy.LockFile = filepath.Join(c.Server.DataDir, "tools.lock")
	}
	if c.Model.Name == "" && len(c.Model.Models) > 0 {
		c.Model.Name = c.Model.Models[0]
	}
	if c.DevIdentity() {
		if len(c.Identity.Audiences) == 0 {
			c.Identity.Audiences = []string{DevAudience}
		}
		if len(c.Identity.RequiredScopes) == 0 {
			c.Identity.RequiredScopes = []string{DevScope}
		}
	}
}

// Validate checks every key and reports all problems together, section
// by section.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	c.Server.validate(bad)
	c.Log.validate(bad)
	c.Database.validate(bad)
	c.Identity.validate(bad)
	c.Broker.validate(bad)
	c.Assistant.validate(bad)
	c.Events.validate(bad)
	c.MCP.validate(bad)
	c.Model.validate(bad)
	c.Approval.validate(bad)
	c.Web.validate(bad, c.DevIdentity())
	c.OAuth.validate(bad)
	c.Review.validate(bad)
	c.Audit.validate(bad)
	c.Admin.validate(bad)
	return errors.Join(errs...)
}

// reporter records one problem of a key.
type reporter func(key, format string, args ...any)

// validate reports the problems of the server section.
func (s Server) validate(bad reporter) {
	if _, _, err := net.SplitHostPort(s.Addr); err != nil {
		bad("server.addr", "want host:port, got %q", s.Addr)
	}
	if s.PublicURL != "" {
		if err := checkPublicURL(s.PublicURL); err != nil {
			bad("server.public_url", "%v", err)
		} else if err := checkOwnOrigin(s.PublicURL); err != nil {
			bad("server.public_url", "%v", err)
		}
	}
	if s.DataDir == "" {
		bad("server.data_dir", "must not be empty")
	}
	if s.ShutdownTimeout <= 0 {
		bad("server.shutdown_timeout", "must be positive")
	}
	if s.ShutdownDelay < 0 {
		bad("server.shutdown_delay", "must not be negative")
	}
	if s.MaxBodyBytes < 1024 {
		bad("server.max_body_bytes", "must be at least 1024")
	}
	if rt := s.ReadTimeout.Std(); rt < time.Second || rt > 10*time.Minute {
		bad("server.read_timeout", "must be between 1s and 10m, got %s", rt)
	}
	if h := s.ForwardedHeader; !strings.EqualFold(h, httpx.HeaderXForwardedFor) && !strings.EqualFold(h, httpx.HeaderForwarded) {
		bad("server.forwarded_header", "want X-Forwarded-For or Forwarded, got %q", h)
	} else if _, err := httpx.NewTrustedProxies(s.TrustedProxies, h); err != nil {
		bad("server.trusted_proxies", "%v", err)
	}
	if s.DebugAddr != "" {
		if host, _, err := net.SplitHostPort(s.DebugAddr); err != nil {
			bad("server.debug_addr", "want host:port, got %q", s.DebugAddr)
		} else if !httpx.IsLoopbackHost(host) {
			bad("server.debug_addr", "must be on loopback (127.0.0.1, ::1 or localhost): it serves profiles without authentication, got %q", s.DebugAddr)
		}
	}
	if s.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(s.MetricsAddr); err != nil || port == "" {
			bad("server.metrics_addr", "want host:port, got %q", s.MetricsAddr)
		} else if port != "0" && (s.MetricsAddr == s.Addr || s.MetricsAddr == s.DebugAddr) {
			bad("server.metrics_addr", "must differ from server.addr and server.debug_addr, got %q", s.MetricsAddr)
		}
	}
}

// validate reports the problems of the log section.
func (l Log) validate(bad reporter) {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, l.Level) {
		bad("log.level", "want debug, info, warn or error, got %q", l.Level)
	}
	if !slices.Contains([]string{"text", "json"}, l.Format) {
		bad("log.format", "want text or json, got %q", l.Format)
	}
}

// validate reports the problems of the database section.
func (d Database) validate(bad reporter) {
	if u := d.URL; u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		bad("database.url", "want a postgres:// URL (leave empty for the embedded SQLite file)")
	}
	if d.MaxConns < 0 {
		bad("database.max_conns", "must not be negative")
	}
}

// validate reports the problems of the identity section.
func (i Identity) validate(bad reporter) {
	if i.Issuer != "" {
		if err := checkPublicURL(i.Issuer); err != nil {
			bad("identity.issuer", "%v", err)
		}
		if len(i.Audiences) == 0 {
			bad("identity.audiences", "at least one audience is required with an issuer")
		}
		if len(i.RequiredScopes) == 0 {
			bad("identity.required_scopes", "name the API's delegated scope (e.g. access_as_user): without one, tokens an application obtained for itself would be accepted")
		}
	}
	if slices.ContainsFunc(i.RequiredScopes, func(s string) bool { return s == "" || strings.ContainsAny(s, " \t") }) {
		bad("identity.required_scopes", "must not contain an empty scope or one with spaces")
	}
	for _, s := range i.RequiredScopes {
		if name, ok := fullScopeName(i.Issuer, s); ok {
			want := "its name"
			if name != "" {
				want = strconv.Quote(name)
			}
			bad("identity.required_scopes", "%q is the scope's full name, which web.scopes requests; "+
				"the access token's scp carries the scope's name without the App ID URI: want %s", s, want)
		}
	}
	if slices.Contains(i.Audiences, "") {
		bad("identity.audiences", "must not contain an empty value")
	}
	if n := strings.Count(i.Issuer, identity.TenantPlaceholder); n > 1 {
		bad("identity.issuer", "%s may appear only once", identity.TenantPlaceholder)
	} else if n == 1 && len(i.Tenants) == 0 {
		bad("identity.tenants", "list the tenant ids (tid) whose people may sign in: "+
			"a multi-tenant issuer (containing %s) would otherwise accept every Entra tenant", identity.TenantPlaceholder)
	}
	if slices.ContainsFunc(i.Tenants, func(t string) bool { return strings.TrimSpace(t) == "" }) {
		bad("identity.tenants", "must not contain an empty tenant id")
	}
}

// entraHosts are the hosts of Microsoft Entra ID's issuers, in the public
// and the national clouds.
var entraHosts = []string{"login.microsoftonline.com", "login.microsoftonline.us", "login.partner.microsoftonline.cn",
	"login.chinacloudapi.cn", "sts.windows.net"}

// fullScopeName reports whether the required scope s is a scope's full
// name, as Entra's clients request it ("api://usher/access_as_user"),
// where the access token's scp carries only the name ("access_as_user"),
// which it returns: any scope in Entra's api:// App ID URI form, and any
// URI for an issuer of Entra's. (Other issuers may name scopes by URIs
// and carry them so.) The name is "" when s has none.
func fullScopeName(issuer, s string) (string, bool) {
	entra := strings.Contains(issuer, identity.TenantPlaceholder)
	if u, err := url.Parse(issuer); err == nil && slices.Contains(entraHosts, strings.ToLower(u.Hostname())) {
		entra = true
	}
	if !strings.HasPrefix(strings.ToLower(s), "api://") && !(entra && strings.Contains(s, "://")) {
		return "", false
	}
	return s[strings.LastIndex(s, "/")+1:], true
}

// validate reports the problems of the broker section.
func (b Broker) validate(bad reporter) {
	if lt := b.TokenLifetime.Std(); lt < 30*time.Second || lt > 15*time.Minute {
		bad("broker.token_lifetime", "must be between 30s and 15m, got %s", lt)
	}
	if b.RotationPeriod.Std() < time.Hour {
		bad("broker.rotation_period", "must be at least 1h, got %s", b.RotationPeriod.Std())
	}
	if k := b.KeyEncryptionKey; k != "" {
		if b, err := base64.StdEncoding.DecodeString(k); err != nil || len(b) != 32 {
			bad("broker.key_encryption_key", "must be 32 bytes, base64-encoded")
		}
	}
	for _, k := range b.PreviousKeyEncryptionKeys {
		if b, err := base64.StdEncoding.DecodeString(k); err != nil || len(b) != 32 {
			bad("broker.previous_key_encryption_keys", "must each be 32 bytes, base64-encoded")
			break
		}
	}
	if len(b.PreviousKeyEncryptionKeys) > 0 && b.KeyEncryptionKey == "" {
		bad("broker.previous_key_encryption_keys", "need broker.key_encryption_key, the key that seals")
	}
	if b.ClientID == "" {
		bad("broker.client_id", "must not be empty")
	}
}

// MaxAttachmentBytes bounds assistant.attachments_max_bytes: an
// attachment is read whole into memory, and stored in one row.
const MaxAttachmentBytes = 256 << 20

// validate reports the problems of the assistant section.
func (a Assistant) validate(bad reporter) {
	for key, v := range map[string]int{"assistant.max_concurrency": a.MaxConcurrency, "assistant.max_active_runs": a.MaxActiveRuns,
		"assistant.history_messages": a.HistoryMessages, "assistant.max_tool_calls_per_slice": a.MaxToolCallsPerSlice,
		"assistant.max_steps": a.MaxSteps, "assistant.max_slices": a.MaxSlices, "assistant.max_message_bytes": a.MaxMessageBytes} {
		if v < 0 || v > 1<<20 {
			bad(key, "must be between 0 (the default) and 1048576, got %d", v)
		}
	}
	if a.AttachmentsMaxBytes < 0 || a.AttachmentsMaxBytes > MaxAttachmentBytes {
		bad("assistant.attachments_max_bytes", "must be between 0 (the default) and %d, got %d", int64(MaxAttachmentBytes), a.AttachmentsMaxBytes)
	}
	if a.AttachmentsQuotaBytes < 0 || (a.AttachmentsQuotaBytes > 0 && a.AttachmentsQuotaBytes < a.AttachmentsMaxBytes) {
		bad("assistant.attachments_quota_bytes", "must be 0 (the default) or at least assistant.attachments_max_bytes, got %d", a.AttachmentsQuotaBytes)
	}
	if a.DailyTokens < 0 {
		bad("assistant.daily_tokens", "must be 0 (no limit) or more, got %d", a.DailyTokens)
	}
	for _, g := range slices.Sorted(maps.Keys(a.DailyTokensByGroup)) {
		if n := a.DailyTokensByGroup[g]; strings.TrimSpace(g) == "" || n < 0 {
			bad("assistant.daily_tokens_by_group", "must map groups to 0 (no limit) or more tokens, got %q: %d", g, n)
		}
	}
	if d := a.DeleteInactiveAfter.Std(); d < 0 || (d > 0 && d < 24*time.Hour) {
		bad("assistant.delete_inactive_after", "must be 0 (keep conversations) or 24h or more, got %s", d)
	}
	if p := a.PurgeDeletedAfter.Std(); p < 0 || (p > 0 && p < time.Hour) {
		bad("assistant.purge_deleted_after", "must be 0 (keep deleted conversations) or 1h or more, got %s", p)
	}
	if a.Lease != 0 && (a.Lease.Std() < 3*time.Second || a.Lease.Std() > time.Hour) {
		bad("assistant.lease", "must be between 3s and 1h, got %s", a.Lease.Std())
	}
	for key, v := range map[string]Duration{"assistant.sweep_interval": a.SweepInterval, "assistant.hold_idle": a.HoldIdle, "assistant.idle_after": a.IdleAfter} {
		if v < 0 {
			bad(key, "must not be negative, got %s", v.Std())
		}
	}
}

// validate reports the problems of the events section.
func (e Events) validate(bad reporter) {
	if n := e.MaxStreamsPerUser; n < 1 || n > 10_000 {
		bad("events.max_streams_per_user", "must be between 1 and 10000, got %d", n)
	}
	switch e.Transport {
	case "auto", "sse", "long-poll":
	default:
		bad("events.transport", "must be auto, sse or long-poll, got %q", e.Transport)
	}
	if e.Heartbeat.Std() < time.Second || e.Heartbeat.Std() > 5*time.Minute {
		bad("events.heartbeat", "must be between 1s and 5m, got %s", e.Heartbeat.Std())
	}
}

// validate reports the problems of the mcp section.
func (m MCP) validate(bad reporter) {
	if d := m.UpstreamCheckInterval.Std(); d < time.Second || d > time.Hour {
		bad("mcp.upstream_check_interval", "must be between 1s and 1h, got %s", d)
	}
	if n := m.MaxUpstreamSessionsPerUser; n < 0 || n > 10_000 {
		bad("mcp.max_upstream_sessions_per_user", "must be between 0 (the default) and 10000, got %d", n)
	}
	for i, u := range m.Upstreams {
		key := fmt.Sprintf("mcp.upstreams[%d]", i)
		if u.Name == "" {
			bad(key+".name", "must not be empty")
		}
		if (u.URL == "") == (u.Command == "") {
			bad(key, "set exactly one of url and command")
		}
	}
}

// validate reports the problems of the model section.
func (m Model) validate(bad reporter) {
	switch m.Provider {
	case "demo":
	case "openai":
		if m.BaseURL == "" {
			bad("model.base_url", "is required for the openai provider")
		}
		if m.Name == "" {
			bad("model.name", "is required for the openai provider")
		}
	default:
		bad("model.provider", "must be demo or openai, got %q", m.Provider)
	}
	if n := len(m.Models); n > MaxModels {
		bad("model.models", "offers %d models, at most %d", n, MaxModels)
	}
	for i, name := range m.Models {
		if name == "" || len(name) > 200 || strings.TrimSpace(name) != name || strings.ContainsFunc(name, unicode.IsControl) {
			bad("model.models", "model #%d (%q) must be a name of at most 200 bytes, without spaces around it or control characters", i+1, name)
		} else if slices.Contains(m.Models[:i], name) {
			bad("model.models", "offers %q twice", name)
		}
	}
	if len(m.Models) > 0 && !slices.Contains(m.Models, m.Name) {
		bad("model.name", "must be one of model.models (%s), got %q", strings.Join(m.Models, ", "), m.Name)
	}
	if m.Timeout.Std() < time.Second {
		bad("model.timeout", "must be at least 1s, got %s", m.Timeout.Std())
	}
	if n := m.ContextTokens; n != 0 && (n < 1000 || n > 10_000_000) {
		bad("model.context_tokens", "must be 0 (the default, 80000) or between 1000 and 10000000, got %d", n)
	}
}

// validate reports the problems of the approvals section.
func (a Approval) validate(bad reporter) {
	if a.TTL.Std() < time.Minute || a.TTL.Std() > 30*24*time.Hour {
		bad("approvals.ttl", "must be between 1m and 720h, got %s", a.TTL.Std())
	}
}

// validate reports the problems of the web section; devIdentity: the built-in development provider signs people in.
func (w Web) validate(bad reporter, devIdentity bool) {
	if lt := w.SessionLifetime.Std(); lt < 5*time.Minute || lt > 7*24*time.Hour {
		bad("web.session_lifetime", "must be between 5m and 168h, got %s", lt)
	}
	if ttl := w.RevocationTTL.Std(); ttl < time.Second || ttl > time.Minute {
		bad("web.revocation_ttl", "must be between 1s and 1m, got %s", ttl)
	}
	if w.ClientID != "" && !devIdentity && len(w.Scopes) == 0 {
		bad("web.scopes", "name the API's scope (e.g. api://usher/access_as_user) so that browser sign-in gets an access token for the API")
	}
	if slices.ContainsFunc(w.Scopes, func(s string) bool { return s == "" || strings.ContainsAny(s, " \t") }) {
		bad("web.scopes", "must not contain an empty scope or one with spaces")
	}
}

// validate reports the problems of the review section.
func (r Review) validate(bad reporter) { validateGroups(bad, "review.groups", r.Groups) }

// validate reports the problems of the admin section.
func (a Admin) validate(bad reporter) {
	validateGroups(bad, "admin.groups", a.Groups)
	if d := a.HeartbeatInterval.Std(); d < 100*time.Millisecond || d > 10*time.Minute {
		bad("admin.heartbeat_interval", "must be between 100ms and 10m, got %s", d)
	}
}

// validateGroups reports an empty, padded, comma-holding or repeated
// group of the list key.
func validateGroups(bad reporter, key string, groups []string) {
	for i, g := range groups {
		switch {
		case g == "" || strings.TrimSpace(g) != g || strings.ContainsAny(g, ","):
			bad(key, "must not contain an empty group, one with surrounding spaces or one with a comma, got %q", g)
		case slices.Contains(groups[:i], g):
			bad(key, "names %q twice", g)
		}
	}
}

// validate reports the problems of the oauth section.
func (o OAuth) validate(bad reporter) {
	if n := o.RegistrationsPerHour; n < 1 || n > 10_000 {
		bad("oauth.registrations_per_hour", "must be between 1 and 10000, got %d", n)
	}
	abs := o.RefreshAbsolute.Std()
	if abs < time.Hour || abs > 365*24*time.Hour {
		bad("oauth.refresh_absolute", "must be between 1h and 8760h, got %s", abs)
	}
	if idle := o.RefreshIdle.Std(); idle < 5*time.Minute || idle > abs {
		bad("oauth.refresh_idle", "must be at least 5m and at most oauth.refresh_absolute (%s), got %s", abs, idle)
	}
	if d := o.RefreshReuseInterval.Std(); d < 0 || d > 5*time.Minute {
		bad("oauth.refresh_reuse_interval", "must be between 0s and 5m, got %s", d)
	}
	o.validateClients(bad)
	if slices.ContainsFunc(o.TokenExchangeClients, func(id string) bool { return strings.TrimSpace(id) != id || id == "" }) {
		bad("oauth.token_exchange_clients", "must not contain an empty client_id or one with surrounding spaces")
	}
}

// checkPublicURL accepts an absolute https URL, or http on a loopback host.
func checkPublicURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("want an absolute URL without query or fragment, got %q", s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if httpx.IsLoopbackHost(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("plain http is allowed only on loopback, got %q", s)
	}
	return fmt.Errorf("want an http(s) URL, got %q", s)
}

// checkOwnOrigin refuses a public URL with a path: Usher is served at the
// root of an origin of its own. Its sign-in cookie and its checks of a
// request's Origin are the origin's, so an application beside it on the
// same host and port would be sent the cookie and pass the checks; and
// the Sessions UI, its sign-in and the discovery documents of its
// authorization server are at fixed paths from the root.
func checkOwnOrigin(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if strings.TrimSuffix(u.EscapedPath(), "/") != "" {
		return fmt.Errorf("want an origin of Usher's own, such as https://usher.example.com: Usher is served at the root of its host, not under a path; got %q", s)
	}
	return nil
}

// Key describes one configuration key, for environment overrides and for the
// documentation test that keeps the README complete.
type Key struct {
	Name  string // section.key, e.g. "server.addr"
	Env   string // e.g. "USHER_SERVER_ADDR"
	index []int
}

// Keys lists every configuration key in declaration order.
func Keys() []Key {
	var keys []Key
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sec := ct.Field(i)
		sname := yamlName(sec)
		for j := range sec.Type.NumField() {
			f := sec.Type.Field(j)
			kname := yamlName(f)
			keys = append(keys, Key{
				Name:  sname + "." + kname,
				Env:   "USHER_" + strings.ToUpper(sname+"_"+kname),
				index: []int{i, j},
			})
		}
	}
	return keys
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// set parses v into the key's field of c.
func (k Key) set(c *Config, v string) error {
	f := reflect.ValueOf(c).Elem().FieldByIndex(k.index)
	switch p := f.Addr().Interface().(type) {
	case *string:
		*p = v
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		*p = n
	case *int64:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		*p = n
	case *Duration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 5m, got %q", v)
		}
		*p = Duration(d)
	case **bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p = &b
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p = b
	case *map[string]int64:
		m := map[string]int64{}
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			k, n, ok := strings.Cut(s, "=")
			limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
			if !ok || err != nil || strings.TrimSpace(k) == "" {
				return fmt.Errorf("want name=integer pairs separated by commas, got %q", s)
			}
			m[strings.TrimSpace(k)] = limit
		}
		*p = m
	case *[]string:
		var list []string
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		*p = list
	default:
		return fmt.Errorf("can be set only in the configuration file")
	}
	return nil
}

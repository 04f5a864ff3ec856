package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "usher.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsAreTheEmbeddedDefault(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != "127.0.0.1:8080" || c.Server.DataDir != "./data" || c.Database.URL != "" || c.Server.ReadTimeout.Std() != 20*time.Second {
		t.Errorf("server/database defaults = %+v %+v", c.Server, c.Database)
	}
	if !c.DevIdentity() || c.Identity.Audiences[0] != DevAudience || c.Identity.RequiredScopes[0] != DevScope {
		t.Errorf("identity defaults = %+v", c.Identity)
	}
	if c.Broker.TokenLifetime.Std() != 5*time.Minute {
		t.Errorf("token lifetime = %s", c.Broker.TokenLifetime.Std())
	}
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	p := writeFile(t, `
server:
  addr: 127.0.0.1:9000
  data_dir: /var/lib/usher
log:
  level: debug
broker:
  token_lifetime: 2m
identity:
  issuer: https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0
  audiences: [api://usher]
  required_scopes: [access_as_user]
`)
	c, err := Load(p, env(map[string]string{
		"USHER_SERVER_ADDR":        "127.0.0.1:9001",
		"USHER_IDENTITY_TENANTS":   "t1, t2",
		"USHER_BROKER_CLIENT_ID":   "assistant",
		"USHER_DATABASE_MAX_CONNS": "7",
	}), Overrides{Addr: "127.0.0.1:9002"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != "127.0.0.1:9002" {
		t.Errorf("flag must win: addr = %s", c.Server.Addr)
	}
	if c.Server.DataDir != "/var/lib/usher" || c.Log.Level != "debug" || c.Broker.TokenLifetime.Std() != 2*time.Minute {
		t.Errorf("file values lost: %+v", c)
	}
	if strings.Join(c.Identity.Tenants, "|") != "t1|t2" || c.Broker.ClientID != "assistant" || c.Database.MaxConns != 7 {
		t.Errorf("env values lost: %+v", c)
	}
	if c.DevIdentity() || strings.Join(c.Identity.RequiredScopes, " ") != "access_as_user" {
		t.Errorf("an external issuer must not get development defaults: %+v", c.Identity)
	}
}

func TestEveryKeyHasAWorkingEnvironmentOverride(t *testing.T) {
	values := map[string]string{
		"server.addr": "127.0.0.1:1", "server.public_url": "https://usher.example.com",
		"server.data_dir": "/d", "server.shutdown_timeout": "3s", "server.shutdown_delay": "2s", "server.max_body_bytes": "4096",
		"server.read_timeout": "45s", "server.trusted_proxies": "10.0.0.0/8, 192.0.2.7", "server.forwarded_header": "Forwarded",
		"server.debug_addr": "127.0.0.1:6060", "server.metrics_addr": "0.0.0.0:9090", "log.level": "warn", "log.format": "json",
		"database.url": "postgres://u@h/db", "database.max_conns": "3",
		"identity.issuer": "https://issuer.example.com", "identity.audiences": "a,b",
		"identity.required_scopes": "s", "identity.tenants": "t",
		"broker.token_lifetime": "1m", "broker.rotation_period": "2h",
		"broker.key_encryption_key": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "broker.client_id": "c",
		"broker.previous_key_encryption_keys": "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=, AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=",
		"mcp.stateful":                        "false", "mcp.demo_tools": "false", "mcp.allowed_origins": "https://a.example.com",
		"mcp.upstreams": "", "mcp.max_upstream_sessions_per_user": "3", "mcp.upstream_check_interval": "10s", "policy.file": "/etc/usher/policy.cedar", "policy.lock_file": "/etc/usher/tools.lock",
		"approvals.ttl":             "2h",
		"assistant.max_concurrency": "2", "assistant.max_active_runs": "3", "assistant.history_messages": "10",
		"assistant.max_tool_calls_per_slice": "4", "assistant.max_steps": "20", "assistant.max_slices": "30", "assistant.lease": "10s",
		"assistant.sweep_interval": "5s", "assistant.hold_idle": "1m", "assistant.idle_after": "10m",
		"assistant.max_message_bytes": "1000", "assistant.system_prompt": "Be brief.",
		"assistant.attachments_max_bytes": "2048", "assistant.attachments_quota_bytes": "4096", "model.images": "true",
		"assistant.daily_tokens": "500000", "assistant.daily_tokens_by_group": "research = 2000000, ops=0", "assistant.purge_deleted_after": "720h", "assistant.delete_inactive_after": "2160h",
		"model.provider": "openai", "model.base_url": "http://127.0.0.1:1/v1", "model.api_key": "k",
		"model.name": "m", "model.models": "m, n", "model.timeout": "30s", "model.context_tokens": "128000",
		"events.transport": "long-poll", "events.heartbeat": "5s", "events.max_streams_per_user": "4",
		"web.client_id": "w", "web.client_secret": "ws", "web.scopes": "api://usher/access_as_user",
		"web.session_lifetime": "1h", "web.revocation_ttl": "2s",
		"oauth.registration": "false", "oauth.registrations_per_hour": "5", "oauth.refresh_idle": "1h",
		"oauth.refresh_absolute": "48h", "oauth.refresh_reuse_interval": "0s", "oauth.client_metadata_documents": "false", "oauth.clients": "",
		"oauth.token_exchange_clients": "usher-dcr-a, usher-dcr-b", "audit.sinks": "",
		"review.groups": "security, audit",
		"admin.groups":  "operators", "admin.heartbeat_interval": "2s",
		"audit.checkpoint_interval": "30s", "audit.checkpoint_origin": "usher.example.com/prod",
	}
	m := map[string]string{}
	for _, k := range Keys() {
		v, ok := values[k.Name]
		if !ok {
			t.Fatalf("key %s has no test value", k.Name)
		}
		m[k.Env] = v
	}
	c, err := Load("", env(m), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.PublicURL != "https://usher.example.com" || c.Server.ShutdownTimeout.Std() != 3*time.Second || c.Server.ShutdownDelay.Std() != 2*time.Second ||
		c.Server.MaxBodyBytes != 4096 || c.Server.ReadTimeout.Std() != 45*time.Second || c.Log.Format != "json" || c.Database.URL != "postgres://u@h/db" ||
		c.Broker.RotationPeriod.Std() != 2*time.Hour || len(c.Identity.Audiences) != 2 || len(c.Broker.PreviousKeyEncryptionKeys) != 2 ||
		c.MCP.Stateful || c.DemoTools() || c.Policy.File == "" || c.Policy.LockFile != "/etc/usher/tools.lock" ||
		c.Approval.TTL.Std() != 2*time.Hour || len(c.MCP.AllowedOrigins) != 1 ||
		c.Web.ClientID != "w" || c.Web.ClientSecret != "ws" || len(c.Web.Scopes) != 1 || c.Web.SessionLifetime.Std() != time.Hour ||
		c.Web.RevocationTTL.Std() != 2*time.Second || c.Events.MaxStreamsPerUser != 4 || c.MCP.MaxUpstreamSessionsPerUser != 3 ||
		c.OAuth.Registration || c.OAuth.RegistrationsPerHour != 5 || c.OAuth.RefreshIdle.Std() != time.Hour ||
		c.OAuth.RefreshAbsolute.Std() != 48*time.Hour || c.OAuth.RefreshReuseInterval != 0 || c.OAuth.ClientMetadataDocuments ||
		strings.Join(c.OAuth.TokenExchangeClients, "|") != "usher-dcr-a|usher-dcr-b" ||
		strings.Join(c.Review.Groups, "|") != "security|audit" ||
		len(c.Server.TrustedProxies) != 2 || c.Server.ForwardedHeader != "Forwarded" || c.Model.ContextTokens != 128000 || c.Assistant.MaxSlices != 30 ||
		c.Audit.CheckpointInterval.Std() != 30*time.Second || c.Audit.CheckpointOrigin != "usher.example.com/prod" ||
		strings.Join(c.Admin.Groups, "|") != "operators" || c.Admin.HeartbeatInterval.Std() != 2*time.Second ||
		c.Server.MetricsAddr != "0.0.0.0:9090" || c.MCP.UpstreamCheckInterval.Std() != 10*time.Second ||
		c.Assistant.AttachmentsMaxBytes != 2048 || c.Assistant.AttachmentsQuotaBytes != 4096 || !c.Model.Images ||
		c.Assistant.DailyTokens != 500000 || c.Assistant.PurgeDeletedAfter.Std() != 720*time.Hour || c.Assistant.DeleteInactiveAfter.Std() != 2160*time.Hour || !maps.Equal(c.Assistant.DailyTokensByGroup, map[string]int64{"research": 2000000, "ops": 0}) {
		t.Errorf("overrides not applied: %+v", c)
	}
}

func TestValidationReportsEveryProblemByKey(t *testing.T) {
	_, err := Load("", env(map[string]string{
		"USHER_SERVER_ADDR":                         "nope",
		"USHER_SERVER_PUBLIC_URL":                   "http://usher.example.com",
		"USHER_LOG_LEVEL":                           "loud",
		"USHER_DATABASE_URL":                        "mysql://x",
		"USHER_IDENTITY_ISSUER":                     "https://issuer.example.com",
		"USHER_BROKER_TOKEN_LIFETIME":               "1h",
		"USHER_BROKER_KEY_ENCRYPTION_KEY":           "c2hvcnQ=",
		"USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=, c2hvcnQ=",
		"USHER_SERVER_MAX_BODY_BYTES":               "lots",
		"USHER_SERVER_READ_TIMEOUT":                 "100ms",
		"USHER_SERVER_SHUTDOWN_DELAY":               "-1s",
		"USHER_WEB_REVOCATION_TTL":                  "1h",
		"USHER_EVENTS_MAX_STREAMS_PER_USER":         "0",
		"USHER_AUDIT_CHECKPOINT_INTERVAL":           "500ms",
		"USHER_AUDIT_CHECKPOINT_ORIGIN":             "usher example",
	}), Overrides{})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, key := range []string{
		"server.addr", "server.public_url", "log.level", "database.url", "identity.audiences", "identity.required_scopes",
		"broker.token_lifetime", "broker.key_encryption_key", "broker.previous_key_encryption_keys: must each be 32 bytes", "server.max_body_bytes (from USHER_SERVER_MAX_BODY_BYTES)",
		"server.read_timeout: must be between 1s and 10m", "server.shutdown_delay: must not be negative",
		"web.revocation_ttl", "events.max_streams_per_user",
		"audit.checkpoint_interval: must be between 1s and 24h", "audit.checkpoint_origin",
	} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s:\n%v", key, err)
		}
	}
}

// With a real issuer the API must name a delegated scope, or it would take
// app-only tokens; the development provider issues its own and gets it by
// default.
func TestIssuerRequiresADelegatedScope(t *testing.T) {
	issuer := map[string]string{"USHER_IDENTITY_ISSUER": "https://login.example.com/t/v2.0", "USHER_IDENTITY_AUDIENCES": "api://usher"}
	_, err := Load("", env(issuer), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "identity.required_scopes: name the API's delegated scope") {
		t.Fatalf("issuer without a required scope: err = %v", err)
	}
	issuer["USHER_IDENTITY_REQUIRED_SCOPES"] = "access_as_user"
	c, err := Load("", env(issuer), Overrides{})
	if err != nil || len(c.Identity.RequiredScopes) != 1 || c.Identity.RequiredScopes[0] != "access_as_user" {
		t.Fatalf("issuer with a required scope: %v %q", err, c.Identity.RequiredScopes)
	}
	p := writeFile(t, "identity:\n  issuer: https://login.example.com/t/v2.0\n  audiences: [api://usher]\n  required_scopes: [\"\", \"a b\"]\n")
	if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "identity.required_scopes: must not contain an empty scope") {
		t.Fatalf("blank scopes: err = %v", err)
	}
	c, err = Load("", env(nil), Overrides{})
	if err != nil || len(c.Identity.RequiredScopes) != 1 || c.Identity.RequiredScopes[0] != DevScope {
		t.Fatalf("development provider: %v %q, want [%s]", err, c.Identity.RequiredScopes, DevScope)
	}
}

// An Entra scope's full name (what web.scopes requests) in
// required_scopes is refused with the name the access token's scp
// carries; another issuer's URI scopes are its own.
func TestRequiredScopeByItsName(t *testing.T) {
	for _, tc := range []struct{ issuer, scope, want string }{
		{"https://login.microsoftonline.com/t/v2.0", "api://usher/access_as_user", `want "access_as_user"`},
		{"https://login.microsoftonline.com/t/v2.0", "https://contoso.example/usher/access_as_user", `want "access_as_user"`},
		{"https://login.microsoftonline.com/{tenantid}/v2.0", "api://usher/access_as_user", `want "access_as_user"`},
		{"http://127.0.0.1:9999/t/v2.0", "API://usher/access_as_user", `want "access_as_user"`},
		{"https://login.microsoftonline.com/t/v2.0", "api://usher/", "want its name"},
		{"https://login.microsoftonline.com/t/v2.0", "access_as_user", ""},
		{"https://cognito-idp.eu-west-1.amazonaws.com/pool", "https://api.example.com/read", ""},
	} {
		_, err := Load("", env(map[string]string{"USHER_IDENTITY_ISSUER": tc.issuer, "USHER_IDENTITY_AUDIENCES": "api://usher",
			"USHER_IDENTITY_REQUIRED_SCOPES": tc.scope, "USHER_IDENTITY_TENANTS": "t"}), Overrides{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s at %s: %v", tc.scope, tc.issuer, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "identity.required_scopes: ") ||
			!strings.Contains(err.Error(), "scp carries the scope's name without the App ID URI: "+tc.want)):
			t.Errorf("%s at %s: err = %v, want %s", tc.scope, tc.issuer, err, tc.want)
		}
	}
}

// A multi-tenant issuer is reported with the other problems, by key.
func TestMultiTenantIssuerRequiresTenants(t *testing.T) {
	issuer := map[string]string{"USHER_IDENTITY_ISSUER": "https://login.microsoftonline.com/{tenantid}/v2.0",
		"USHER_IDENTITY_AUDIENCES": "api://usher", "USHER_IDENTITY_REQUIRED_SCOPES": "access_as_user", "USHER_LOG_LEVEL": "loud"}
	_, err := Load("", env(issuer), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "identity.tenants: list the tenant ids") || !strings.Contains(err.Error(), "log.level") {
		t.Fatalf("multi-tenant issuer without tenants: err = %v, want identity.tenants beside log.level", err)
	}
	issuer["USHER_LOG_LEVEL"] = "info"
	issuer["USHER_IDENTITY_ISSUER"] = "https://login.microsoftonline.com/{tenantid}/{tenantid}/v2.0"
	if _, err := Load("", env(issuer), Overrides{}); err == nil || !strings.Contains(err.Error(), "identity.issuer: {tenantid} may appear only once") {
		t.Fatalf("two placeholders: err = %v", err)
	}
	issuer["USHER_IDENTITY_ISSUER"] = "https://login.microsoftonline.com/{tenantid}/v2.0"
	issuer["USHER_IDENTITY_TENANTS"] = "t1"
	if _, err := Load("", env(issuer), Overrides{}); err != nil {
		t.Fatalf("multi-tenant issuer with tenants: %v", err)
	}
	p := writeFile(t, "identity:\n  tenants: [\" \"]\n")
	if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "identity.tenants: must not contain an empty tenant id") {
		t.Fatalf("blank tenant: err = %v", err)
	}
}

// The authorization server is on by default, registration and Client ID
// Metadata Documents included, with the lifetimes the issue names; its keys
// come from the file like any other, and bad lifetimes are reported by key.
func TestOAuth(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	want := OAuth{Registration: true, RegistrationsPerHour: 20, RefreshIdle: Duration(336 * time.Hour),
		RefreshAbsolute: Duration(2160 * time.Hour), RefreshReuseInterval: Duration(30 * time.Second), ClientMetadataDocuments: true}
	if !reflect.DeepEqual(c.OAuth, want) {
		t.Errorf("defaults = %+v, want %+v", c.OAuth, want)
	}
	p := writeFile(t, "oauth:\n  registration: false\n  refresh_idle: 24h\n  refresh_absolute: 720h\n")
	if c, err = Load(p, env(nil), Overrides{}); err != nil {
		t.Fatal(err)
	}
	if c.OAuth.Registration || !c.OAuth.ClientMetadataDocuments || c.OAuth.RefreshIdle.Std() != 24*time.Hour ||
		c.OAuth.RefreshAbsolute.Std() != 720*time.Hour || c.OAuth.RegistrationsPerHour != 20 {
		t.Errorf("from the file: %+v", c.OAuth)
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no registrations": {map[string]string{"USHER_OAUTH_REGISTRATIONS_PER_HOUR": "0"}, "oauth.registrations_per_hour: must be between 1 and 10000"},
		"a flood":          {map[string]string{"USHER_OAUTH_REGISTRATIONS_PER_HOUR": "10001"}, "oauth.registrations_per_hour"},
		"short absolute":   {map[string]string{"USHER_OAUTH_REFRESH_ABSOLUTE": "30m", "USHER_OAUTH_REFRESH_IDLE": "10m"}, "oauth.refresh_absolute: must be between 1h and 8760h"},
		"long absolute":    {map[string]string{"USHER_OAUTH_REFRESH_ABSOLUTE": "8761h"}, "oauth.refresh_absolute"},
		"idle past absolute": {map[string]string{"USHER_OAUTH_REFRESH_IDLE": "100h", "USHER_OAUTH_REFRESH_ABSOLUTE": "99h"},
			"oauth.refresh_idle: must be at least 5m and at most oauth.refresh_absolute"},
		"short idle": {map[string]string{"USHER_OAUTH_REFRESH_IDLE": "1m"}, "oauth.refresh_idle"},
		"negative reuse interval": {map[string]string{"USHER_OAUTH_REFRESH_REUSE_INTERVAL": "-1s"},
			"oauth.refresh_reuse_interval: must be between 0s and 5m"},
		"long reuse interval": {map[string]string{"USHER_OAUTH_REFRESH_REUSE_INTERVAL": "301s"}, "oauth.refresh_reuse_interval"},
		"not a bool":          {map[string]string{"USHER_OAUTH_REGISTRATION": "sometimes"}, "oauth.registration (from USHER_OAUTH_REGISTRATION): want true or false"},
		"not a number":        {map[string]string{"USHER_OAUTH_REGISTRATIONS_PER_HOUR": "many"}, "oauth.registrations_per_hour (from USHER_OAUTH_REGISTRATIONS_PER_HOUR)"},
	} {
		if _, err := Load("", env(tc.env), Overrides{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, tc.want)
		}
	}
}

// Token exchange is off by default; the clients that may exchange are
// listed by client_id, and a blank one is refused by key.
func TestOAuthTokenExchangeClients(t *testing.T) {
	p := writeFile(t, "oauth:\n  token_exchange_clients: [usher-dcr-a, \"https://app.example.com/client.json\"]\n")
	c, err := Load(p, env(nil), Overrides{})
	if err != nil || strings.Join(c.OAuth.TokenExchangeClients, " ") != "usher-dcr-a https://app.example.com/client.json" {
		t.Fatalf("from the file: %v %q", err, c.OAuth.TokenExchangeClients)
	}
	for _, bad := range []string{`[""]`, `[" usher-dcr-a"]`} {
		p := writeFile(t, "oauth:\n  token_exchange_clients: "+bad+"\n")
		if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "oauth.token_exchange_clients: must not contain an empty client_id") {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
}

// TestTrustedProxies checks that no proxy is trusted by default, and that
// a prefix that is not one, one that trusts everybody, or a header Usher
// does not read is refused by key.
func TestTrustedProxies(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Server.TrustedProxies) != 0 || c.Server.ForwardedHeader != "X-Forwarded-For" {
		t.Errorf("defaults = %q %q, want none and X-Forwarded-For", c.Server.TrustedProxies, c.Server.ForwardedHeader)
	}
	p := writeFile(t, "server:\n  trusted_proxies: [10.0.0.0/8, \"fd00::/8\"]\n")
	if c, err = Load(p, env(nil), Overrides{}); err != nil || len(c.Server.TrustedProxies) != 2 {
		t.Errorf("from the file: %q, %v", c.Server.TrustedProxies, err)
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"not a prefix": {map[string]string{"USHER_SERVER_TRUSTED_PROXIES": "proxy.internal"}, "server.trusted_proxies"},
		"everybody":    {map[string]string{"USHER_SERVER_TRUSTED_PROXIES": "0.0.0.0/0"}, "server.trusted_proxies"},
		"other header": {map[string]string{"USHER_SERVER_FORWARDED_HEADER": "X-Real-IP"}, "server.forwarded_header: want X-Forwarded-For or Forwarded"},
		"empty header": {map[string]string{"USHER_SERVER_TRUSTED_PROXIES": "10.0.0.1", "USHER_SERVER_FORWARDED_HEADER": " "}, "server.forwarded_header"},
	} {
		if _, err := Load("", env(tc.env), Overrides{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, tc.want)
		}
	}
}

// TestMetricsAddr checks that server.metrics_addr is off by default,
// accepted on any host:port (Prometheus scrapes it from elsewhere), and
// refused when it is no address or the address of another listener.
func TestMetricsAddr(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.Server.MetricsAddr != "" {
		t.Fatalf("default = %q, %v; want none", c.Server.MetricsAddr, err)
	}
	for _, addr := range []string{"127.0.0.1:9090", ":9090", "0.0.0.0:9090", "[::]:0"} {
		if c, err := Load("", env(map[string]string{"USHER_SERVER_METRICS_ADDR": addr}), Overrides{}); err != nil || c.Server.MetricsAddr != addr {
			t.Errorf("%s: %q, %v", addr, c.Server.MetricsAddr, err)
		}
	}
	// Port 0 is a port of its own for each listener.
	if _, err := Load("", env(map[string]string{"USHER_SERVER_METRICS_ADDR": "127.0.0.1:0"}), Overrides{Addr: "127.0.0.1:0"}); err != nil {
		t.Errorf("port 0 on both listeners: %v", err)
	}
	for name, vars := range map[string]map[string]string{
		"no port":      {"USHER_SERVER_METRICS_ADDR": "127.0.0.1"},
		"empty port":   {"USHER_SERVER_METRICS_ADDR": "127.0.0.1:"},
		"server.addr":  {"USHER_SERVER_METRICS_ADDR": "127.0.0.1:8080"},
		"debug_addr":   {"USHER_SERVER_METRICS_ADDR": "127.0.0.1:6060", "USHER_SERVER_DEBUG_ADDR": "127.0.0.1:6060"},
		"not hostport": {"USHER_SERVER_METRICS_ADDR": "http://127.0.0.1:9090/metrics"},
	} {
		if _, err := Load("", env(vars), Overrides{}); err == nil || !strings.Contains(err.Error(), "server.metrics_addr") {
			t.Errorf("%s: err = %v, want server.metrics_addr refused", name, err)
		}
	}
}

// TestUpstreamCheckInterval checks mcp.upstream_check_interval's default
// and its bounds.
func TestUpstreamCheckInterval(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.MCP.UpstreamCheckInterval.Std() != 30*time.Second {
		t.Fatalf("default = %s, %v; want 30s", c.MCP.UpstreamCheckInterval.Std(), err)
	}
	for _, v := range []string{"1s", "45s", "1h"} {
		if _, err := Load("", env(map[string]string{"USHER_MCP_UPSTREAM_CHECK_INTERVAL": v}), Overrides{}); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"0s", "-5s", "999ms", "2h", "soon"} {
		if _, err := Load("", env(map[string]string{"USHER_MCP_UPSTREAM_CHECK_INTERVAL": v}), Overrides{}); err == nil || !strings.Contains(err.Error(), "mcp.upstream_check_interval") {
			t.Errorf("%s: err = %v, want mcp.upstream_check_interval refused", v, err)
		}
	}
}

// TestDebugAddrOnlyOnLoopback checks that server.debug_addr, which serves
// profiles without authentication, is off by default, accepted on a
// loopback address and refused on any other.
func TestDebugAddrOnlyOnLoopback(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.Server.DebugAddr != "" {
		t.Fatalf("default = %q, %v; want none", c.Server.DebugAddr, err)
	}
	for _, addr := range []string{"127.0.0.1:6060", "[::1]:6060", "localhost:0", "127.0.0.2:6060"} {
		if _, err := Load("", env(map[string]string{"USHER_SERVER_DEBUG_ADDR": addr}), Overrides{}); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{":6060", "0.0.0.0:6060", "[::]:6060", "192.0.2.7:6060", "debug.example.com:6060", "127.0.0.1"} {
		if _, err := Load("", env(map[string]string{"USHER_SERVER_DEBUG_ADDR": addr}), Overrides{}); err == nil || !strings.Contains(err.Error(), "server.debug_addr") {
			t.Errorf("%s: err = %v, want server.debug_addr refused", addr, err)
		}
	}
}

func TestUpstreamsOnlyInTheFile(t *testing.T) {
	_, err := Load("", env(map[string]string{"USHER_MCP_UPSTREAMS": "x"}), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "mcp.upstreams") {
		t.Fatalf("err = %v", err)
	}
	p := writeFile(t, `
mcp:
  upstreams:
    - name: files
      command: /usr/bin/files-mcp
    - name: ""
      url: https://a.example.com/mcp
      command: x
`)
	_, err = Load(p, env(nil), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "mcp.upstreams[1].name") || !strings.Contains(err.Error(), "exactly one of url and command") {
		t.Fatalf("err = %v", err)
	}
}

func TestDemoToolsDefaultFollowsIdentity(t *testing.T) {
	c, _ := Load("", env(nil), Overrides{})
	if !c.DemoTools() {
		t.Error("the embedded default offers the demo tools")
	}
	c, _ = Load("", env(map[string]string{"USHER_IDENTITY_ISSUER": "https://i.example.com", "USHER_IDENTITY_AUDIENCES": "a", "USHER_IDENTITY_REQUIRED_SCOPES": "s"}), Overrides{})
	if c.DemoTools() {
		t.Error("a configured issuer does not get the demo tools by default")
	}
}

func TestUnknownFileKeyIsAnError(t *testing.T) {
	p := writeFile(t, "server:\n  adress: 127.0.0.1:1\n")
	if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "adress") {
		t.Fatalf("want an error naming the unknown key, got %v", err)
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml"), env(nil), Overrides{}); err == nil {
		t.Fatal("want an error")
	}
}

func TestEmptyFileMeansDefaults(t *testing.T) {
	c, err := Load(writeFile(t, ""), env(nil), Overrides{})
	if err != nil || c.Server.Addr != "127.0.0.1:8080" {
		t.Fatalf("c=%+v err=%v", c.Server, err)
	}
}

func TestPublicURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://usher.example.com", true},
		{"http://127.0.0.1:8080", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://usher.example.com", false},
		{"ftp://usher.example.com", false},
		{"https://usher.example.com/?x=1", false},
		{"/relative", false},
	} {
		if err := checkPublicURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("checkPublicURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

// TestPublicURLWithAPath: a public URL with a path is refused at start,
// with the reason; its trailing slash alone is no path.
func TestPublicURLWithAPath(t *testing.T) {
	for _, u := range []string{"https://example.com/usher", "https://example.com/usher/", "http://127.0.0.1:8080/a/b", "https://example.com/%2F"} {
		_, err := Load("", env(map[string]string{"USHER_SERVER_PUBLIC_URL": u}), Overrides{})
		if err == nil || !strings.Contains(err.Error(), "server.public_url") || !strings.Contains(err.Error(), "not under a path") {
			t.Errorf("public URL %q: %v; want it refused, saying why", u, err)
		}
	}
	for _, u := range []string{"https://usher.example.com/", "http://127.0.0.1:8080"} {
		if _, err := Load("", env(map[string]string{"USHER_SERVER_PUBLIC_URL": u}), Overrides{}); err != nil {
			t.Errorf("public URL %q: %v", u, err)
		}
	}
}

// A trailing slash on the public URL is dropped, so that the broker's and
// the authorization server's issuer is one string.
func TestPublicURLTrailingSlash(t *testing.T) {
	c, err := Load("", env(map[string]string{"USHER_SERVER_PUBLIC_URL": "https://usher.example.com/"}), Overrides{})
	if err != nil || c.Server.PublicURL != "https://usher.example.com" {
		t.Fatalf("public url = %q, %v", c.Server.PublicURL, err)
	}
}

// TestREADMEDocumentsEveryKey keeps the configuration table complete.
func TestREADMEDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		row := "| `" + k.Name + "` | `" + k.Env + "` |"
		if !strings.Contains(string(b), row) {
			t.Errorf("README has no configuration row for %s (%s)", k.Name, k.Env)
		}
	}
}

// model.context_tokens is unset by default (the runtime's 80000), and a
// limit no model has is refused by key.
func TestModelContextTokens(t *testing.T) {
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.Model.ContextTokens != 0 {
		t.Fatalf("default: %v, context_tokens %d; want 0", err, c.Model.ContextTokens)
	}
	for _, ok := range []string{"1000", "128000", "10000000"} {
		if c, err := Load("", env(map[string]string{"USHER_MODEL_CONTEXT_TOKENS": ok}), Overrides{}); err != nil || strconv.Itoa(c.Model.ContextTokens) != ok {
			t.Errorf("context_tokens %s: %v, got %d", ok, err, c.Model.ContextTokens)
		}
	}
	for _, bad := range []string{"-1", "999", "10000001"} {
		_, err := Load("", env(map[string]string{"USHER_MODEL_CONTEXT_TOKENS": bad}), Overrides{})
		if err == nil || !strings.Contains(err.Error(), "model.context_tokens: must be 0 (the default, 80000) or between 1000 and 10000000, got "+bad) {
			t.Errorf("context_tokens %s: err = %v", bad, err)
		}
	}
}

// model.models offers a choice of models; without it, model.name alone
// (the configuration of one model keeps working). model.name defaults to
// the first, and must be one of them.
func TestModelModels(t *testing.T) {
	openai := map[string]string{"USHER_MODEL_PROVIDER": "openai", "USHER_MODEL_BASE_URL": "http://127.0.0.1:1/v1"}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range openai {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return env(m)
	}
	c, err := Load("", with("USHER_MODEL_NAME", "gpt-4.1-mini"), Overrides{})
	if err != nil || c.Model.Name != "gpt-4.1-mini" || len(c.Model.Models) != 0 {
		t.Fatalf("one model: %v, %q %v", err, c.Model.Name, c.Model.Models)
	}
	c, err = Load("", with("USHER_MODEL_MODELS", "small,large"), Overrides{})
	if err != nil || c.Model.Name != "small" || strings.Join(c.Model.Models, " ") != "small large" {
		t.Fatalf("two models: %v, %q %v", err, c.Model.Name, c.Model.Models)
	}
	c, err = Load(writeFile(t, "model:\n  provider: openai\n  base_url: http://127.0.0.1:1/v1\n  name: large\n  models: [small, large]\n"), env(nil), Overrides{})
	if err != nil || c.Model.Name != "large" || len(c.Model.Models) != 2 {
		t.Fatalf("from the file: %v, %q %v", err, c.Model.Name, c.Model.Models)
	}
	for _, tt := range []struct {
		env  func(string) string
		want string
	}{
		{with("USHER_MODEL_MODELS", "small,large", "USHER_MODEL_NAME", "huge"), `model.name: must be one of model.models (small, large), got "huge"`},
		{with("USHER_MODEL_MODELS", "small,small"), `model.models: offers "small" twice`},
		{with("USHER_MODEL_MODELS", strings.Repeat("m,", MaxModels)+"m2"), fmt.Sprintf("model.models: offers %d models, at most %d", MaxModels+1, MaxModels)},
	} {
		if _, err := Load("", tt.env, Overrides{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	for _, list := range []string{`[small, " large"]`, `[small, ""]`} {
		_, err := Load(writeFile(t, "model:\n  models: "+list+"\n"), env(nil), Overrides{})
		if err == nil || !strings.Contains(err.Error(), "model.models: model #2") {
			t.Errorf("models %s: err = %v", list, err)
		}
	}
}

// The reviewers' groups come from the file or the environment, and an
// empty, padded, comma-holding or repeated group is reported by key.
func TestReviewGroups(t *testing.T) {
	c, err := Load("", env(map[string]string{"USHER_REVIEW_GROUPS": "security"}), Overrides{})
	if err != nil || !reflect.DeepEqual(c.Review.Groups, []string{"security"}) {
		t.Fatalf("USHER_REVIEW_GROUPS=security: %v %q", err, c.Review.Groups)
	}
	if c, err := Load("", env(nil), Overrides{}); err != nil || len(c.Review.Groups) != 0 {
		t.Fatalf("default: %v %q, want no reviewers", err, c.Review.Groups)
	}
	for _, groups := range []string{`[""]`, `[" security"]`, `["a,b"]`, `[security, security]`} {
		p := writeFile(t, "review:\n  groups: "+groups+"\n")
		if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "review.groups: ") {
			t.Errorf("groups %s: err = %v, want a review.groups error", groups, err)
		}
	}
}

// The admins' groups come from the file or the environment and are
// checked as the reviewers' are; the heartbeat interval has bounds.
func TestAdminSection(t *testing.T) {
	c, err := Load("", env(map[string]string{"USHER_ADMIN_GROUPS": "operators, sre"}), Overrides{})
	if err != nil || !reflect.DeepEqual(c.Admin.Groups, []string{"operators", "sre"}) {
		t.Fatalf("USHER_ADMIN_GROUPS: %v %q", err, c.Admin.Groups)
	}
	if c, err := Load("", env(nil), Overrides{}); err != nil || len(c.Admin.Groups) != 0 || c.Admin.HeartbeatInterval.Std() != 10*time.Second {
		t.Fatalf("default: %v %q %v, want no admins and a 10s heartbeat", err, c.Admin.Groups, c.Admin.HeartbeatInterval)
	}
	for _, groups := range []string{`[""]`, `[" ops"]`, `["a,b"]`, `[ops, ops]`} {
		p := writeFile(t, "admin:\n  groups: "+groups+"\n")
		if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), "admin.groups: ") {
			t.Errorf("groups %s: err = %v, want an admin.groups error", groups, err)
		}
	}
	for _, d := range []string{"50ms", "11m"} {
		if _, err := Load("", env(map[string]string{"USHER_ADMIN_HEARTBEAT_INTERVAL": d}), Overrides{}); err == nil ||
			!strings.Contains(err.Error(), "admin.heartbeat_interval: ") {
			t.Errorf("heartbeat interval %s: err = %v, want an admin.heartbeat_interval error", d, err)
		}
	}
}

// TestAssistantMaxSlices: a run's budget of slices is 0 (the default,
// 250) or a count up to 1048576; anything else names the key.
func TestAssistantMaxSlices(t *testing.T) {
	c, err := Load("", env(map[string]string{"USHER_ASSISTANT_MAX_SLICES": "300"}), Overrides{})
	if err != nil || c.Assistant.MaxSlices != 300 {
		t.Fatalf("max_slices 300 = %d, %v", c.Assistant.MaxSlices, err)
	}
	for _, bad := range []string{"-1", "2000000", "many"} {
		_, err := Load("", env(map[string]string{"USHER_ASSISTANT_MAX_SLICES": bad}), Overrides{})
		if err == nil || !strings.Contains(err.Error(), "assistant.max_slices") {
			t.Errorf("max_slices %q = %v, want an error naming assistant.max_slices", bad, err)
		}
	}
}

// TestAttachmentLimits: the attachment limits are bounded, and the quota
// holds at least one attachment of the largest size.
func TestAttachmentLimits(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"USHER_ASSISTANT_ATTACHMENTS_MAX_BYTES": "-1"}, "assistant.attachments_max_bytes"},
		{map[string]string{"USHER_ASSISTANT_ATTACHMENTS_MAX_BYTES": "300000000"}, "assistant.attachments_max_bytes"},
		{map[string]string{"USHER_ASSISTANT_ATTACHMENTS_MAX_BYTES": "2000", "USHER_ASSISTANT_ATTACHMENTS_QUOTA_BYTES": "1000"}, "assistant.attachments_quota_bytes"},
		{map[string]string{"USHER_MODEL_IMAGES": "maybe"}, "model.images"},
	} {
		if _, err := Load("", env(tc.env), Overrides{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.Assistant.AttachmentsMaxBytes != 0 || c.Assistant.AttachmentsQuotaBytes != 0 || c.Model.Images {
		t.Errorf("defaults: %v, %d %d %v", err, c.Assistant.AttachmentsMaxBytes, c.Assistant.AttachmentsQuotaBytes, c.Model.Images)
	}
}

// The daily token limits: none by default; a negative limit, a group
// without a name or a pair that is not one is refused by its key; the
// file's map is read as written.
func TestDeleteInactiveAfter(t *testing.T) {
	for _, v := range []string{"-24h", "23h", "1m"} {
		if _, err := Load("", env(map[string]string{"USHER_ASSISTANT_DELETE_INACTIVE_AFTER": v}), Overrides{}); err == nil || !strings.Contains(err.Error(), "assistant.delete_inactive_after: must be 0") {
			t.Errorf("delete_inactive_after %s: %v, want refused", v, err)
		}
	}
	for v, want := range map[string]time.Duration{"": 0, "24h": 24 * time.Hour, "2160h": 90 * 24 * time.Hour} {
		c, err := Load("", env(map[string]string{"USHER_ASSISTANT_DELETE_INACTIVE_AFTER": v}), Overrides{})
		if err != nil || c.Assistant.DeleteInactiveAfter.Std() != want {
			t.Errorf("delete_inactive_after %q: %v, %v; want %s", v, c.Assistant.DeleteInactiveAfter.Std(), err, want)
		}
	}
}

func TestPurgeDeletedAfter(t *testing.T) {
	for _, v := range []string{"-1h", "30m", "1s"} {
		if _, err := Load("", env(map[string]string{"USHER_ASSISTANT_PURGE_DELETED_AFTER": v}), Overrides{}); err == nil || !strings.Contains(err.Error(), "assistant.purge_deleted_after: must be 0") {
			t.Errorf("purge_deleted_after %s: %v, want refused", v, err)
		}
	}
	for v, want := range map[string]time.Duration{"": 0, "0s": 0, "1h": time.Hour, "720h": 30 * 24 * time.Hour} {
		c, err := Load("", env(map[string]string{"USHER_ASSISTANT_PURGE_DELETED_AFTER": v}), Overrides{})
		if err != nil || c.Assistant.PurgeDeletedAfter.Std() != want {
			t.Errorf("purge_deleted_after %q: %v, %v; want %s", v, c.Assistant.PurgeDeletedAfter.Std(), err, want)
		}
	}
}

func TestDailyTokens(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS": "-1"}, "assistant.daily_tokens: must be 0"},
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS": "many"}, "assistant.daily_tokens (from USHER_ASSISTANT_DAILY_TOKENS)"},
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS_BY_GROUP": "research=-5"}, "assistant.daily_tokens_by_group: must map groups"},
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS_BY_GROUP": "research"}, "want name=integer pairs"},
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS_BY_GROUP": "=5"}, "want name=integer pairs"},
		{map[string]string{"USHER_ASSISTANT_DAILY_TOKENS_BY_GROUP": "research=lots"}, "want name=integer pairs"},
	} {
		if _, err := Load("", env(tc.env), Overrides{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
	c, err := Load("", env(nil), Overrides{})
	if err != nil || c.Assistant.DailyTokens != 0 || c.Assistant.DailyTokensByGroup != nil {
		t.Errorf("defaults: %v, %d %v", err, c.Assistant.DailyTokens, c.Assistant.DailyTokensByGroup)
	}
	f := filepath.Join(t.TempDir(), "usher.yaml")
	if err := os.WriteFile(f, []byte("assistant:\n  daily_tokens: 100000\n  daily_tokens_by_group:\n    research: 2000000\n    \"app role\": 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(f, env(nil), Overrides{})
	if err != nil || c.Assistant.DailyTokens != 100000 || !maps.Equal(c.Assistant.DailyTokensByGroup, map[string]int64{"research": 2000000, "app role": 0}) {
		t.Errorf("from the file: %v, %d %v", err, c.Assistant.DailyTokens, c.Assistant.DailyTokensByGroup)
	}
}

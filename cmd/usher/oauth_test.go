package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/broker/oauth/oauthtest"
	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/store"
)

// TestMountOAuth checks which requests mountOAuth sends to the
// authorization server's handler, and with which path: everything under
// /oauth/ (after an issuer's path, stripped) and the well-known documents
// at their RFC 8414 places — and nothing of the rest of Usher's routes.
func TestMountOAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		issuer  string
		reached map[string]string // request path → the path the handler sees
		missed  []string
	}{{
		issuer: "https://usher.example.com",
		reached: map[string]string{
			"/oauth/authorize": "/oauth/authorize", "/oauth/authorize/continue": "/oauth/authorize/continue",
			"/oauth/token": "/oauth/token", "/oauth/register": "/oauth/register", "/oauth/revoke": "/oauth/revoke",
			"/oauth/nothing-here":                     "/oauth/nothing-here",
			"/.well-known/oauth-authorization-server": "/.well-known/oauth-authorization-server",
			"/.well-known/openid-configuration":       "/.well-known/openid-configuration",
		},
		missed: []string{"/", "/authorize", "/token", "/register", "/api/me", "/auth/login", "/mcp",
			"/.well-known/oauth-protected-resource", "/.well-known/jwks.json"},
	}, {
		issuer: "https://example.com/usher",
		reached: map[string]string{
			"/usher/oauth/authorize": "/oauth/authorize", "/usher/oauth/token": "/oauth/token",
			"/.well-known/oauth-authorization-server/usher": "/.well-known/oauth-authorization-server/usher",
			"/.well-known/openid-configuration/usher":       "/.well-known/openid-configuration/usher",
			"/usher/.well-known/openid-configuration":       "/usher/.well-known/openid-configuration",
		},
		missed: []string{"/oauth/token", "/.well-known/oauth-authorization-server", "/usher/mcp"},
	}} {
		t.Run(tc.issuer, func(t *testing.T) {
			mux := http.NewServeMux()
			var seen string
			if err := mountOAuth(mux, tc.issuer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = r.URL.Path
			})); err != nil {
				t.Fatal(err)
			}
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { seen = "the rest of Usher" })
			for path, want := range tc.reached {
				seen = ""
				mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
				if seen != want {
					t.Errorf("%s: the handler saw %q, want %q", path, seen, want)
				}
			}
			for _, path := range tc.missed {
				seen = ""
				mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
				if seen != "the rest of Usher" {
					t.Errorf("%s went to the authorization server (%q)", path, seen)
				}
			}
		})
	}
	if err := mountOAuth(http.NewServeMux(), "http://usher.example.com/", http.NotFoundHandler()); err == nil {
		t.Error("an issuer the metadata refuses was mounted")
	}
}

// TestMountOAuthMetadata serves the real metadata handler through the
// mount: an MCP client's discovery finds the document, and the OpenID path
// it also tries answers 404 in OAuth error JSON.
func TestMountOAuthMetadata(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	m, err := oauth.NewMetadata(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := mountOAuth(mux, srv.URL, oauth.MetadataHandler(m)); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, srv.URL+"/.well-known/oauth-authorization-server", "")
	var got oauth.Metadata
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || got.Issuer != srv.URL || got.TokenEndpoint != srv.URL+"/oauth/token" {
		t.Fatalf("metadata: %d %s", code, body)
	}
	code, body = get(t, srv.URL+"/.well-known/openid-configuration", "")
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); code != http.StatusNotFound || err != nil || e.Error == "" {
		t.Errorf("openid-configuration: %d %s", code, body)
	}
}

// TestClientFetcher checks oauth.client_metadata_documents and the
// loopback rule: a document served over plain http on loopback is fetched
// only when Usher's own public URL is on loopback.
func TestClientFetcher(t *testing.T) {
	t.Parallel()
	doc := httptest.NewServer(nil)
	defer doc.Close()
	clientID := doc.URL + "/client.json"
	doc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{ //nolint:errcheck // a test server
			"client_id": clientID, "client_name": "A local app", "redirect_uris": []string{"http://127.0.0.1:9/cb"},
			"token_endpoint_auth_method": "none",
		})
	})
	cfg := config.Default()
	in := &installation{cfg: cfg}
	f, err := in.clientFetcher("http://127.0.0.1:8080")
	if err != nil || f == nil {
		t.Fatalf("loopback public URL: %v %v", f, err)
	}
	if d, err := f.Fetch(t.Context(), clientID); err != nil || d.ClientName != "A local app" {
		t.Errorf("loopback public URL: fetch %v %v", d, err)
	}
	if f, err = in.clientFetcher("https://usher.example.com"); err != nil || f == nil {
		t.Fatalf("public URL: %v %v", f, err)
	}
	var refused *clientmeta.Error
	if _, err := f.Fetch(t.Context(), clientID); !errors.As(err, &refused) {
		t.Errorf("a public Usher fetched a loopback http document: %v", err)
	}
	in.cfg.OAuth.ClientMetadataDocuments = false
	if f, err := in.clientFetcher("https://usher.example.com"); f != nil || err != nil {
		t.Errorf("documents off: %v %v", f, err)
	}
}

// documentClient is a client id of a metadata document longer than the
// 120 characters a line of a list may cut a name to.
const documentClient = "https://app.example.com/oauth/tenants/7f3c2a9e-0d41-4b8e-9a55-1c2d3e4f5a6b/applications/assistant-integration/clients/production/client.json"

// TestClientsCommands runs `usher clients list|revoke` on an installation
// with a registered client whose name tries to write to the terminal, and
// a metadata document's client.
func TestClientsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clients := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(append([]string{"clients"}, args...), "--data-dir", dir), getenv(nil), &out, &errOut)
		return out.String(), err
	}
	if err := run(context.Background(), []string{"migrate", "--data-dir", dir}, getenv(nil), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if out, err := clients("list"); err != nil || !strings.Contains(out, "no OAuth clients") {
		t.Fatalf("empty list: %v %q", err, out)
	}

	st, err := store.Open(t.Context(), filepath.Join(dir, "usher.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, c := range []store.OAuthClient{{
		ID: "dcr-1", Kind: store.OAuthClientRegistered, Name: "Evil\x1b[2J\u202eppa", AuthMethod: "none",
		RedirectURIs: []string{"http://127.0.0.1/callback", "http://127.0.0.1:3000/cb"}, GrantTypes: []string{"authorization_code"},
		Metadata: json.RawMessage(`{}`), RegisteredBy: "192.0.2.7", CreatedAt: now, UpdatedAt: now,
	}, {
		ID: documentClient, Kind: store.OAuthClientMetadataDocument, Name: "Example App", AuthMethod: "none",
		RedirectURIs: []string{"https://app.example.com/cb"}, Metadata: json.RawMessage(`{}`), CreatedAt: now.Add(time.Second), UpdatedAt: now.Add(time.Second),
	}} {
		if _, err := st.CreateOAuthClient(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	out, err := clients("list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CLIENT ID", "dcr-1", "registered", "from 192.0.2.7", "http://127.0.0.1", "never", "active",
		documentClient, "metadata_document", "Example App", "https://app.example.com"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\u202e") || !strings.Contains(out, "Evil\ufffd[2J\ufffdppa") {
		t.Errorf("a client's name reached the terminal as is:\n%q", out)
	}
	if strings.Index(out, "dcr-1") > strings.Index(out, "app.example.com/oauth") {
		t.Errorf("not oldest first:\n%s", out)
	}
	// The document's id, longer than a line, is listed whole: the id
	// copied from the list revokes it.
	if listed := strings.Fields(lineOf(out, "Example App"))[0]; listed != documentClient {
		t.Errorf("list names the document's client %q, want its whole id", listed)
	} else if out, err := clients("revoke", listed); err != nil || !strings.Contains(out, "revoked "+documentClient) {
		t.Errorf("revoke of the listed id: %v %q", err, out)
	}

	if out, err := clients("revoke", "dcr-1"); err != nil || !strings.Contains(out, "revoked dcr-1") {
		t.Fatalf("revoke: %v %q", err, out)
	}
	if out, err := clients("revoke", "dcr-1"); err != nil || !strings.Contains(out, "already revoked") {
		t.Fatalf("revoke again: %v %q", err, out)
	}
	if _, err := clients("revoke", "no-such-client"); err == nil || !strings.Contains(err.Error(), `no OAuth client "no-such-client"`) {
		t.Errorf("revoke of an unknown client: %v", err)
	}
	if out, _ := clients("list"); !strings.Contains(lineOf(out, "dcr-1"), "revoked ") || !strings.Contains(lineOf(out, "Example App"), "revoked ") {
		t.Errorf("after revoke:\n%s", out)
	}

	var export bytes.Buffer
	if err := run(context.Background(), []string{"audit", "export", "--data-dir", dir}, getenv(nil), &export, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(export.String(), `"oauth_client_revoked"`); n != 3 || !strings.Contains(export.String(), `"dcr-1"`) || !strings.Contains(export.String(), `"`+documentClient+`"`) {
		t.Errorf("audit records of the revocations: %d\n%s", n, export.String())
	}
	if err := run(context.Background(), []string{"audit", "verify", "--data-dir", dir}, getenv(nil), io.Discard, io.Discard); err != nil {
		t.Errorf("audit verify: %v", err)
	}

	for _, args := range [][]string{{}, {"frobnicate"}, {"revoke"}, {"revoke", "a", "b"}, {"list", "extra"}} {
		if _, err := clients(args...); err == nil {
			t.Errorf("usher clients %v: want a usage error", args)
		}
	}
}

// TestOAuthDiscoveryNamesPublicURL checks that the MCP endpoint's RFC 9728
// document, which an MCP client reads after its first 401, names Usher's
// public URL as the authorization server: the issuer the authorization
// server's metadata is discovered from.
func TestOAuthDiscoveryNamesPublicURL(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		code, body := get(t, s.url+path, "")
		var m struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if err := json.Unmarshal(body, &m); code != http.StatusOK || err != nil ||
			m.Resource != s.url+"/mcp" || len(m.AuthorizationServers) != 1 || m.AuthorizationServers[0] != s.url {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
}

// lineOf is the line of out that holds s.
func lineOf(out, s string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestOversizedOAuthBodiesInOAuthForm checks that a body over
// server.max_body_bytes (1 MiB), which the server refuses before any
// endpoint runs, is answered at the OAuth endpoints in OAuth's error JSON
// and elsewhere in the API's.
func TestOversizedOAuthBodiesInOAuthForm(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	huge := `{"x":"` + strings.Repeat("a", 1<<20) + `"}`
	for path, want := range map[string]string{
		"/oauth/register":     `"error":"invalid_client_metadata"`,
		"/oauth/token":        `"error":"invalid_request"`,
		"/api/assistant/runs": `"code":"body_too_large"`,
	} {
		resp, err := http.Post(s.url+path, "application/json", strings.NewReader(huge))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %s, want %s", path, resp.StatusCode, body, want)
		}
	}
}

// TestReplayedCodeRevokesItsAccessTokens checks RFC 6749 §4.1.2 through the
// real server: when a code is presented again after its redemption, the
// access tokens it issued — the first one, and one refreshed from it — stop
// working at /mcp at once, while another grant's go on working.
func TestReplayedCodeRevokesItsAccessTokens(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := oauthtest.SignIn(t, s.url, "alice")
	app := oauthtest.Register(t, s.url, "MCP Inspector", "http://127.0.0.1:6274/oauth/callback")
	code, verifier := app.Code(t, alice)
	first := app.Redeem(t, code, verifier)
	refreshed := app.Refresh(t, first.RefreshToken)
	other := app.Connect(t, oauthtest.SignIn(t, s.url, "bob")) // another grant of the same app
	for _, tok := range []string{first.AccessToken, refreshed.AccessToken, other.AccessToken} {
		mcpCall(t, s.url, tok, "tools/list", map[string]any{})
	}

	if p := app.Token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {app.RedirectURI},
		"code_verifier": {verifier}, "resource": {s.url + "/mcp"}}); p.Status != http.StatusBadRequest || p.Error != "invalid_grant" {
		t.Fatalf("the replay: %+v, want invalid_grant", p)
	}
	for name, tok := range map[string]string{"the code's first access token": first.AccessToken, "its refreshed one": refreshed.AccessToken} {
		code, body := post(t, s.url+"/mcp", tok, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if code != http.StatusUnauthorized || !strings.Contains(string(body), "invalid_token") {
			t.Errorf("%s after the replay: %d %s, want 401 invalid_token", name, code, body)
		}
	}
	mcpCall(t, s.url, other.AccessToken, "tools/list", map[string]any{})
}

// TestRefreshAnswerLost checks, through the real server with its default
// oauth.refresh_reuse_interval, a refresh whose answer is lost on the
// way: a proxy passes the request on, and closes the client's connection
// once the server has begun to answer, so the rotation has committed and
// the client holds only the old token. Its retry with that token keeps
// the sign-in: a new access token that /mcp takes, and a refresh token
// that rotates on; the log records the retry as a repeat.
func TestRefreshAnswerLost(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	app := oauthtest.Register(t, s.url, "MCP Inspector", "http://127.0.0.1:6274/oauth/callback")
	tokens := app.Connect(t, oauthtest.SignIn(t, s.url, "alice"))

	lossy := *app
	lossy.Base = losingAnswers(t, strings.TrimPrefix(s.url, "http://"))
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tokens.RefreshToken}, "client_id": {app.ClientID}}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.PostForm(lossy.Base+oauth.PathToken, form); err == nil {
		resp.Body.Close()
		t.Fatalf("the refresh through the proxy was answered %d; want its answer lost", resp.StatusCode)
	}

	retry := app.Refresh(t, tokens.RefreshToken)
	if retry.Status != http.StatusOK || retry.AccessToken == "" || retry.RefreshToken == "" {
		t.Fatalf("the retry after a lost answer: %+v, want new tokens", retry)
	}
	mcpCall(t, s.url, retry.AccessToken, "tools/list", map[string]any{})
	if next := app.Refresh(t, retry.RefreshToken); next.Status != http.StatusOK {
		t.Fatalf("rotating the retry's refresh token: %+v", next)
	}
	repeats := 0
	for _, r := range auditRecords(t, s) {
		if d, _ := r["details"].(map[string]any); r["kind"] == "oauth_token_issued" && d["repeat"] == true {
			repeats++
		}
	}
	if repeats != 1 {
		t.Errorf("the log records %d repeats, want the retry's one (the lost answer committed)", repeats)
	}
}

// losingAnswers starts a loopback proxy to addr that passes each
// request on and, once the server's answer begins to arrive, closes the
// client's connection without passing it on; it returns its base URL.
func losingAnswers(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c) //nolint:errcheck // ends when either side closes
				var first [1]byte
				_, _ = up.Read(first[:])
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

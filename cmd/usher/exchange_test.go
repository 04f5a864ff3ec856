package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/broker/oauth"
)

// registerClient registers a client by Dynamic Client Registration with
// the given token endpoint authentication method, and returns its id and
// secret (none for a public client).
func registerClient(t *testing.T, s *server, authMethod string) (id, secret string) {
	t.Helper()
	md, _ := json.Marshal(map[string]any{
		"client_name": "Exchanger " + authMethod, "redirect_uris": []string{"https://app.example.com/cb"},
		"token_endpoint_auth_method": authMethod,
	})
	resp, err := http.Post(s.url+oauth.PathRegister, "application/json", bytes.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal(body, &out); resp.StatusCode != http.StatusCreated || err != nil || out.ClientID == "" {
		t.Fatalf("register: %d %s", resp.StatusCode, body)
	}
	return out.ClientID, out.ClientSecret
}

// exchangeAt posts a token exchange of subject for s's MCP endpoint as the
// client id (HTTP Basic with secret, or client_id in the form when there is
// none) and returns the status and the answer.
func exchangeAt(t *testing.T, s *server, id, secret, subject string) (int, map[string]any) {
	t.Helper()
	form := url.Values{
		"grant_type": {oauth.GrantTokenExchange}, "subject_token": {subject},
		"subject_token_type": {oauth.TokenTypeAccessToken}, "resource": {s.url + "/mcp"},
	}
	if secret == "" {
		form.Set("client_id", id)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+oauth.PathToken, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if secret != "" {
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("token answer %d %s", resp.StatusCode, body)
	}
	return resp.StatusCode, out
}

// TestTokenExchangeThroughServe exchanges a person's API token from the
// development provider for an MCP token over `usher serve`, with the
// client named in oauth.token_exchange_clients (by its environment
// variable): the MCP endpoint takes the token as that person; a listed
// public client, an unlisted one and a broker token as the subject are
// refused; the exchange is in the intact audit log, without a token.
func TestTokenExchangeThroughServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
	first := startServerIn(t, dir, env)
	id, secret := registerClient(t, first, oauth.AuthClientSecretBasic)
	publicID, _ := registerClient(t, first, oauth.AuthNone)
	unlistedID, unlistedSecret := registerClient(t, first, oauth.AuthClientSecretBasic)
	if _, body := get(t, first.url+"/.well-known/oauth-authorization-server", ""); strings.Contains(string(body), oauth.GrantTokenExchange) {
		t.Errorf("the metadata announces the token exchange with no client listed: %s", body)
	}
	if err := first.shutdown(); err != nil {
		t.Fatal(err)
	}

	env["USHER_OAUTH_TOKEN_EXCHANGE_CLIENTS"] = id + "," + publicID
	s := startServerIn(t, dir, env)
	var meta oauth.Metadata
	if _, body := get(t, s.url+"/.well-known/oauth-authorization-server", ""); json.Unmarshal(body, &meta) != nil ||
		!slices.Contains(meta.GrantTypesSupported, oauth.GrantTokenExchange) {
		t.Errorf("the metadata does not announce the token exchange: %s", body)
	}
	userTok, err := s.cli(t, "token", "user", "--sub", "alice", "--group", "staff")
	if err != nil {
		t.Fatal(err)
	}
	var who assistant.Me
	if _, body := get(t, s.url+"/api/me", userTok); json.Unmarshal(body, &who) != nil || who.ID == "" {
		t.Fatalf("/api/me: %s", body)
	}

	status, tok := exchangeAt(t, s, id, secret, userTok)
	access, _ := tok["access_token"].(string)
	if status != http.StatusOK || access == "" || tok["issued_token_type"] != oauth.TokenTypeAccessToken ||
		tok["token_type"] != "Bearer" || tok["scope"] != "mcp:invoke" || tok["refresh_token"] != nil {
		t.Fatalf("exchange: %d %v", status, tok)
	}
	list := mcpCall(t, s.url, access, "tools/list", map[string]any{})
	if !strings.Contains(fmt.Sprint(list["tools"]), "name:notes_list") {
		t.Errorf("tools/list with the exchanged token: %v", list)
	}
	if res := mcpCall(t, s.url, access, "tools/call", map[string]any{"name": "notes_list", "arguments": map[string]any{}}); res["isError"] == true {
		t.Errorf("notes_list with the exchanged token: %v", res)
	}

	for name, tc := range map[string]struct {
		id, secret, subject, code string
	}{
		"a listed public client":      {publicID, "", userTok, oauth.CodeUnauthorizedClient},
		"a client not listed":         {unlistedID, unlistedSecret, userTok, oauth.CodeUnauthorizedClient},
		"a broker token as a subject": {id, secret, access, oauth.CodeInvalidRequest},
	} {
		if status, out := exchangeAt(t, s, tc.id, tc.secret, tc.subject); status != http.StatusBadRequest || out["error"] != tc.code || out["access_token"] != nil {
			t.Errorf("%s: %d %v, want 400 %s", name, status, out, tc.code)
		}
	}

	export, err := s.cli(t, "audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	var exchanged []map[string]any
	for line := range strings.SplitSeq(export, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["kind"] == "oauth_token_exchanged" {
			exchanged = append(exchanged, rec)
		}
	}
	if len(exchanged) != 1 || !strings.Contains(fmt.Sprint(exchanged[0]), who.ID) || !strings.Contains(fmt.Sprint(exchanged[0]), id) {
		t.Errorf("exchange records %v, want one, of %s by %s", exchanged, who.ID, id)
	}
	if strings.Contains(export, userTok) || strings.Contains(export, access) || strings.Contains(export, secret) {
		t.Error("the audit log holds a token or a secret")
	}
	if out, err := s.cli(t, "audit", "verify"); err != nil || !strings.HasPrefix(out, "audit log intact:") {
		t.Errorf("audit verify: %v %q", err, out)
	}
}

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/broker/oauth/oauthtest"
	"github.com/usherhq/usher/internal/testenv"
)

// TestConfiguredClientsThroughServe checks that the clients of
// oauth.clients in the YAML file are usable once `usher serve` has
// started: listed as configured, a public one connected as a registered one
// is, a private_key_jwt one redeeming its code with a client assertion —
// and that one removed from the file is refused after a restart; and that
// each was audited once, when created.
func TestConfiguredClientsThroughServe(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "ci-1", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfig := func(withDesk bool) string {
		yaml := "oauth:\n  clients:\n" +
			"    - id: ci-bot\n      name: CI bot\n      redirect_uris: [https://ci.example.com/callback]\n" +
			"      auth: private_key_jwt\n      jwks: " + string(jwks) + "\n"
		if withDesk {
			yaml += "    - id: desk\n      name: Desk app\n      redirect_uris: [http://127.0.0.1:7777/cb]\n      auth: none\n"
		}
		p := filepath.Join(dir, "usher.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
	data := t.TempDir()
	// One address across the restart: the development issuer is the
	// server's URL, and a grant of another issuer's person is refused.
	addr := testenv.FreeAddr(t)
	s := startServerIn(t, data, env, "--config", writeConfig(true), "--addr", addr)

	out, err := s.cli(t, "clients", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ci-bot", "desk"} {
		if l := lineOf(out, id); !strings.Contains(l, "configured") || !strings.Contains(l, "active") {
			t.Errorf("usher clients list: %q for %s, want it configured and active:\n%s", l, id, out)
		}
	}

	alice := oauthtest.SignIn(t, s.url, "alice")
	desk := &oauthtest.App{Base: s.url, ClientID: "desk", RedirectURI: "http://127.0.0.1:7777/cb"}
	deskTokens := desk.Connect(t, alice)

	// The private_key_jwt client: the code through consent, then the token
	// endpoint with an assertion signed by its key.
	ci := &oauthtest.App{Base: s.url, ClientID: "ci-bot", RedirectURI: "https://ci.example.com/callback"}
	u, verifier := ci.AuthorizeURL()
	resp, page := oauthtest.SessionRequest(t, http.MethodGet, u, alice, "", nil)
	csrf, request := oauthtest.ConsentCSRF.FindStringSubmatch(page), oauthtest.ConsentRequest.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || csrf == nil || request == nil || !strings.Contains(page, "CI bot") || !strings.Contains(page, "Configured by Usher") {
		t.Fatalf("authorize: %d %s", resp.StatusCode, page)
	}
	form := url.Values{"csrf_token": {html.UnescapeString(csrf[1])}, "request": {html.UnescapeString(request[1])}, "decision": {"approve"}}
	resp, _ = oauthtest.SessionRequest(t, http.MethodPost, s.url+oauth.PathAuthorize, alice,
		"application/x-www-form-urlencoded", strings.NewReader(form.Encode()), "Origin", s.url)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("consent: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	sign := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
			"iss": "ci-bot", "sub": "ci-bot", "aud": s.url + oauth.PathToken,
			"exp": time.Now().Add(time.Minute).Unix(), "jti": oauth.NewSecret(),
		})
		tok.Header["kid"] = "ci-1"
		raw, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	redeem := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {ci.RedirectURI},
		"code_verifier": {verifier}, "resource": {s.url + "/mcp"},
		"client_assertion_type": {oauth.ClientAssertionType}, "client_assertion": {sign()}}
	tok := postTokenForm(t, s.url+oauth.PathToken, redeem)
	if tok.Status != http.StatusOK || tok.AccessToken == "" {
		t.Fatalf("redeem with a client assertion: %+v", tok)
	}
	if list := mcpCall(t, s.url, tok.AccessToken, "tools/list", map[string]any{}); list["tools"] == nil {
		t.Errorf("tools/list with the client's token: %v", list)
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}

	// Without desk in the file, the restarted server refuses it, and keeps
	// it in the database.
	s = startServerIn(t, data, env, "--config", writeConfig(false), "--addr", addr)
	desk.Base = s.url
	if p := desk.Refresh(t, deskTokens.RefreshToken); p.Status != http.StatusUnauthorized || p.Error != oauth.CodeInvalidClient {
		t.Errorf("a client removed from the file: %+v, want 401 invalid_client", p)
	}
	if out, _ := s.cli(t, "clients", "list"); !strings.Contains(lineOf(out, "desk"), "configured") {
		t.Errorf("the removed client is no longer listed:\n%s", out)
	}
	// Each was audited when created; the restart, which changed neither
	// (ci-bot is as it was, desk is not written), records nothing.
	export, err := s.cli(t, "audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(export, `"oauth_client_configured"`); n != 2 {
		t.Errorf("%d oauth_client_configured records after two starts, want 2 (ci-bot and desk, created):\n%s", n, export)
	}
	refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
		"client_assertion_type": {oauth.ClientAssertionType}, "client_assertion": {sign()}}
	if p := postTokenForm(t, s.url+oauth.PathToken, refresh); p.Status != http.StatusOK {
		t.Errorf("the configured client after the restart: %+v", p)
	}
}

// postTokenForm posts form to the token endpoint u.
func postTokenForm(t *testing.T, u string, form url.Values) oauthtest.Tokens {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var p oauthtest.Tokens
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("token answer %d %s", resp.StatusCode, body)
	}
	p.Status = resp.StatusCode
	return p
}

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOAuthClients(t *testing.T) {
	secret := strings.Repeat("s", 40)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	hash := hex.EncodeToString(sum[:])
	p := writeFile(t, `
oauth:
  clients:
    - id: ci-bot
      name: CI bot
      redirect_uris: [https://ci.example.com/callback]
      auth: private_key_jwt
      jwks_uri: https://ci.example.com/jwks.json
    - id: ops
      redirect_uris: [https://ops.example.com/cb]
      grant_types: [authorization_code]
      auth: client_secret_basic
      secret_hash: `+hash+`
    - id: ops-file
      redirect_uris: [https://ops.example.com/cb]
      auth: client_secret_basic
      secret_file: `+secretFile+`
    - id: desk
      redirect_uris: [http://127.0.0.1/callback]
      auth: none
    - id: inline
      redirect_uris: [https://inline.example.com/cb]
      auth: private_key_jwt
      jwks: {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "x": "AAAA", "y": "BBBB"}]}
`)
	c, err := Load(p, env(nil), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OAuth.Clients) != 5 || c.OAuth.Clients[0].JWKSURI != "https://ci.example.com/jwks.json" || c.OAuth.Clients[1].GrantTypes[0] != "authorization_code" {
		t.Fatalf("clients = %+v", c.OAuth.Clients)
	}
	for _, i := range []int{1, 2} {
		if got, err := c.OAuth.Clients[i].Secret(); err != nil || got != hash {
			t.Errorf("client %d: Secret() = %q, %v; want the secret's SHA-256", i, got, err)
		}
	}
	set, err := c.OAuth.Clients[4].KeySet()
	var parsed struct {
		Keys []map[string]string `json:"keys"`
	}
	if err != nil || json.Unmarshal(set, &parsed) != nil || len(parsed.Keys) != 1 || parsed.Keys[0]["kid"] != "k1" {
		t.Errorf("KeySet() = %s, %v", set, err)
	}
	if _, err := Load("", env(map[string]string{"USHER_OAUTH_CLIENTS": "x"}), Overrides{}); err == nil || !strings.Contains(err.Error(), "oauth.clients") {
		t.Errorf("oauth.clients from the environment: %v, want only in the file", err)
	}
}

func TestOAuthClientsRefused(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const uris = "\n      redirect_uris: [https://a.example.com/cb]"
	for name, tc := range map[string]struct{ client, want string }{
		"no id":                 {"auth: none" + uris, "oauth.clients[0].id: must not be empty"},
		"an https id":           {"id: https://a.example.com/client.json\n      auth: none" + uris, "oauth.clients[0].id: may hold only"},
		"a registered id":       {"id: usher-dcr-x\n      auth: none" + uris, "oauth.clients[0].id: must not begin with usher-dcr-"},
		"no auth":               {"id: a" + uris, "oauth.clients[0].auth: is required"},
		"an unknown auth":       {"id: a\n      auth: client_secret_post" + uris, "oauth.clients[0].auth: want none"},
		"no redirect":           {"id: a\n      auth: none", "oauth.clients[0].redirect_uris: at least one"},
		"an unknown grant":      {"id: a\n      auth: none\n      grant_types: [password]" + uris, "oauth.clients[0].grant_types"},
		"no secret":             {"id: a\n      auth: client_secret_basic" + uris, "exactly one of secret_hash and secret_file"},
		"a plain secret":        {"id: a\n      auth: client_secret_basic\n      secret_hash: hunter2" + uris, "oauth.clients[0].secret_hash: must be the secret's SHA-256"},
		"a short hash":          {"id: a\n      auth: client_secret_basic\n      secret_hash: abcd" + uris, "oauth.clients[0].secret_hash: must be the secret's SHA-256"},
		"an uppercase hash":     {"id: a\n      auth: client_secret_basic\n      secret_hash: " + strings.Repeat("A", 64) + uris, "oauth.clients[0].secret_hash: must be"},
		"the secret itself":     {"id: a\n      auth: client_secret_basic\n      secret: hunter2" + uris, "field secret not found"},
		"a missing secret file": {"id: a\n      auth: client_secret_basic\n      secret_file: /nonexistent/secret" + uris, "oauth.clients[0].secret_file"},
		"a short secret file":   {"id: a\n      auth: client_secret_basic\n      secret_file: " + short + uris, "at least 32 characters"},
		"both secrets": {"id: a\n      auth: client_secret_basic\n      secret_file: " + short + "\n      secret_hash: " + strings.Repeat("a", 64) + uris,
			"exactly one of secret_hash and secret_file"},
		"a secret for none": {"id: a\n      auth: none\n      secret_hash: " + strings.Repeat("a", 64) + uris, "only for auth client_secret_basic"},
		"no keys":           {"id: a\n      auth: private_key_jwt" + uris, "exactly one of jwks_uri and jwks"},
		"both keys": {"id: a\n      auth: private_key_jwt\n      jwks_uri: https://a.example.com/jwks\n      jwks: {keys: []}" + uris,
			"exactly one of jwks_uri and jwks"},
		"an http jwks_uri": {"id: a\n      auth: private_key_jwt\n      jwks_uri: http://a.example.com/jwks" + uris, "oauth.clients[0].jwks_uri: must be https"},
		"keys for none":    {"id: a\n      auth: none\n      jwks_uri: https://a.example.com/jwks" + uris, "only for auth private_key_jwt"},
		"an id twice":      {"id: a\n      auth: none" + uris + "\n    - id: a\n      auth: none" + uris, "oauth.clients[1].id: \"a\" is given twice"},
	} {
		p := writeFile(t, "oauth:\n  clients:\n    - "+tc.client+"\n")
		if _, err := Load(p, env(nil), Overrides{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, tc.want)
		}
	}
}

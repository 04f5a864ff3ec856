package main

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/oauth/oauthtest"
)

// TestKeyEncryptionKeyRotation replaces broker.key_encryption_key as the
// deployment guide says, through the real server on one installation:
// the new key with the old one among the previous keys, `usher keys
// reseal`, then the new key alone. The broker's, the development
// provider's and the audit keys stay the same throughout — the published
// key sets do not change, a token signed before still opens the API, the
// audit log's checkpoints still verify —, and the new key alone opens
// nothing before the reseal. A browser session signed in before the
// switch lasts while the old key is among the previous ones; one signed
// in after it, beyond.
func TestKeyEncryptionKeyRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oldKey := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("o", 32)))
	newKey := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32)))
	published := func(s *server) string {
		t.Helper()
		code, jwks := get(t, s.url+"/.well-known/jwks.json", "")
		code2, auditKey := get(t, s.url+"/.well-known/usher-audit-key", "")
		if code != 200 || code2 != 200 {
			t.Fatalf("the published keys: %d %s, %d %s", code, jwks, code2, auditKey)
		}
		return string(jwks) + "\n" + string(auditKey)
	}

	env := func(key string, previous ...string) map[string]string {
		return map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": key, "USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS": strings.Join(previous, ",")}
	}
	before := startServerIn(t, dir, env(oldKey))
	tok, err := before.cli(t, "token", "user", "--sub", "alice")
	if err != nil {
		t.Fatal(err)
	}
	me := func(s *server, cookie string) int {
		t.Helper()
		resp, _ := oauthtest.SessionRequest(t, http.MethodGet, s.url+"/api/me", cookie, "", nil)
		return resp.StatusCode
	}
	signedInBefore := oauthtest.SignIn(t, before.url, "carol")
	if out, err := before.cli(t, "audit", "rotate-key"); err != nil {
		t.Fatalf("audit rotate-key: %v %s", err, out)
	}
	keys := published(before)
	if err := before.shutdown(); err != nil {
		t.Fatal(err)
	}

	alone := &server{dataDir: dir, url: before.url, env: env(newKey)}
	if _, err := alone.cli(t, "token", "user", "--sub", "alice"); err == nil || !strings.Contains(err.Error(), "cannot decrypt") {
		t.Fatalf("the new key alone, before the reseal: %v; want the keys refused", err)
	}
	wrong := &server{dataDir: dir, url: before.url, env: env(newKey, base64.StdEncoding.EncodeToString([]byte(strings.Repeat("w", 32))))}
	if _, err := wrong.cli(t, "token", "user", "--sub", "alice"); err == nil || !strings.Contains(err.Error(), "nor USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS") {
		t.Fatalf("the new key and a wrong previous one: %v; want the keys refused, naming both settings", err)
	}

	// The same address again, so the same issuer: a token signed before is
	// one the server issued.
	addr := strings.TrimPrefix(before.url, "http://")
	both := startServerIn(t, dir, env(newKey, oldKey), "--addr", addr)
	if got := published(both); got != keys {
		t.Errorf("with the old key among the previous ones the published keys changed:\n%s\nwant\n%s", got, keys)
	}
	if code, body := get(t, both.url+"/api/me", tok); code != 200 {
		t.Errorf("a token signed before, with the old key among the previous ones: %d %s", code, body)
	}
	if code := me(both, signedInBefore); code != http.StatusOK {
		t.Errorf("a browser session of before, with the old key among the previous ones: %d, want 200", code)
	}
	signedInAfter := oauthtest.SignIn(t, both.url, "dave")
	out, err := both.cli(t, "keys", "reseal")
	if err != nil || !strings.Contains(out, "audit signing keys: 2 resealed") || !strings.Contains(out, "broker signing keys: ") {
		t.Fatalf("keys reseal: %v\n%s", err, out)
	}
	if out, err := both.cli(t, "keys", "reseal"); err != nil || !strings.Contains(out, "(0 resealed now)") {
		t.Errorf("keys reseal again: %v\n%s; want nothing to do", err, out)
	}
	if err := both.shutdown(); err != nil {
		t.Fatal(err)
	}

	after := startServerIn(t, dir, env(newKey), "--addr", addr)
	if got := published(after); got != keys {
		t.Errorf("with the new key alone after the reseal the published keys changed:\n%s\nwant\n%s", got, keys)
	}
	if code, body := get(t, after.url+"/api/me", tok); code != 200 {
		t.Errorf("a token signed before the rotation, after it: %d %s", code, body)
	}
	if code := me(after, signedInAfter); code != http.StatusOK {
		t.Errorf("a browser session signed in under the new key, with it alone: %d, want 200", code)
	}
	if code := me(after, signedInBefore); code != http.StatusUnauthorized {
		t.Errorf("a browser session sealed under the old key, once it is dropped: %d, want 401", code)
	}
	if out, err := after.cli(t, "audit", "verify"); err != nil || !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify after the rotation: %v\n%s", err, out)
	}
	if _, err := after.cli(t, "token", "user", "--sub", "bob"); err != nil {
		t.Errorf("a new token with the new key alone: %v", err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestOAuthSweepThroughServe checks, on both engines, that `usher serve`
// sweeps the authorization server's rows: a code and a rotated refresh
// token ended longer than oauth.refresh_idle ago, and an expired client
// assertion, are deleted soon after the start; a code ended within it, a
// token used within it (still recognised if presented again) and a live
// one and a live assertion are kept.
func TestOAuthSweepThroughServe(t *testing.T) {
	t.Parallel()
	env := map[string]string{"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
	for _, engine := range []struct {
		name string
		open func(t *testing.T) (dsn, dataDir string, args []string)
	}{
		{"SQLite", func(t *testing.T) (string, string, []string) {
			dir := t.TempDir()
			return filepath.Join(dir, "usher.db"), dir, nil
		}},
		{"PostgreSQL", func(t *testing.T) (string, string, []string) {
			dsn := storetest.PostgresURL(t)
			return dsn, t.TempDir(), []string{"--database-url", dsn}
		}},
	} {
		t.Run(engine.name, func(t *testing.T) {
			ctx := context.Background()
			dsn, dataDir, args := engine.open(t)
			st, err := store.Open(ctx, dsn, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			const client = "usher-dcr-sweep"
			if _, err := st.CreateOAuthClient(ctx, store.OAuthClient{ID: client, Kind: store.OAuthClientRegistered, Name: "Sweep",
				RedirectURIs: []string{"http://127.0.0.1:7777/cb"}, GrantTypes: []string{"authorization_code", "refresh_token"}, AuthMethod: "none"}); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC().Truncate(time.Second)
			day := 24 * time.Hour
			code := func(name string, at time.Time) string {
				hash := oauth.HashSecret(name)
				if err := st.CreateAuthorizationCode(ctx, store.AuthorizationCode{CodeHash: hash, ClientID: client, Principal: "issuer|alice",
					RedirectURI: "http://127.0.0.1:7777/cb", CodeChallenge: "c", Resource: "http://127.0.0.1/mcp", CreatedAt: at,
					ExpiresAt: at.Add(time.Minute)}); err != nil {
					t.Fatal(err)
				}
				return hash
			}
			// rotated issues a family's token at issued and rotates it at
			// used, and returns the old and the new token's hashes.
			rotated := func(name string, issued, used time.Time) (old, next string) {
				old, next = oauth.HashSecret(name+"-1"), oauth.HashSecret(name+"-2")
				if err := st.IssueRefreshToken(ctx, store.RefreshToken{TokenHash: old, FamilyID: name, ClientID: client, Principal: "issuer|alice",
					Subject: json.RawMessage(`{}`), Resource: "http://127.0.0.1/mcp", Scope: "mcp:invoke", CreatedAt: issued,
					ExpiresAt: issued.Add(oauth.DefaultRefreshIdle), FamilyExpiresAt: issued.Add(oauth.DefaultRefreshAbsolute)}); err != nil {
					t.Fatal(err)
				}
				if _, err := st.RotateRefreshToken(ctx, old, used, store.TokenGrant{Refresh: &store.RefreshToken{TokenHash: next,
					ExpiresAt: used.Add(oauth.DefaultRefreshIdle)}}); err != nil {
					t.Fatal(err)
				}
				return old, next
			}
			oldCode, recentCode := code("old", now.Add(-20*day)), code("recent", now.Add(-time.Hour))
			oldUsed, oldNext := rotated("old", now.Add(-20*day), now.Add(-15*day))
			recentUsed, recentNext := rotated("recent", now.Add(-2*time.Hour), now.Add(-time.Hour))
			if err := st.UseClientAssertion(ctx, client, "expired", now.Add(-time.Hour), now.Add(-2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := st.UseClientAssertion(ctx, client, "live", now.Add(5*time.Minute), now); err != nil {
				t.Fatal(err)
			}

			startServerIn(t, dataDir, env, args...)
			gone := func() bool {
				_, e1 := st.GetAuthorizationCode(ctx, oldCode)
				_, e2 := st.GetRefreshToken(ctx, oldUsed)
				return errors.Is(e1, store.ErrNotFound) && errors.Is(e2, store.ErrNotFound)
			}
			for deadline := time.Now().Add(15 * time.Second); !gone(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the code and the refresh token ended 15 and 20 days ago are still there 15 s after the start")
				}
			}
			if _, err := st.GetAuthorizationCode(ctx, recentCode); err != nil {
				t.Errorf("the code ended an hour ago: %v, want it kept", err)
			}
			for name, hash := range map[string]string{"used an hour ago": recentUsed, "of the old family, live": oldNext, "live": recentNext} {
				if _, err := st.GetRefreshToken(ctx, hash); err != nil {
					t.Errorf("the refresh token %s: %v, want it kept", name, err)
				}
			}
			// The sweep deletes the expired assertions first: none is left
			// to delete, and the live one is still refused.
			if n, err := st.DeleteExpiredClientAssertions(ctx, now); err != nil || n != 0 {
				t.Errorf("DeleteExpiredClientAssertions after the sweep = %d, %v; want 0: the sweep deleted the expired one", n, err)
			}
			if err := st.UseClientAssertion(ctx, client, "live", now.Add(5*time.Minute), now); !errors.Is(err, store.ErrConflict) {
				t.Errorf("the live jti again = %v, want ErrConflict", err)
			}
		})
	}
}

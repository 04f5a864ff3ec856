package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestRevokedGrantsAccessTokensRefused checks that the access tokens of a
// grant stop verifying once the grant is revoked — by a replayed code (RFC
// 6749 §4.1.2), a reused refresh token, a revocation (RFC 7009 §2.1), a
// withdrawn consent or a revoked client —,
// a token the verifier has cached included, and that another grant's do
// not, on both engines.
func TestRevokedGrantsAccessTokensRefused(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		v, err := broker.NewVerifier(e.keys, &broker.VerifierOptions{
			Issuer: e.issuer, Audience: e.resource, Now: e.clock.Now, GrantRevoked: st.GrantRevoked,
		})
		if err != nil {
			t.Fatal(err)
		}
		verify := func(tok string) error {
			t.Helper()
			_, err := v.Verify(t.Context(), tok)
			return err
		}
		grant := func() (code, verifier string, tokens tokenAnswer) {
			t.Helper()
			code, verifier = e.code(c, "alice", nil)
			tokens = e.redeem(c, code, verifier)
			if tokens.Status != http.StatusOK {
				t.Fatalf("redeem: %+v", tokens)
			}
			if err := verify(tokens.AccessToken); err != nil { // and cached
				t.Fatalf("a fresh grant's access token: %v", err)
			}
			return code, verifier, tokens
		}
		_, _, other := grant()

		// A replayed code: its access token and the one refreshed from it.
		code, verifier, replayed := grant()
		refreshed := e.refresh(c, replayed.RefreshToken)
		if err := verify(refreshed.AccessToken); err != nil {
			t.Fatal(err)
		}
		if a := e.redeem(c, code, verifier); a.Error != oauth.CodeInvalidGrant {
			t.Fatalf("the replay: %+v", a)
		}
		for name, tok := range map[string]string{"the code's": replayed.AccessToken, "the refreshed": refreshed.AccessToken} {
			if err := verify(tok); !errors.Is(err, broker.ErrInvalidToken) {
				t.Errorf("%s access token after the replay: %v, want ErrInvalidToken", name, err)
			}
		}

		// A reused refresh token.
		_, _, reused := grant()
		if a := e.refresh(c, reused.RefreshToken); a.Status != http.StatusOK {
			t.Fatalf("rotation: %+v", a)
		}
		if a := e.refresh(c, reused.RefreshToken); a.Error != oauth.CodeInvalidGrant {
			t.Fatalf("the reuse: %+v", a)
		}
		if err := verify(reused.AccessToken); !errors.Is(err, broker.ErrInvalidToken) {
			t.Errorf("the access token of a reused refresh token's family: %v, want ErrInvalidToken", err)
		}

		// A revocation.
		_, _, revoked := grant()
		if a := e.postToken(oauth.PathRevoke, url.Values{"token": {revoked.RefreshToken}, "client_id": {c.ID}}); a.Status != http.StatusOK {
			t.Fatalf("revoke: %+v", a)
		}
		if err := verify(revoked.AccessToken); !errors.Is(err, broker.ErrInvalidToken) {
			t.Errorf("the access token of a revoked refresh token's family: %v, want ErrInvalidToken", err)
		}

		// A consent withdrawn (Connected apps) and a client revoked (usher
		// clients revoke), each on a client of its own.
		for name, revoke := range map[string]func(c client) error{
			"consent": func(c client) error {
				return st.RevokeConsent(t.Context(), principal("alice").ID(), c.ID, e.clock.Now())
			},
			"client": func(c client) error { return st.RevokeOAuthClient(t.Context(), c.ID, e.clock.Now()) },
		} {
			c := e.register(nil)
			code, verifier := e.code(c, "alice", nil)
			tokens := e.redeem(c, code, verifier)
			if err := verify(tokens.AccessToken); err != nil { // and cached
				t.Fatalf("%s: a fresh grant's access token: %v", name, err)
			}
			if err := revoke(c); err != nil {
				t.Fatalf("revoking the %s: %v", name, err)
			}
			if err := verify(tokens.AccessToken); !errors.Is(err, broker.ErrInvalidToken) {
				t.Errorf("an access token after its %s was revoked: %v, want ErrInvalidToken", name, err)
			}
		}

		if err := verify(other.AccessToken); err != nil {
			t.Errorf("another grant's access token: %v", err)
		}
	})
}

// TestSweepKeepsRevokedGrantsWhileTheirTokensLive checks that with the
// shortest refresh idle lifetime (1 minute), shorter than an access
// token's, the sweep keeps a revoked grant until no access token of it
// can be unexpired: its token stays refused until it expires.
func TestSweepKeepsRevokedGrantsWhileTheirTokensLive(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	e := newEnv(t, st, func(o *oauth.ServerOptions) { o.RefreshIdle = time.Minute; o.RefreshAbsolute = time.Hour })
	sw, err := oauth.NewSweeper(e.server, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := broker.MaxTokenLifetime + broker.MaxLeeway; sw.Retention() != want {
		t.Errorf("Retention = %s, want %s, the longest an access token of a revoked grant lives", sw.Retention(), want)
	}
	v, err := broker.NewVerifier(e.keys, &broker.VerifierOptions{
		Issuer: e.issuer, Audience: e.resource, Now: e.clock.Now, GrantRevoked: st.GrantRevoked,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := e.register(nil)
	code, verifier := e.code(c, "alice", nil)
	tokens := e.redeem(c, code, verifier)
	if a := e.redeem(c, code, verifier); a.Error != oauth.CodeInvalidGrant {
		t.Fatalf("the replay: %+v", a)
	}
	e.clock.Advance(2 * time.Minute) // past the refresh idle lifetime, within the token's
	if _, err := sw.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), tokens.AccessToken); !errors.Is(err, broker.ErrInvalidToken) {
		t.Errorf("the replayed code's access token after a sweep: %v, want ErrInvalidToken", err)
	}
}

// BenchmarkVerifyGrantCheck measures, in process, what the check of a
// token's grant adds to the verification of a token the verifier has
// cached (every call of a client after its first): "none" is a token
// without grant_id (the assistant's), "store" one with, checked in the
// store (one read of a primary key). SQLite, and PostgreSQL when
// TEST_DATABASE_URL is set.
func BenchmarkVerifyGrantCheck(b *testing.B) {
	b.Run("SQLite", func(b *testing.B) { benchVerifyGrantCheck(b, storetest.NewSQLite(b)) })
	if os.Getenv(storetest.DatabaseURLEnv) != "" {
		b.Run("Postgres", func(b *testing.B) { benchVerifyGrantCheck(b, storetest.NewPostgres(b)) })
	}
}

func benchVerifyGrantCheck(b *testing.B, st store.Store) {
	ctx := context.Background()
	keys, err := broker.NewKeyring(st, "broker", bytes.Repeat([]byte{7}, broker.SealKeySize),
		&broker.KeyringOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	const issuer, resource = "https://usher.example", "https://usher.example/mcp"
	mint, err := broker.New(keys, &broker.Options{Issuer: issuer})
	if err != nil {
		b.Fatal(err)
	}
	v, err := broker.NewVerifier(keys, &broker.VerifierOptions{Issuer: issuer, Audience: resource, GrantRevoked: st.GrantRevoked})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, grant string }{{"none", ""}, {"store", "family-of-the-bench"}} {
		tok, err := mint.Mint(ctx, broker.Grant{Subject: "alice", Audience: resource, ClientID: "app", GrantID: tc.grant})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := v.Verify(ctx, tok.Raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testRevokedGrants checks that every revocation of a refresh-token
// family — a replayed code, a reused refresh token, RevokeRefreshFamily —
// records its grant revoked, that no other grant reads revoked, and that
// the sweep forgets a revocation only at its time.
func testRevokedGrants(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	revoked := func(family string) bool {
		t.Helper()
		r, err := s.GrantRevoked(ctx, family)
		if err != nil {
			t.Fatalf("GrantRevoked(%s): %v", family, err)
		}
		return r
	}

	// A replayed code.
	if err := s.CreateAuthorizationCode(ctx, newCode("code-1", "c", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-code", now, nil); err != nil {
		t.Fatal(err)
	}
	if revoked("fam-code") {
		t.Error("a redeemed code's grant reads revoked")
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-replay", now.Add(time.Second), nil); !errors.Is(err, store.ErrReused) {
		t.Fatalf("the replay: %v, want ErrReused", err)
	}
	if !revoked("fam-code") || revoked("fam-replay") {
		t.Errorf("after the replay: the code's grant revoked %v, the replay's family revoked %v; want true, false",
			revoked("fam-code"), revoked("fam-replay"))
	}

	// A reused refresh token.
	mustIssue(t, s, newRefresh("rt-a", "fam-refresh", "c", "alice", now))
	if _, err := rotate(ctx, s, "rt-a", nextRefresh("rt-b", now), now); err != nil {
		t.Fatal(err)
	}
	if revoked("fam-refresh") {
		t.Error("a rotated family reads revoked")
	}
	if _, err := rotate(ctx, s, "rt-a", nextRefresh("rt-c", now), now.Add(time.Second)); !errors.Is(err, store.ErrReused) {
		t.Fatalf("the reuse: %v, want ErrReused", err)
	}
	if !revoked("fam-refresh") {
		t.Error("a reused refresh token's grant does not read revoked")
	}

	// A revocation (RFC 7009).
	mustIssue(t, s, newRefresh("rt-x", "fam-revoked", "c", "alice", now))
	if err := s.RevokeRefreshFamily(ctx, "rt-x", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !revoked("fam-revoked") || revoked("fam-unknown") {
		t.Error("RevokeRefreshFamily's grant not revoked, or an unknown one revoked")
	}
	if _, err := s.GrantRevoked(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("GrantRevoked of no family: %v, want ErrInvalid", err)
	}

	// The sweep forgets a revocation at its time, not before.
	if _, err := s.DeleteExpiredOAuth(ctx, now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if revoked("fam-code") || revoked("fam-refresh") || !revoked("fam-revoked") {
		t.Errorf("after a sweep between the revocations: fam-code %v, fam-refresh %v, fam-revoked %v; want false, false, true",
			revoked("fam-code"), revoked("fam-refresh"), revoked("fam-revoked"))
	}
}

// testRevokedGrantsOfClients checks that revoking a client records every
// grant of it revoked — a family a code began, one only a refresh token
// names — and that revoking a consent records that person's grants of
// that client, and no one else's.
func testRevokedGrantsOfClients(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	revoked := func(family string) bool {
		t.Helper()
		r, err := s.GrantRevoked(ctx, family)
		if err != nil {
			t.Fatalf("GrantRevoked(%s): %v", family, err)
		}
		return r
	}
	for _, c := range []string{"gone", "kept"} {
		mustOAuthClient(t, s, c)
		if err := s.CreateAuthorizationCode(ctx, newCode("code-"+c, c, now)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RedeemAuthorizationCode(ctx, "code-"+c, "fam-code-"+c, now, nil); err != nil {
			t.Fatal(err)
		}
		mustIssue(t, s, newRefresh("rt-"+c, "fam-refresh-"+c, c, "alice", now))
		mustIssue(t, s, newRefresh("rt-bob-"+c, "fam-bob-"+c, c, "bob", now))
		for _, p := range []string{"alice", "bob"} {
			if _, err := s.PutConsent(ctx, store.Consent{Principal: p, ClientID: c, Scope: "mcp:invoke"}); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := s.RevokeConsent(ctx, "bob", "kept", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !revoked("fam-bob-kept") || revoked("fam-refresh-kept") || revoked("fam-code-kept") {
		t.Errorf("after bob's consent to kept is revoked: bob's grant revoked %v, alice's %v and %v; want true, false, false",
			revoked("fam-bob-kept"), revoked("fam-refresh-kept"), revoked("fam-code-kept"))
	}

	if err := s.RevokeOAuthClient(ctx, "gone", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fam-code-gone", "fam-refresh-gone", "fam-bob-gone"} {
		if !revoked(f) {
			t.Errorf("after its client is revoked, grant %s does not read revoked", f)
		}
	}
	if revoked("fam-refresh-kept") || revoked("fam-code-kept") {
		t.Error("revoking one client revoked another's grants")
	}
}

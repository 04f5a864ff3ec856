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

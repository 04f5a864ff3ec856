package identity_test

import (
	"testing"
	"time"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/testenv"
)

// newCachingVerifier is a verifier of ti's tokens on clk.
func newCachingVerifier(t *testing.T, ti *testIssuer, clk *testenv.Clock) *identity.Verifier {
	t.Helper()
	opts := singleTenantOptions(ti, clk)
	opts.JWKSURL = ti.URL() + "/keys"
	v, err := identity.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A token verified a moment ago is refused once it expires, although the
// moment is well within the time a verified token is remembered.
func TestVerifiedTokenEndsAtItsExpiry(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t)
	clk := newClock()
	v := newCachingVerifier(t, ti, clk)
	c := entraClaims(ti.URL(), clk.Now())
	c["exp"] = clk.Now().Add(10 * time.Second).Unix()
	raw := sign(t, ti.key, goodKID, c)
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{{0, "accepted"}, {5 * time.Second, "accepted"}, {6 * time.Second, "unauthenticated"}, {time.Second, "unauthenticated"}} {
		clk.Advance(step.advance)
		if _, err := v.Verify(t.Context(), raw); outcome(err) != step.want {
			t.Fatalf("at %s: %s (%v), want %s", clk.Now().Format(time.TimeOnly), outcome(err), err, step.want)
		}
	}
}

// A token verified a moment ago is refused once the issuer's key set no
// longer holds the key that signed it, before it would be verified again
// in full.
func TestVerifiedTokenEndsWithItsKey(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t)
	clk := newClock()
	v := newCachingVerifier(t, ti, clk)
	c := entraClaims(ti.URL(), clk.Now())
	old := sign(t, ti.key, goodKID, c)
	if _, err := v.Verify(t.Context(), old); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	if _, err := v.Verify(t.Context(), old); err != nil {
		t.Fatalf("again: %v", err)
	}
	// The issuer withdraws the key; a token of its new key makes the
	// verifier fetch the key set again (past the bounded refetch interval,
	// within the time a verified token is remembered).
	ti.withdrawn.Store(true)
	clk.Advance(31 * time.Second)
	if _, err := v.Verify(t.Context(), sign(t, ti.other, otherKID, entraClaims(ti.URL(), clk.Now()))); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	if hits := ti.jwksHits.Load(); hits != 2 {
		t.Fatalf("key set fetched %d times, want 2", hits)
	}
	if _, err := v.Verify(t.Context(), old); outcome(err) != "unauthenticated" {
		t.Errorf("a token of the withdrawn key: %s (%v), want unauthenticated", outcome(err), err)
	}
}

// A remembered token yields the same principal each time, and a caller
// changing the principal it got changes nothing for the next.
func TestVerifiedTokenPrincipal(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t)
	clk := newClock()
	v := newCachingVerifier(t, ti, clk)
	raw := sign(t, ti.key, goodKID, entraClaims(ti.URL(), clk.Now()))
	first, err := v.Verify(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	text := func(p identity.Principal) string {
		return p.ID() + " " + p.Groups[0] + " " + p.Roles[0] + " " + p.Scopes[0]
	}
	want := text(first)
	first.Groups[0], first.Roles[0], first.Scopes[0] = "changed", "changed", "changed"
	for i := range 2 {
		again, err := v.Verify(t.Context(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(again); got != want {
			t.Errorf("time %d: %s, want %s", i+2, got, want)
		}
		again.Groups[0], again.Roles[0], again.Scopes[0] = "changed", "changed", "changed"
	}
}

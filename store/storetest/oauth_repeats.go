package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// repeatWindow is how long the rotations of the repeat tests allow their
// token to be presented again.
const repeatWindow = 30 * time.Second

// testRefreshRepeats checks a rotation's repeat (RotateRefreshToken): the
// rotated token presented again before the repeat ends, while its
// successor is unused, is answered with the same successor and its own
// record, and writes no other token; after the repeat ends, once the
// successor is used or revoked, or when the rotation allowed none, it is
// a reuse that revokes the family. The salt is kept only while a repeat
// may use it.
func testRefreshRepeats(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "c", Scope: "mcp:invoke",
		Resource: "https://usher.example/mcp", UpdatedAt: now}); err != nil {
		t.Fatalf("PutConsent: %v", err)
	}
	// grant is the rotation to next at at, allowing repeats for
	// repeatWindow, with a record of each.
	grant := func(next string, at time.Time) store.TokenGrant {
		return store.TokenGrant{
			Refresh:    &store.RefreshToken{TokenHash: next, ExpiresAt: at.Add(time.Hour)},
			Consent:    true,
			Audit:      chained(store.AuditRecord{At: at, Kind: "oauth_token_issued", Principal: "alice", ClientID: "c", TokenJTI: next}),
			RepeatSalt: "salt-" + next, RepeatUntil: at.Add(repeatWindow),
			RepeatAudit: chained(store.AuditRecord{At: at, Kind: "oauth_token_issued", Principal: "alice", ClientID: "c", TokenJTI: "repeat-" + next}),
		}
	}
	issue := func(hash, family string) {
		t.Helper()
		mustIssue(t, s, newRefresh(hash, family, "c", "alice", now))
	}
	salt := func(hash string) string {
		t.Helper()
		tok, err := s.GetRefreshToken(ctx, hash)
		if err != nil {
			t.Fatalf("GetRefreshToken(%s): %v", hash, err)
		}
		return tok.SuccessorSalt
	}
	log := countLog(t, s)

	// The rotation keeps the successor's hash and salt on the old token.
	issue("a", "fam-a")
	old, err := s.RotateRefreshToken(ctx, "a", now, grant("a.1", now))
	if err != nil {
		t.Fatalf("RotateRefreshToken: %v", err)
	}
	if old.SuccessorHash != "a.1" || old.SuccessorSalt != "salt-a.1" || !old.RepeatUntil.Equal(now.Add(repeatWindow)) || !old.UsedAt.Equal(now) {
		t.Errorf("the rotated token = %+v, want used at %v, its successor a.1 with its salt until %v", old, now, now.Add(repeatWindow))
	}
	log.want(1, "the rotation")

	// Presented again within the window, twice: the same successor, a
	// record each, no other token.
	for i, at := range []time.Time{now.Add(time.Second), now.Add(repeatWindow - time.Microsecond)} {
		next := fmt.Sprintf("a.x%d", i)
		old, err := s.RotateRefreshToken(ctx, "a", at, grant(next, at))
		if err != nil || old.SuccessorHash != "a.1" || old.SuccessorSalt != "salt-a.1" || !old.UsedAt.Equal(now) {
			t.Errorf("repeat #%d = %+v, %v; want the token as rotated, its successor a.1", i, old, err)
		}
		if _, err := s.GetRefreshToken(ctx, next); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("repeat #%d stored the grant's own next token: %v", i, err)
		}
		log.want(1, fmt.Sprintf("repeat #%d", i))
	}
	if succ, err := s.GetRefreshToken(ctx, "a.1"); err != nil || !succ.UsedAt.IsZero() || !succ.RevokedAt.IsZero() {
		t.Errorf("the successor after the repeats = %+v, %v; want it standing, unused", succ, err)
	}
	recs, err := s.AuditRecords(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if last := recs[len(recs)-1]; last.TokenJTI != "repeat-a.x1" {
		t.Errorf("the repeat's record names %q, want the repeat's own record (repeat-a.x1)", last.TokenJTI)
	}

	// The successor's use ends the repeat and clears the salt: the old
	// token presented again is a reuse.
	if _, err := s.RotateRefreshToken(ctx, "a.1", now.Add(2*time.Second), grant("a.2", now.Add(2*time.Second))); err != nil {
		t.Fatalf("rotating the successor: %v", err)
	}
	log.want(1, "the successor's rotation")
	if got := salt("a"); got != "" {
		t.Errorf("the salt after the successor's use = %q, want it cleared", got)
	}
	at := now.Add(3 * time.Second)
	if _, err := s.RotateRefreshToken(ctx, "a", at, grant("a.y", at)); !errors.Is(err, store.ErrReused) {
		t.Errorf("the token presented again after its successor was used = %v, want ErrReused", err)
	}
	checkRevokedToken(t, s, "a.2", at)

	// At the window's end: a reuse.
	issue("b", "fam-b")
	if _, err := s.RotateRefreshToken(ctx, "b", now, grant("b.1", now)); err != nil {
		t.Fatal(err)
	}
	end := now.Add(repeatWindow)
	if _, err := s.RotateRefreshToken(ctx, "b", end, grant("b.y", end)); !errors.Is(err, store.ErrReused) {
		t.Errorf("the token presented again at its repeat's end = %v, want ErrReused", err)
	}
	checkRevokedToken(t, s, "b.1", end)

	// A rotation that allowed no repeat: a reuse at once.
	issue("c", "fam-c")
	g := grant("c.1", now)
	g.RepeatSalt, g.RepeatUntil = "", time.Time{}
	if old, err := s.RotateRefreshToken(ctx, "c", now, g); err != nil || old.SuccessorSalt != "" || !old.RepeatUntil.IsZero() {
		t.Fatalf("a rotation without repeats = %+v, %v; want no salt, no end", old, err)
	}
	at = now.Add(time.Second)
	if _, err := s.RotateRefreshToken(ctx, "c", at, grant("c.y", at)); !errors.Is(err, store.ErrReused) {
		t.Errorf("the token presented again after a rotation without repeats = %v, want ErrReused", err)
	}
	checkRevokedToken(t, s, "c.1", at)

	// The successor revoked (RFC 7009): the salt is cleared, and the old
	// token presented again is no repeat.
	issue("d", "fam-d")
	if _, err := s.RotateRefreshToken(ctx, "d", now, grant("d.1", now)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeRefreshFamily(ctx, "d.1", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := salt("d"); got != "" {
		t.Errorf("the salt after the family's revocation = %q, want it cleared", got)
	}
	if _, err := s.RotateRefreshToken(ctx, "d", at, grant("d.y", at)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the token of a revoked family presented again = %v, want a refusal", err)
	}

	// The consent revoked: its tokens with it, so the salt; the old
	// token presented again is refused.
	issue("e", "fam-e")
	if _, err := s.RotateRefreshToken(ctx, "e", now, grant("e.1", now)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeConsent(ctx, "alice", "c", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := salt("e"); got != "" {
		t.Errorf("the salt after the consent's revocation = %q, want it cleared", got)
	}
	if _, err := s.RotateRefreshToken(ctx, "e", at, grant("e.y", at)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the token presented again after the consent's revocation = %v, want a refusal", err)
	}
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "c", Scope: "mcp:invoke",
		Resource: "https://usher.example/mcp", UpdatedAt: at}); err != nil {
		t.Fatalf("PutConsent: %v", err)
	}
	log.reset()

	// A repeat the grant refuses (here: it requires a consent that bob
	// never gave) is refused as a rotation would be: no reuse, nothing
	// written, the successor standing.
	mustIssue(t, s, newRefresh("e2", "fam-e2", "c", "bob", now))
	g = grant("e2.1", now)
	g.Consent = false
	if _, err := s.RotateRefreshToken(ctx, "e2", now, g); err != nil {
		t.Fatal(err)
	}
	log.want(1, "a rotation without consent")
	if _, err := s.RotateRefreshToken(ctx, "e2", at, grant("e2.y", at)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a repeat without the consent its grant requires = %v, want ErrNotFound", err)
	}
	log.want(0, "a refused repeat")
	g = grant("e2.2", at)
	g.Consent = false
	if _, err := s.RotateRefreshToken(ctx, "e2.1", at, g); err != nil {
		t.Errorf("rotating the successor after a refused repeat: %v", err)
	}
	log.want(1, "the successor's rotation")

	// The sweep clears the salts whose repeat ended, and only those.
	issue("f", "fam-f")
	if _, err := s.RotateRefreshToken(ctx, "f", now, grant("f.1", now)); err != nil {
		t.Fatal(err)
	}
	log.want(1, "a rotation")
	if _, err := s.EndRefreshRepeats(ctx, now.Add(repeatWindow-time.Microsecond)); err != nil {
		t.Fatalf("EndRefreshRepeats: %v", err)
	}
	if salt("f") == "" {
		t.Error("EndRefreshRepeats before the repeat's end cleared its salt")
	}
	if n, err := s.EndRefreshRepeats(ctx, now.Add(repeatWindow)); err != nil || n < 1 {
		t.Errorf("EndRefreshRepeats at the repeat's end = %d, %v; want at least the one", n, err)
	}
	if got := salt("f"); got != "" {
		t.Errorf("the salt after EndRefreshRepeats = %q, want it cleared", got)
	}
	if _, err := s.EndRefreshRepeats(ctx, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndRefreshRepeats at the zero time = %v, want ErrInvalid", err)
	}

	// A repeat needs its salt and an end after the rotation.
	issue("g", "fam-g")
	for name, f := range map[string]func(*store.TokenGrant){
		"a salt and no end":      func(g *store.TokenGrant) { g.RepeatUntil = time.Time{} },
		"an end and no salt":     func(g *store.TokenGrant) { g.RepeatSalt = "" },
		"an end at the rotation": func(g *store.TokenGrant) { g.RepeatUntil = now },
		"a salt too long":        func(g *store.TokenGrant) { g.RepeatSalt = strings.Repeat("s", 257) },
	} {
		g := grant("g.1", now)
		f(&g)
		if old, err := s.RotateRefreshToken(ctx, "g", now, g); !errors.Is(err, store.ErrInvalid) || !old.UsedAt.IsZero() {
			t.Errorf("a rotation with %s = %+v, %v; want ErrInvalid, nothing written", name, old, err)
		}
	}
	log.want(0, "the refused rotations")

	// Rotations of one token at once: one rotates it, the others are its
	// repeats; the family stands, and the successor rotates.
	issue("h", "fam-h")
	const n = 6
	olds := make([]store.RefreshToken, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { olds[i], errs[i] = s.RotateRefreshToken(ctx, "h", now, grant(fmt.Sprintf("h.%d", i), now)) })
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		if err != nil {
			t.Errorf("rotation #%d of one token at once: %v, want it rotated or repeated", i, err)
			continue
		}
		if winner == "" {
			winner = olds[i].SuccessorHash
		} else if olds[i].SuccessorHash != winner {
			t.Errorf("rotation #%d answered successor %s, another %s", i, olds[i].SuccessorHash, winner)
		}
	}
	stored := 0
	for i := range n {
		if _, err := s.GetRefreshToken(ctx, fmt.Sprintf("h.%d", i)); err == nil {
			stored++
		}
	}
	if stored != 1 {
		t.Errorf("rotations of one token at once stored %d successors, want 1", stored)
	}
	log.want(n, "the rotations at once")
	if winner != "" {
		if _, err := s.RotateRefreshToken(ctx, winner, now.Add(time.Second), grant("h.next", now.Add(time.Second))); err != nil {
			t.Errorf("rotating the successor after the repeats: %v", err)
		}
	}
}

package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testOAuthGrants checks that a grant at the token endpoint is one
// transaction: the code's redemption or the old token's use, the refresh
// token issued, the consent's use and the audit record commit together,
// and a refusal or a failure between them writes what the contract says
// and nothing more.
func testOAuthGrants(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "c", Scope: "mcp:invoke",
		Resource: "https://usher.example/mcp", UpdatedAt: now.Add(-time.Hour)}); err != nil {
		t.Fatalf("PutConsent: %v", err)
	}
	code := func(hash, client string) {
		t.Helper()
		if err := s.CreateAuthorizationCode(ctx, newCode(hash, client, now)); err != nil {
			t.Fatalf("CreateAuthorizationCode(%s): %v", hash, err)
		}
	}
	record := func(jti string, at time.Time) func(store.AuditHead) (store.AuditRecord, error) {
		return chained(store.AuditRecord{At: at, Kind: "oauth_token_issued", Principal: "alice", ClientID: "c", TokenJTI: jti})
	}
	errBuild := errors.New("hashing failed")
	failing := func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
	first := func(hash string, at time.Time) *store.RefreshToken {
		return &store.RefreshToken{TokenHash: hash, ExpiresAt: at.Add(time.Hour), FamilyExpiresAt: at.Add(24 * time.Hour)}
	}
	missing := func(hash, after string) {
		t.Helper()
		if _, err := s.GetRefreshToken(ctx, hash); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after %s GetRefreshToken(%s) = %v, want ErrNotFound (nothing issued)", after, hash, err)
		}
	}
	lastUsed := func(at time.Time, after string) {
		t.Helper()
		cs, err := s.GetConsent(ctx, "alice", "c")
		if err != nil {
			t.Fatalf("GetConsent: %v", err)
		}
		cl, err := s.GetOAuthClient(ctx, "c")
		if err != nil {
			t.Fatalf("GetOAuthClient: %v", err)
		}
		if !cs.LastUsedAt.Equal(at) || !cl.LastUsedAt.Equal(at) {
			t.Errorf("after %s the consent and the client were last used at %v and %v, want %v",
				after, cs.LastUsedAt, cl.LastUsedAt, at)
		}
	}
	log := countLog(t, s)

	// A code grant: the code, the family's first token, the consent's use
	// and the record in one commit.
	code("code-1", "c")
	at := now.Add(time.Second)
	got, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-1", at,
		&store.TokenGrant{Refresh: first("rt-1", at), Consent: true, Audit: record("jti-1", at)})
	if err != nil {
		t.Fatalf("RedeemAuthorizationCode with a grant: %v", err)
	}
	if !got.UsedAt.Equal(at) || got.FamilyID != "fam-1" || !got.IssuedAt.Equal(at) {
		t.Errorf("RedeemAuthorizationCode returned %+v; want the code used and its tokens issued at %v in fam-1", got, at)
	}
	tok, err := s.GetRefreshToken(ctx, "rt-1")
	if err != nil {
		t.Fatalf("GetRefreshToken of the grant's token: %v", err)
	}
	if tok.FamilyID != "fam-1" || tok.ClientID != "c" || tok.Principal != "alice" || tok.Resource != got.Resource ||
		tok.Scope != got.Scope || !bytes.Equal(tok.Subject, got.Subject) || !tok.CreatedAt.Equal(at) {
		t.Errorf("the grant's token is %+v; want the code's family, client, principal, subject, resource and scope, created at %v", tok, at)
	}
	lastUsed(at, "a code grant")
	log.want(1, "a code grant")
	if got, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-1b", at, &store.TokenGrant{Consent: true, Audit: record("jti-x", at)}); !errors.Is(err, store.ErrReused) || !got.IssuedAt.Equal(at) {
		t.Errorf("a code grant of a used code = %+v, %v; want ErrReused, the code's tokens issued at %v", got, err, at)
	}
	checkRevokedToken(t, s, "rt-1", at)
	log.want(0, "a replayed code grant")

	// The record's build fails: nothing is written, the code not used.
	code("code-3", "c")
	at3 := at.Add(3 * time.Second)
	if _, err := s.RedeemAuthorizationCode(ctx, "code-3", "fam-3", at3,
		&store.TokenGrant{Refresh: first("rt-3", at3), Consent: true, Audit: failing}); err != errBuild {
		t.Errorf("RedeemAuthorizationCode with a failing record = %v, want the build's error as is", err)
	}
	missing("rt-3", "a code grant whose record failed")
	lastUsed(at, "a code grant whose record failed")
	log.want(0, "a code grant whose record failed")
	if _, err := s.RedeemAuthorizationCode(ctx, "code-3", "fam-3", at3,
		&store.TokenGrant{Refresh: first("rt-3", at3), Consent: true, Audit: record("jti-3", at3)}); err != nil {
		t.Errorf("RedeemAuthorizationCode after a failed record: %v; want the code unused and redeemed now", err)
	}
	lastUsed(at3, "the code grant retried")
	log.want(1, "the code grant retried")

	// A grant needs a consent that stands, when it asks for one (none:
	// ErrNotFound; revoked: ErrConflict), and a client that stands. The
	// code is used up either way, and nothing else is written.
	mustOAuthClient(t, s, "d")
	refused := func(hash, client string, g store.TokenGrant, want error, what string) {
		t.Helper()
		code(hash, client)
		g.Audit = record("jti-"+hash, at)
		if _, err := s.RedeemAuthorizationCode(ctx, hash, "fam-"+hash, at, &g); !errors.Is(err, want) || errors.Is(err, store.ErrReused) {
			t.Errorf("a code grant %s = %v, want %v", what, err, want)
		}
		missing("rt-"+hash, "a code grant "+what)
		if _, err := s.RedeemAuthorizationCode(ctx, hash, "fam-"+hash+"b", at, nil); !errors.Is(err, store.ErrReused) {
			t.Errorf("redeeming a code refused %s again = %v, want ErrReused (it stays used)", what, err)
		}
	}
	refused("code-4", "d", store.TokenGrant{Refresh: first("rt-code-4", at), Consent: true}, store.ErrNotFound, "with no consent")
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "d", Scope: "mcp:invoke",
		Resource: "https://usher.example/mcp", UpdatedAt: now}); err != nil {
		t.Fatalf("PutConsent: %v", err)
	}
	if err := s.RevokeConsent(ctx, "alice", "d", now); err != nil {
		t.Fatalf("RevokeConsent: %v", err)
	}
	refused("code-5", "d", store.TokenGrant{Refresh: first("rt-code-5", at), Consent: true}, store.ErrConflict, "under a revoked consent")
	refused("code-6", "d", store.TokenGrant{Refresh: first("rt-code-6", at)}, store.ErrConflict, "under a revoked consent not asked for")
	mustOAuthClient(t, s, "e")
	if err := s.RevokeOAuthClient(ctx, "e", now); err != nil {
		t.Fatalf("RevokeOAuthClient: %v", err)
	}
	refused("code-7", "e", store.TokenGrant{Refresh: first("rt-code-7", at)}, store.ErrConflict, "of a revoked client")
	// A consent given again to a revoked client does not revive it.
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "e", Scope: "mcp:invoke",
		Resource: "https://usher.example/mcp", UpdatedAt: now}); err != nil {
		t.Fatalf("PutConsent: %v", err)
	}
	refused("code-8", "e", store.TokenGrant{Refresh: first("rt-code-8", at), Consent: true}, store.ErrConflict, "of a revoked client with a consent")
	log.want(0, "the refused code grants")

	// A rotation: the old token's use, the next token, the consent's use
	// and the record in one commit.
	at4 := at3.Add(time.Second)
	next := nextRefresh("rt-3b", at4)
	old, err := s.RotateRefreshToken(ctx, "rt-3", at4, store.TokenGrant{Refresh: &next, Consent: true, Audit: record("jti-3b", at4)})
	if err != nil || !old.UsedAt.Equal(at4) {
		t.Fatalf("RotateRefreshToken with a grant = %+v, %v; want the old token used at %v", old, err, at4)
	}
	if tok, err := s.GetRefreshToken(ctx, "rt-3b"); err != nil || tok.FamilyID != "fam-3" || !tok.FamilyExpiresAt.Equal(old.FamilyExpiresAt) {
		t.Errorf("the rotation's token = %+v, %v; want it in fam-3, ending with its family", tok, err)
	}
	lastUsed(at4, "a rotation")
	log.want(1, "a rotation")

	// The record fails, or there is no next token: nothing is written,
	// the token stays unused.
	at5 := at4.Add(time.Second)
	next = nextRefresh("rt-3c", at5)
	for name, c := range map[string]struct {
		g    store.TokenGrant
		want func(error) bool
	}{
		"a failing record": {store.TokenGrant{Refresh: &next, Consent: true, Audit: failing}, func(err error) bool { return err == errBuild }},
		"no next token":    {store.TokenGrant{Consent: true}, func(err error) bool { return errors.Is(err, store.ErrInvalid) }},
	} {
		old, err := s.RotateRefreshToken(ctx, "rt-3b", at5, c.g)
		if !c.want(err) || !old.UsedAt.IsZero() {
			t.Errorf("RotateRefreshToken with %s = %+v, %v; want its error, the token unused", name, old, err)
		}
		missing("rt-3c", "a rotation with "+name)
	}
	lastUsed(at4, "the refused rotations")
	log.want(0, "the refused rotations")
	if _, err := s.RotateRefreshToken(ctx, "rt-3b", at5, store.TokenGrant{Refresh: &next, Consent: true, Audit: record("jti-3c", at5)}); err != nil {
		t.Errorf("RotateRefreshToken after the refusals: %v", err)
	}
	lastUsed(at5, "the rotation after the refusals")
	log.want(1, "the rotation after the refusals")

	// A rotation that asks for a consent there is not: nothing written.
	mustOAuthClient(t, s, "f")
	mustIssue(t, s, newRefresh("rt-f", "fam-f", "f", "alice", now))
	next = nextRefresh("rt-f2", at5)
	if old, err := s.RotateRefreshToken(ctx, "rt-f", at5, store.TokenGrant{Refresh: &next, Consent: true}); !errors.Is(err, store.ErrNotFound) || !old.UsedAt.IsZero() {
		t.Errorf("a rotation with no consent = %+v, %v; want ErrNotFound, the token unused", old, err)
	}
	missing("rt-f2", "a rotation with no consent")
}

// testOAuthGrantRace runs whole grants, with their consent and record, at
// once: of the code grants of one code exactly one issues, the others are
// replays that revoke what it issued; of the rotations of one token
// exactly one issues, the others are reuses that revoke the family; and a
// consent revoked while grants are under way leaves no token standing
// that it should have revoked. Each issued token has its one record.
func testOAuthGrantRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	consent := func() {
		t.Helper()
		if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "c", Scope: "mcp:invoke",
			Resource: "https://usher.example/mcp", UpdatedAt: now}); err != nil {
			t.Fatalf("PutConsent: %v", err)
		}
	}
	consent()
	grant := func(hash string) store.TokenGrant {
		return store.TokenGrant{
			Refresh: &store.RefreshToken{TokenHash: hash, ExpiresAt: now.Add(time.Hour), FamilyExpiresAt: now.Add(24 * time.Hour)},
			Consent: true,
			Audit:   chained(store.AuditRecord{At: now, Kind: "oauth_token_issued", Principal: "alice", ClientID: "c", TokenJTI: hash}),
		}
	}
	records := auditCount(t, s)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)

	// One code, n grants.
	if err := s.CreateAuthorizationCode(ctx, newCode("code", "c", now)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wg.Go(func() {
			g := grant(fmt.Sprintf("rt-%d", i))
			_, errs[i] = s.RedeemAuthorizationCode(ctx, "code", fmt.Sprintf("fam-%d", i), now, &g)
		})
	}
	wg.Wait()
	// The replays revoked the winner's token.
	winner := onlyWinner(t, "code grant", errs, store.ErrReused)
	checkRevokedToken(t, s, fmt.Sprintf("rt-%d", winner), now)
	records++
	if got := auditCount(t, s); got != records {
		t.Errorf("after the code grants the log has %d records, want %d (the winner's)", got, records)
	}

	// One token, n rotations.
	first := store.RefreshToken{TokenHash: "rt", FamilyID: "fam", ClientID: "c", Principal: "alice",
		Resource: "https://usher.example/mcp", Scope: "mcp:invoke", CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), FamilyExpiresAt: now.Add(24 * time.Hour)}
	mustIssue(t, s, first)
	for i := range n {
		wg.Go(func() { _, errs[i] = s.RotateRefreshToken(ctx, "rt", now, grant(fmt.Sprintf("rt.%d", i))) })
	}
	wg.Wait()
	winner = onlyWinner(t, "rotation", errs, store.ErrReused)
	checkRevokedToken(t, s, fmt.Sprintf("rt.%d", winner), now)
	records++
	if got := auditCount(t, s); got != records {
		t.Errorf("after the rotations the log has %d records, want %d (the winner's)", got, records)
	}

	// Grants beside the consent's revocation: a token issued stands only
	// if its grant committed before the revocation, which then revoked
	// it; none stands after.
	for i := range 8 {
		consent()
		hash := fmt.Sprintf("code-%d", i)
		if err := s.CreateAuthorizationCode(ctx, newCode(hash, "c", now)); err != nil {
			t.Fatal(err)
		}
		var grantErr, revokeErr error
		wg.Go(func() {
			g := grant("rt-r" + hash)
			_, grantErr = s.RedeemAuthorizationCode(ctx, hash, "fam-r"+hash, now, &g)
		})
		wg.Go(func() { revokeErr = s.RevokeConsent(ctx, "alice", "c", now) })
		wg.Wait()
		if revokeErr != nil {
			t.Fatalf("RevokeConsent #%d: %v", i, revokeErr)
		}
		switch {
		case grantErr == nil:
			checkRevokedToken(t, s, "rt-r"+hash, now)
		case errors.Is(grantErr, store.ErrConflict):
			if _, err := s.GetRefreshToken(ctx, "rt-r"+hash); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a grant refused beside revocation #%d left its token: %v", i, err)
			}
		default:
			t.Errorf("a grant beside revocation #%d = %v, want it to succeed or ErrConflict", i, grantErr)
		}
	}
}

// onlyWinner checks that exactly one of errs is nil and the others match
// want, and returns the winner's index; with no winner it ends the test.
func onlyWinner(t *testing.T, what string, errs []error, want error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("%ss #%d and #%d both succeeded", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, want):
			t.Errorf("%s #%d: %v, want %v", what, i, err, want)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s succeeded", what)
	}
	return winner
}

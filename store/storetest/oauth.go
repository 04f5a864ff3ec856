package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// oauthNow is a time for the OAuth tests, as the store returns times.
func oauthNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// mustOAuthClient creates a public registered client.
func mustOAuthClient(t *testing.T, s store.Store, id string) store.OAuthClient {
	t.Helper()
	c, err := s.CreateOAuthClient(t.Context(), store.OAuthClient{
		ID: id, Kind: store.OAuthClientRegistered, Name: id, RedirectURIs: []string{"https://" + id + ".example/cb"},
		GrantTypes: []string{"authorization_code", "refresh_token"}, AuthMethod: "none",
	})
	if err != nil {
		t.Fatalf("CreateOAuthClient(%s): %v", id, err)
	}
	return c
}

// newRefresh is a first token of a family, valid for an hour from now.
func newRefresh(hash, family, client, principal string, now time.Time) store.RefreshToken {
	return store.RefreshToken{TokenHash: hash, FamilyID: family, ClientID: client, Principal: principal,
		Subject: json.RawMessage(`{"tenant":"t1"}`), Resource: "https://usher.example/mcp", Scope: "mcp:invoke",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), FamilyExpiresAt: now.Add(24 * time.Hour)}
}

// nextRefresh is the successor of a rotation: the caller's half (the
// rest is the old token's).
func nextRefresh(hash string, now time.Time) store.RefreshToken {
	return store.RefreshToken{TokenHash: hash, ExpiresAt: now.Add(time.Hour)}
}

// rotate rotates oldHash to next, with no audit record and no consent
// required.
func rotate(ctx context.Context, s store.Store, oldHash string, next store.RefreshToken, now time.Time) (store.RefreshToken, error) {
	return s.RotateRefreshToken(ctx, oldHash, now, store.TokenGrant{Refresh: &next})
}

func mustIssue(t *testing.T, s store.Store, tok store.RefreshToken) {
	t.Helper()
	if err := s.IssueRefreshToken(t.Context(), tok); err != nil {
		t.Fatalf("IssueRefreshToken(%s): %v", tok.TokenHash, err)
	}
}

// checkRevokedToken fails the test unless the token hash no longer
// rotates because it is revoked. A rotation refused so writes nothing.
func checkRevokedToken(t *testing.T, s store.Store, hash string, now time.Time) {
	t.Helper()
	old, err := rotate(t.Context(), s, hash, nextRefresh(hash+"-probe", now), now)
	if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrReused) || old.RevokedAt.IsZero() {
		t.Errorf("rotating %s: %+v, %v; want it revoked (ErrConflict)", hash, old, err)
	}
}

func testOAuthClients(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	// Metadata is kept byte for byte: spacing and key order included.
	metadata := json.RawMessage(`{ "redirect_uris": ["https://a.example/cb"],   "client_name": "A" }`)
	a, err := s.CreateOAuthClient(ctx, store.OAuthClient{
		ID: "client-a", Kind: store.OAuthClientRegistered, Name: "A", RedirectURIs: []string{"https://a.example/cb", "http://127.0.0.1/cb"},
		GrantTypes: []string{"authorization_code"}, AuthMethod: "client_secret_basic", SecretHash: "5e3c",
		Metadata: metadata, RegisteredBy: "192.0.2.1", CreatedAt: now.Add(-time.Hour),
	})
	if err != nil {
		t.Fatalf("CreateOAuthClient: %v", err)
	}
	want := store.OAuthClient{ID: "client-a", Kind: store.OAuthClientRegistered, Name: "A",
		RedirectURIs: []string{"https://a.example/cb", "http://127.0.0.1/cb"}, GrantTypes: []string{"authorization_code"},
		AuthMethod: "client_secret_basic", SecretHash: "5e3c", Metadata: metadata, RegisteredBy: "192.0.2.1",
		CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("CreateOAuthClient returned\n%+v, want\n%+v", a, want)
	}
	if got, err := s.GetOAuthClient(ctx, "client-a"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("GetOAuthClient = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.GetOAuthClient(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetOAuthClient of an unknown id = %v, want ErrNotFound", err)
	}
	if _, err := s.CreateOAuthClient(ctx, store.OAuthClient{ID: "client-a", Kind: store.OAuthClientConfigured, AuthMethod: "none"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateOAuthClient of a taken id = %v, want ErrConflict", err)
	}
	b, err := s.CreateOAuthClient(ctx, store.OAuthClient{ID: "client-b", Kind: store.OAuthClientConfigured, AuthMethod: "private_key_jwt"})
	if err != nil {
		t.Fatalf("CreateOAuthClient(b): %v", err)
	}
	checkStoreTime(t, "OAuthClient.CreatedAt set by the store", b.CreatedAt)
	if b.UpdatedAt != b.CreatedAt || b.Metadata != nil || b.RedirectURIs != nil || !b.LastUsedAt.IsZero() || !b.RevokedAt.IsZero() {
		t.Errorf("a client with no optional fields came back as %+v", b)
	}

	// Registrations per address, for the rate limit.
	for i, at := range []time.Duration{-30 * time.Minute, -10 * time.Minute} {
		if _, err := s.CreateOAuthClient(ctx, store.OAuthClient{ID: fmt.Sprintf("dcr-%d", i), Kind: store.OAuthClientRegistered,
			AuthMethod: "none", RegisteredBy: "192.0.2.1", CreatedAt: now.Add(at)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		by    string
		since time.Time
		want  int
	}{
		{"192.0.2.1", now.Add(-2 * time.Hour), 3},
		{"192.0.2.1", now.Add(-time.Hour), 3}, // since is inclusive
		{"192.0.2.1", now.Add(-20 * time.Minute), 1},
		{"192.0.2.1", now, 0},
		{"198.51.100.7", now.Add(-2 * time.Hour), 0},
	} {
		if n, err := s.CountOAuthRegistrations(ctx, tc.by, tc.since); err != nil || n != tc.want {
			t.Errorf("CountOAuthRegistrations(%s, %v) = %d, %v; want %d", tc.by, tc.since, n, err, tc.want)
		}
	}
	if _, err := s.CountOAuthRegistrations(ctx, "", now); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CountOAuthRegistrations of no address = %v, want ErrInvalid", err)
	}

	// Metadata documents: created, then updated in place.
	docID := "https://app.example/oauth/client.json"
	doc, err := s.PutMetadataClient(ctx, store.OAuthClient{ID: docID, Name: "App", RedirectURIs: []string{"https://app.example/cb"},
		AuthMethod: "none", Metadata: json.RawMessage(`{"client_id":"` + docID + `"}`), CreatedAt: now.Add(-time.Minute)})
	if err != nil {
		t.Fatalf("PutMetadataClient: %v", err)
	}
	if doc.Kind != store.OAuthClientMetadataDocument || doc.Name != "App" || !doc.CreatedAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("PutMetadataClient created %+v", doc)
	}
	if err := s.RevokeOAuthClient(ctx, docID, now); err != nil {
		t.Fatalf("RevokeOAuthClient(doc): %v", err)
	}
	later := now.Add(time.Minute)
	doc2, err := s.PutMetadataClient(ctx, store.OAuthClient{ID: docID, Kind: store.OAuthClientMetadataDocument, Name: "App 2",
		RedirectURIs: []string{"https://app.example/cb2"}, GrantTypes: []string{"authorization_code"}, AuthMethod: "private_key_jwt",
		Metadata: json.RawMessage(`{"client_id": "` + docID + `", "v": 2}`), CreatedAt: later, UpdatedAt: later})
	if err != nil {
		t.Fatalf("PutMetadataClient again: %v", err)
	}
	wantDoc := doc
	wantDoc.Name, wantDoc.RedirectURIs, wantDoc.GrantTypes, wantDoc.AuthMethod = "App 2", []string{"https://app.example/cb2"}, []string{"authorization_code"}, "private_key_jwt"
	wantDoc.Metadata, wantDoc.UpdatedAt, wantDoc.RevokedAt = json.RawMessage(`{"client_id": "`+docID+`", "v": 2}`), later, now
	if !reflect.DeepEqual(doc2, wantDoc) {
		t.Errorf("PutMetadataClient updated to\n%+v, want\n%+v (CreatedAt and the revocation kept)", doc2, wantDoc)
	}
	if _, err := s.PutMetadataClient(ctx, store.OAuthClient{ID: "client-a", AuthMethod: "none"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutMetadataClient over a registered client = %v, want ErrConflict", err)
	}
	if got, _ := s.GetOAuthClient(ctx, "client-a"); !reflect.DeepEqual(got, want) {
		t.Errorf("a refused PutMetadataClient changed the registered client: %+v", got)
	}
	for name, c := range map[string]store.OAuthClient{
		"a registered kind":  {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none"},
		"a registering addr": {ID: "x", AuthMethod: "none", RegisteredBy: "192.0.2.1"},
		"a secret":           {ID: "x", AuthMethod: "client_secret_basic", SecretHash: "ab"},
		"no auth method":     {ID: "x"},
	} {
		if _, err := s.PutMetadataClient(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutMetadataClient with %s = %v, want ErrInvalid", name, err)
		}
	}

	list, err := s.ListOAuthClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	if wantIDs := []string{"client-a", "dcr-0", "dcr-1", docID, "client-b"}; !reflect.DeepEqual(ids, wantIDs) {
		t.Errorf("ListOAuthClients = %v, want %v (by CreatedAt)", ids, wantIDs)
	}

	// Revocation keeps the first time.
	if err := s.RevokeOAuthClient(ctx, "client-a", now); err != nil {
		t.Fatalf("RevokeOAuthClient: %v", err)
	}
	if err := s.RevokeOAuthClient(ctx, "client-a", later); err != nil {
		t.Fatalf("RevokeOAuthClient again: %v", err)
	}
	if got, _ := s.GetOAuthClient(ctx, "client-a"); !got.RevokedAt.Equal(now) {
		t.Errorf("revoked twice: RevokedAt = %v, want the first, %v", got.RevokedAt, now)
	}
	if err := s.RevokeOAuthClient(ctx, "nope", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeOAuthClient of an unknown id = %v, want ErrNotFound", err)
	}
	if err := s.RevokeOAuthClient(ctx, "client-b", time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RevokeOAuthClient at the zero time = %v, want ErrInvalid", err)
	}

	for name, c := range map[string]store.OAuthClient{
		"no id":                    {Kind: store.OAuthClientRegistered, AuthMethod: "none"},
		"no kind":                  {ID: "x", AuthMethod: "none"},
		"an unknown kind":          {ID: "x", Kind: "dynamic", AuthMethod: "none"},
		"an unknown auth method":   {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "client_secret_post"},
		"basic without a secret":   {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "client_secret_basic"},
		"none with a secret":       {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", SecretHash: "ab"},
		"a document with a secret": {ID: "x", Kind: store.OAuthClientMetadataDocument, AuthMethod: "client_secret_basic", SecretHash: "ab"},
		"bad metadata":             {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", Metadata: json.RawMessage(`{`)},
		"an empty redirect URI":    {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", RedirectURIs: []string{""}},
		"NUL in the name":          {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", Name: "a\x00"},
		"invalid UTF-8 in the id":  {ID: "x\xff", Kind: store.OAuthClientRegistered, AuthMethod: "none"},
		"already revoked":          {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", RevokedAt: now},
		"already used":             {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", LastUsedAt: now},
		"year 10000":               {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"updated before created":   {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none", CreatedAt: now, UpdatedAt: now.Add(-time.Second)},
	} {
		if _, err := s.CreateOAuthClient(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateOAuthClient with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetOAuthClient(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid client was stored: %v", err)
	}
}

// newCode is a code of client for alice, valid for a minute from now.
func newCode(hash, client string, now time.Time) store.AuthorizationCode {
	return store.AuthorizationCode{CodeHash: hash, ClientID: client, Principal: "alice",
		Subject: json.RawMessage(`{"tenant": "t1",  "groups": ["a"]}`), RedirectURI: "https://c.example/cb",
		CodeChallenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", Resource: "https://usher.example/mcp",
		Scope: "mcp:invoke", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
}

func testAuthorizationCodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	code := newCode("code-1", "c", now)
	if err := s.CreateAuthorizationCode(ctx, code); err != nil {
		t.Fatalf("CreateAuthorizationCode: %v", err)
	}
	if err := s.CreateAuthorizationCode(ctx, newCode("code-1", "c", now)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateAuthorizationCode of a taken hash = %v, want ErrConflict", err)
	}
	if err := s.CreateAuthorizationCode(ctx, newCode("code-x", "nope", now)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateAuthorizationCode for an unknown client = %v, want ErrNotFound", err)
	}

	at := now.Add(10 * time.Second)
	got, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-1", at, nil)
	if err != nil {
		t.Fatalf("RedeemAuthorizationCode: %v", err)
	}
	want := code
	want.UsedAt, want.FamilyID = at, "fam-1"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RedeemAuthorizationCode returned\n%+v, want\n%+v (the subject byte for byte)", got, want)
	}
	mustIssue(t, s, newRefresh("rt-1", "fam-1", "c", "alice", at))

	// A replay revokes what the code issued, and the family can be issued
	// no more.
	replayAt := at.Add(time.Second)
	got, err = s.RedeemAuthorizationCode(ctx, "code-1", "fam-2", replayAt, nil)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RedeemAuthorizationCode of a used code = %v, want ErrConflict", err)
	}
	want.ReplayedAt = replayAt
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a replay returned\n%+v, want\n%+v (the first family, ReplayedAt set)", got, want)
	}
	checkRevokedToken(t, s, "rt-1", replayAt)
	if err := s.IssueRefreshToken(ctx, newRefresh("rt-2", "fam-1", "c", "alice", replayAt)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("IssueRefreshToken to a replayed code's family = %v, want ErrConflict", err)
	}
	if got, err := s.RedeemAuthorizationCode(ctx, "code-1", "fam-3", replayAt.Add(time.Second), nil); !errors.Is(err, store.ErrConflict) || !got.ReplayedAt.Equal(replayAt) || !got.IssuedAt.IsZero() {
		t.Errorf("a second replay = %+v, %v; want ErrConflict with the first ReplayedAt, no tokens issued (none was granted)", got, err)
	}

	// An expired code is refused, and nothing is written.
	if err := s.CreateAuthorizationCode(ctx, newCode("code-2", "c", now)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RedeemAuthorizationCode(ctx, "code-2", "fam-4", now.Add(time.Minute), nil); !errors.Is(err, store.ErrConflict) || !got.UsedAt.IsZero() {
		t.Errorf("RedeemAuthorizationCode at the code's expiry = %+v, %v; want it unused, ErrConflict", got, err)
	}
	if got, err := s.RedeemAuthorizationCode(ctx, "code-2", "fam-4", now.Add(time.Second), nil); err != nil || got.FamilyID != "fam-4" {
		t.Errorf("RedeemAuthorizationCode before the expiry, after a refusal at it = %+v, %v; want it redeemed", got, err)
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "nope", "fam-5", now, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RedeemAuthorizationCode of an unknown code = %v, want ErrNotFound", err)
	}
	for name, call := range map[string]func() error{
		"no family": func() error { _, err := s.RedeemAuthorizationCode(ctx, "code-2", "", now, nil); return err },
		"zero time": func() error { _, err := s.RedeemAuthorizationCode(ctx, "code-2", "f", time.Time{}, nil); return err },
	} {
		if err := call(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RedeemAuthorizationCode with %s = %v, want ErrInvalid", name, err)
		}
	}

	mutate := func(f func(*store.AuthorizationCode)) store.AuthorizationCode {
		c := newCode("code-bad", "c", now)
		f(&c)
		return c
	}
	for name, c := range map[string]store.AuthorizationCode{
		"no hash":         mutate(func(c *store.AuthorizationCode) { c.CodeHash = "" }),
		"no client":       mutate(func(c *store.AuthorizationCode) { c.ClientID = "" }),
		"no principal":    mutate(func(c *store.AuthorizationCode) { c.Principal = "" }),
		"no redirect URI": mutate(func(c *store.AuthorizationCode) { c.RedirectURI = "" }),
		"no challenge":    mutate(func(c *store.AuthorizationCode) { c.CodeChallenge = "" }),
		"no resource":     mutate(func(c *store.AuthorizationCode) { c.Resource = "" }),
		"no expiry":       mutate(func(c *store.AuthorizationCode) { c.ExpiresAt = time.Time{} }),
		"expired":         mutate(func(c *store.AuthorizationCode) { c.ExpiresAt = c.CreatedAt }),
		"used":            mutate(func(c *store.AuthorizationCode) { c.UsedAt = now }),
		"a family":        mutate(func(c *store.AuthorizationCode) { c.FamilyID = "f" }),
		"bad subject":     mutate(func(c *store.AuthorizationCode) { c.Subject = json.RawMessage(`nope`) }),
		"NUL in scope":    mutate(func(c *store.AuthorizationCode) { c.Scope = "a\x00" }),
	} {
		if err := s.CreateAuthorizationCode(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateAuthorizationCode with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "code-bad", "f", now, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid code was stored: %v", err)
	}
}

// testAuthorizationCodeRace redeems one code from many goroutines: exactly
// one succeeds; the others are replays, and revoke its family, even while
// its first token is being issued.
func testAuthorizationCodeRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	if err := s.CreateAuthorizationCode(ctx, newCode("code", "c", now)); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	codes := make([]store.AuthorizationCode, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { codes[i], errs[i] = s.RedeemAuthorizationCode(ctx, "code", fmt.Sprintf("fam-%d", i), now, nil) })
	}
	wg.Wait()
	winner := onlyWinner(t, "redemption", errs, store.ErrConflict)
	for i, c := range codes {
		if errs[i] != nil && (c.FamilyID != codes[winner].FamilyID || c.ReplayedAt.IsZero()) {
			t.Errorf("replay #%d returned %+v, want the winner's family %s, replayed", i, c, codes[winner].FamilyID)
		}
	}
	// The code was replayed: the winner's family gets no token.
	if err := s.IssueRefreshToken(ctx, newRefresh("rt", codes[winner].FamilyID, "c", "alice", now)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("IssueRefreshToken after the replays = %v, want ErrConflict", err)
	}

	// A replay while the redemption's first token is being issued: the
	// token is refused, or revoked.
	for i := range 10 {
		hash, family, token := fmt.Sprintf("code-%d", i), fmt.Sprintf("f-%d", i), fmt.Sprintf("rt-%d", i)
		if err := s.CreateAuthorizationCode(ctx, newCode(hash, "c", now)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RedeemAuthorizationCode(ctx, hash, family, now, nil); err != nil {
			t.Fatal(err)
		}
		var issueErr, replayErr error
		wg.Go(func() { issueErr = s.IssueRefreshToken(ctx, newRefresh(token, family, "c", "alice", now)) })
		wg.Go(func() { _, replayErr = s.RedeemAuthorizationCode(ctx, hash, "f-evil", now, nil) })
		wg.Wait()
		if !errors.Is(replayErr, store.ErrConflict) {
			t.Errorf("replay #%d = %v, want ErrConflict", i, replayErr)
		}
		switch {
		case issueErr == nil:
			checkRevokedToken(t, s, token, now)
		case !errors.Is(issueErr, store.ErrConflict):
			t.Errorf("IssueRefreshToken beside replay #%d = %v, want it refused (ErrConflict) or revoked", i, issueErr)
		}
	}
}

func testRefreshTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	first := newRefresh("rt-1", "fam", "c", "alice", now)
	mustIssue(t, s, first)
	if err := s.IssueRefreshToken(ctx, newRefresh("rt-1", "fam-x", "c", "bob", now)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("IssueRefreshToken of a taken hash = %v, want ErrConflict", err)
	}
	if err := s.IssueRefreshToken(ctx, newRefresh("rt-x", "fam-x", "nope", "bob", now)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("IssueRefreshToken for an unknown client = %v, want ErrNotFound", err)
	}

	got, err := s.GetRefreshToken(ctx, "rt-1")
	if err != nil || !reflect.DeepEqual(got, first) {
		t.Errorf("GetRefreshToken = %+v, %v; want\n%+v", got, err, first)
	}
	if _, err := s.GetRefreshToken(ctx, "rt-none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRefreshToken of an unknown hash = %v, want ErrNotFound", err)
	}

	// A successor for another resource, scope or subject is refused:
	// a rotation carries the grant on as it was.
	at := now.Add(time.Minute)
	for name, change := range map[string]func(*store.RefreshToken){
		"resource": func(n *store.RefreshToken) { n.Resource = "https://other.example/mcp" },
		"scope":    func(n *store.RefreshToken) { n.Scope = "other" },
		"subject":  func(n *store.RefreshToken) { n.Subject = json.RawMessage(`{"tenant":"t2"}`) },
	} {
		n := nextRefresh("rt-2", at)
		change(&n)
		if _, err := rotate(ctx, s, "rt-1", n, at); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RotateRefreshToken to a successor with another %s = %v, want ErrInvalid", name, err)
		}
	}

	// Rotation: the old token is used, the next one carries its grant.
	next := nextRefresh("rt-2", at)
	old, err := rotate(ctx, s, "rt-1", next, at)
	if err != nil {
		t.Fatalf("RotateRefreshToken: %v", err)
	}
	wantOld := first
	wantOld.UsedAt, wantOld.SuccessorHash = at, "rt-2"
	if !reflect.DeepEqual(old, wantOld) {
		t.Errorf("RotateRefreshToken returned\n%+v, want\n%+v", old, wantOld)
	}
	at2 := at.Add(time.Minute)
	old2, err := rotate(ctx, s, "rt-2", nextRefresh("rt-3", at2), at2)
	if err != nil {
		t.Fatalf("RotateRefreshToken of the successor: %v", err)
	}
	wantNext := store.RefreshToken{TokenHash: "rt-2", FamilyID: "fam", ClientID: "c", Principal: "alice",
		Subject: first.Subject, Resource: first.Resource, Scope: first.Scope,
		CreatedAt: at, ExpiresAt: next.ExpiresAt, FamilyExpiresAt: first.FamilyExpiresAt, UsedAt: at2, SuccessorHash: "rt-3"}
	if !reflect.DeepEqual(old2, wantNext) {
		t.Errorf("the successor as stored:\n%+v, want\n%+v (family, client, principal, grant and family end inherited)", old2, wantNext)
	}

	// Reuse of a rotated token revokes the family: the newest stops
	// working.
	at3 := at2.Add(time.Minute)
	reused, err := rotate(ctx, s, "rt-1", nextRefresh("rt-evil", at3), at3)
	if !errors.Is(err, store.ErrReused) || !errors.Is(err, store.ErrConflict) || reused.TokenHash != "rt-1" {
		t.Errorf("RotateRefreshToken of a used token = %+v, %v; want it with ErrReused (an ErrConflict)", reused, err)
	}
	checkRevokedToken(t, s, "rt-3", at3)
	if _, err := rotate(ctx, s, "rt-evil", nextRefresh("rt-evil-2", at3), at3); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the reuse's successor was stored: %v", err)
	}
	if _, err := rotate(ctx, s, "rt-2", nextRefresh("rt-4", at3), at3); !errors.Is(err, store.ErrReused) {
		t.Errorf("reuse of a used token of a revoked family = %v, want ErrReused", err)
	}

	// Expiry: the token's own end, or its family's.
	short := newRefresh("rt-short", "fam-short", "c", "alice", now)
	short.ExpiresAt = now.Add(time.Minute)
	mustIssue(t, s, short)
	ended := newRefresh("rt-ended", "fam-ended", "c", "alice", now)
	ended.ExpiresAt, ended.FamilyExpiresAt = now.Add(2*time.Hour), now.Add(time.Hour)
	mustIssue(t, s, ended)
	for hash, when := range map[string]time.Time{"rt-short": short.ExpiresAt, "rt-ended": ended.FamilyExpiresAt} {
		if old, err := rotate(ctx, s, hash, nextRefresh(hash+"-next", when), when); !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrReused) || !old.UsedAt.IsZero() {
			t.Errorf("RotateRefreshToken of %s at its end = %+v, %v; want ErrConflict, nothing written", hash, old, err)
		}
	}
	if _, err := rotate(ctx, s, "rt-short", nextRefresh("rt-short-next", now), now); err != nil {
		t.Errorf("RotateRefreshToken before the end, after a refusal at it: %v", err)
	}
	if _, err := rotate(ctx, s, "nope", nextRefresh("x", now), now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RotateRefreshToken of an unknown token = %v, want ErrNotFound", err)
	}

	// The successor cannot change hands or outlive its family; a refused
	// rotation writes nothing.
	mustIssue(t, s, newRefresh("rt-a", "fam-a", "c", "alice", now))
	for name, f := range map[string]func(*store.RefreshToken){
		"another family":    func(n *store.RefreshToken) { n.FamilyID = "fam-b" },
		"another client":    func(n *store.RefreshToken) { n.ClientID = "d" },
		"another principal": func(n *store.RefreshToken) { n.Principal = "bob" },
		"a longer family":   func(n *store.RefreshToken) { n.FamilyExpiresAt = now.Add(48 * time.Hour) },
		"no hash":           func(n *store.RefreshToken) { n.TokenHash = "" },
		"no expiry":         func(n *store.RefreshToken) { n.ExpiresAt = time.Time{} },
		"used":              func(n *store.RefreshToken) { n.UsedAt = now },
		"a bad subject":     func(n *store.RefreshToken) { n.Subject = json.RawMessage(`[`) },
		"NUL in the scope":  func(n *store.RefreshToken) { n.Scope = "\x00" },
		"created past its end": func(n *store.RefreshToken) {
			n.CreatedAt = now.Add(2 * time.Hour)
		},
	} {
		n := nextRefresh("rt-a-next", now)
		f(&n)
		if _, err := rotate(ctx, s, "rt-a", n, now); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RotateRefreshToken to a token with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := rotate(ctx, s, "rt-a", nextRefresh("rt-a-next", now), time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RotateRefreshToken at the zero time = %v, want ErrInvalid", err)
	}
	if _, err := rotate(ctx, s, "rt-a", nextRefresh("rt-a-next", now), now); err != nil {
		t.Errorf("RotateRefreshToken after the refused ones: %v", err)
	}

	// RFC 7009 revocation: the whole family, by any of its tokens.
	mustIssue(t, s, newRefresh("rt-r1", "fam-r", "c", "alice", now))
	if _, err := rotate(ctx, s, "rt-r1", nextRefresh("rt-r2", now), now); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeRefreshFamily(ctx, "rt-r1", at); err != nil {
		t.Fatalf("RevokeRefreshFamily: %v", err)
	}
	checkRevokedToken(t, s, "rt-r2", at)
	if err := s.RevokeRefreshFamily(ctx, "rt-r2", at); err != nil {
		t.Errorf("RevokeRefreshFamily of a revoked family: %v", err)
	}
	if err := s.RevokeRefreshFamily(ctx, "nope", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeRefreshFamily of an unknown token = %v, want ErrNotFound", err)
	}

	mutate := func(f func(*store.RefreshToken)) store.RefreshToken {
		tok := newRefresh("rt-bad", "fam-bad", "c", "alice", now)
		f(&tok)
		return tok
	}
	for name, tok := range map[string]store.RefreshToken{
		"no hash":            mutate(func(t *store.RefreshToken) { t.TokenHash = "" }),
		"no family":          mutate(func(t *store.RefreshToken) { t.FamilyID = "" }),
		"no client":          mutate(func(t *store.RefreshToken) { t.ClientID = "" }),
		"no principal":       mutate(func(t *store.RefreshToken) { t.Principal = "" }),
		"no resource":        mutate(func(t *store.RefreshToken) { t.Resource = "" }),
		"no expiry":          mutate(func(t *store.RefreshToken) { t.ExpiresAt = time.Time{} }),
		"no family end":      mutate(func(t *store.RefreshToken) { t.FamilyExpiresAt = time.Time{} }),
		"a family ended":     mutate(func(t *store.RefreshToken) { t.FamilyExpiresAt = t.CreatedAt }),
		"revoked":            mutate(func(t *store.RefreshToken) { t.RevokedAt = now }),
		"invalid UTF-8 hash": mutate(func(t *store.RefreshToken) { t.TokenHash = "\xff" }),
	} {
		if err := s.IssueRefreshToken(ctx, tok); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("IssueRefreshToken with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := rotate(ctx, s, "rt-bad", nextRefresh("y", now), now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid token was stored: %v", err)
	}
}

// testRefreshTokenRotateRace rotates one token from many goroutines:
// exactly one succeeds, the others are reuses, and the family is revoked,
// the winner's successor included.
func testRefreshTokenRotateRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	mustIssue(t, s, newRefresh("rt", "fam", "c", "alice", now))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = rotate(ctx, s, "rt", nextRefresh(fmt.Sprintf("rt-%d", i), now), now)
		})
	}
	wg.Wait()
	winner := onlyWinner(t, "rotation", errs, store.ErrReused)
	checkRevokedToken(t, s, fmt.Sprintf("rt-%d", winner), now)
}

// rotateChain rotates the token first, then its successor, and so on,
// until a rotation fails; it returns the last token it got, and the
// error that stopped it. It gives up after maxChain rotations.
func rotateChain(t *testing.T, s store.Store, first string, now time.Time) (string, error) {
	const maxChain = 5000
	cur := first
	for i := range maxChain {
		next := fmt.Sprintf("%s.%d", first, i)
		if _, err := rotate(t.Context(), s, cur, nextRefresh(next, now), now); err != nil {
			return cur, err
		}
		cur = next
	}
	return cur, fmt.Errorf("%s was rotated %d times, never revoked", first, maxChain)
}

// testOAuthRevokeCascade revokes a client, a consent and a family while
// their tokens are being rotated: each revocation reaches every token,
// the ones rotated meanwhile included, and leaves the others.
func testOAuthRevokeCascade(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	for _, id := range []string{"gone", "kept"} {
		mustOAuthClient(t, s, id)
	}
	for _, p := range []string{"alice", "bob"} {
		for _, c := range []string{"gone", "kept"} {
			if _, err := s.PutConsent(ctx, store.Consent{Principal: p, ClientID: c, Scope: "mcp:invoke"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// gone/*: the client is revoked; kept/alice: alice's consent is;
	// kept/bob/fam: one family is; kept/bob/other: nothing is.
	chains := map[string][3]string{ // first token: client, principal, family
		"gone-alice": {"gone", "alice", "f1"}, "gone-bob": {"gone", "bob", "f2"},
		"kept-alice": {"kept", "alice", "f3"}, "kept-bob": {"kept", "bob", "f4"},
		"kept-bob-other": {"kept", "bob", "f5"},
	}
	for first, o := range chains {
		mustIssue(t, s, newRefresh(first, o[2], o[0], o[1], now))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	last := map[string]string{}
	for first := range chains {
		if first == "kept-bob-other" {
			continue
		}
		wg.Go(func() {
			cur, err := rotateChain(t, s, first, now)
			if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrReused) {
				t.Errorf("rotating the chain of %s stopped with %v, want ErrConflict (revoked)", first, err)
			}
			mu.Lock()
			last[first] = cur
			mu.Unlock()
		})
	}
	revokeErrs := make([]error, 3)
	wg.Go(func() { time.Sleep(20 * time.Millisecond); revokeErrs[0] = s.RevokeOAuthClient(ctx, "gone", now) })
	wg.Go(func() { time.Sleep(20 * time.Millisecond); revokeErrs[1] = s.RevokeConsent(ctx, "alice", "kept", now) })
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		// By the first token, long rotated: the family is what is revoked.
		revokeErrs[2] = s.RevokeRefreshFamily(ctx, "kept-bob", now)
	})
	wg.Wait()
	for i, err := range revokeErrs {
		if err != nil {
			t.Errorf("revocation #%d: %v", i, err)
		}
	}
	for _, cur := range last {
		checkRevokedToken(t, s, cur, now)
	}
	for _, k := range [][2]string{{"alice", "gone"}, {"bob", "gone"}, {"alice", "kept"}} {
		if c, err := s.GetConsent(ctx, k[0], k[1]); err != nil || !c.RevokedAt.Equal(now) {
			t.Errorf("consent %s/%s after the revocations: %+v, %v; want it revoked", k[0], k[1], c, err)
		}
	}
	if c, err := s.GetConsent(ctx, "bob", "kept"); err != nil || !c.RevokedAt.IsZero() {
		t.Errorf("bob's consent to the kept client: %+v, %v; want it standing", c, err)
	}
	if _, err := rotate(ctx, s, "kept-bob-other", nextRefresh("kept-bob-other.1", now), now); err != nil {
		t.Errorf("a token no revocation names stopped working: %v", err)
	}
	// A revoked client and a revoked consent are issued no new token.
	if err := s.IssueRefreshToken(ctx, newRefresh("new-gone", "f6", "gone", "bob", now)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("IssueRefreshToken to a revoked client = %v, want ErrConflict", err)
	}
	if err := s.IssueRefreshToken(ctx, newRefresh("new-alice", "f7", "kept", "alice", now)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("IssueRefreshToken under a revoked consent = %v, want ErrConflict", err)
	}
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "kept"}); err != nil {
		t.Fatal(err)
	}
	if err := s.IssueRefreshToken(ctx, newRefresh("new-alice", "f7", "kept", "alice", now)); err != nil {
		t.Errorf("IssueRefreshToken after the consent was given again: %v", err)
	}
}

func testConsents(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	for _, id := range []string{"c1", "c2", "c3"} {
		mustOAuthClient(t, s, id)
	}
	put := func(c store.Consent) store.Consent {
		t.Helper()
		out, err := s.PutConsent(ctx, c)
		if err != nil {
			t.Fatalf("PutConsent(%s/%s): %v", c.Principal, c.ClientID, err)
		}
		return out
	}
	c1 := put(store.Consent{Principal: "alice", ClientID: "c1", Scope: "mcp:invoke", Resource: "https://usher.example/mcp", UpdatedAt: now.Add(-time.Hour)})
	want := store.Consent{Principal: "alice", ClientID: "c1", Scope: "mcp:invoke", Resource: "https://usher.example/mcp",
		CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour), LastUsedAt: now.Add(-time.Hour)}
	if c1 != want {
		t.Errorf("PutConsent returned %+v, want %+v", c1, want)
	}
	c2 := put(store.Consent{Principal: "alice", ClientID: "c2"})
	checkStoreTime(t, "Consent.UpdatedAt set by the store", c2.UpdatedAt)
	put(store.Consent{Principal: "alice", ClientID: "c3", UpdatedAt: now.Add(-2 * time.Hour)})
	put(store.Consent{Principal: "bob", ClientID: "c1", UpdatedAt: now})
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutConsent to an unknown client = %v, want ErrNotFound", err)
	}
	if got, err := s.GetConsent(ctx, "alice", "c1"); err != nil || got != want {
		t.Errorf("GetConsent = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.GetConsent(ctx, "alice", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetConsent of none = %v, want ErrNotFound", err)
	}
	consentClients := func(principal string) []string {
		t.Helper()
		list, err := s.ListConsents(ctx, principal)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			out = append(out, c.ClientID)
		}
		return out
	}
	if got := consentClients("alice"); !reflect.DeepEqual(got, []string{"c2", "c1", "c3"}) {
		t.Errorf("ListConsents(alice) = %v, want [c2 c1 c3] (by LastUsedAt, newest first)", got)
	}

	// Touching moves both times forward, never back.
	touchAt := c2.LastUsedAt.Add(time.Minute)
	if err := s.TouchConsent(ctx, "alice", "c3", touchAt); err != nil {
		t.Fatalf("TouchConsent: %v", err)
	}
	if err := s.TouchConsent(ctx, "alice", "c3", touchAt.Add(-time.Hour)); err != nil {
		t.Fatalf("TouchConsent at an earlier time: %v", err)
	}
	if got, _ := s.GetConsent(ctx, "alice", "c3"); !got.LastUsedAt.Equal(touchAt) {
		t.Errorf("touched consent: LastUsedAt = %v, want %v", got.LastUsedAt, touchAt)
	}
	if got, _ := s.GetOAuthClient(ctx, "c3"); !got.LastUsedAt.Equal(touchAt) {
		t.Errorf("touched consent's client: LastUsedAt = %v, want %v", got.LastUsedAt, touchAt)
	}
	if got := consentClients("alice"); !reflect.DeepEqual(got, []string{"c3", "c2", "c1"}) {
		t.Errorf("ListConsents(alice) after a touch = %v, want [c3 c2 c1]", got)
	}
	if err := s.TouchConsent(ctx, "bob", "c2", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TouchConsent of none = %v, want ErrNotFound", err)
	}
	if got, _ := s.GetOAuthClient(ctx, "c2"); !got.LastUsedAt.IsZero() {
		t.Errorf("a refused touch moved the client's LastUsedAt: %v", got.LastUsedAt)
	}

	// Revoking a consent revokes that user's tokens of that client only.
	for hash, o := range map[string][2]string{"a-c1": {"alice", "c1"}, "a-c2": {"alice", "c2"}, "b-c1": {"bob", "c1"}} {
		mustIssue(t, s, newRefresh(hash, "fam-"+hash, o[1], o[0], now))
	}
	revokeAt := now.Add(time.Minute)
	if err := s.RevokeConsent(ctx, "alice", "c1", revokeAt); err != nil {
		t.Fatalf("RevokeConsent: %v", err)
	}
	if err := s.RevokeConsent(ctx, "alice", "c1", revokeAt.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("RevokeConsent again = %v, want ErrConflict", err)
	}
	got, err := s.GetConsent(ctx, "alice", "c1")
	if err != nil || !got.RevokedAt.Equal(revokeAt) {
		t.Errorf("revoked consent = %+v, %v; want RevokedAt %v (the first)", got, err, revokeAt)
	}
	checkRevokedToken(t, s, "a-c1", revokeAt)
	for _, hash := range []string{"a-c2", "b-c1"} {
		if _, err := rotate(ctx, s, hash, nextRefresh(hash+"-next", revokeAt), revokeAt); err != nil {
			t.Errorf("rotating %s after revoking another consent: %v", hash, err)
		}
	}
	if got := consentClients("alice"); !reflect.DeepEqual(got, []string{"c3", "c2"}) {
		t.Errorf("ListConsents(alice) after a revocation = %v, want [c3 c2]", got)
	}
	if err := s.TouchConsent(ctx, "alice", "c1", revokeAt); !errors.Is(err, store.ErrConflict) {
		t.Errorf("TouchConsent of a revoked consent = %v, want ErrConflict", err)
	}
	if err := s.RevokeConsent(ctx, "alice", "nope", revokeAt); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeConsent of none = %v, want ErrNotFound", err)
	}

	// Consenting again clears the revocation, keeps the first CreatedAt.
	again := put(store.Consent{Principal: "alice", ClientID: "c1", Scope: "mcp:invoke other", UpdatedAt: revokeAt.Add(time.Minute)})
	if !again.RevokedAt.IsZero() || !again.CreatedAt.Equal(c1.CreatedAt) || again.Scope != "mcp:invoke other" || !again.UpdatedAt.Equal(revokeAt.Add(time.Minute)) {
		t.Errorf("PutConsent after a revocation = %+v", again)
	}

	for name, c := range map[string]store.Consent{
		"no principal":   {ClientID: "c1"},
		"no client":      {Principal: "alice"},
		"NUL in scope":   {Principal: "alice", ClientID: "c1", Scope: "\x00"},
		"year 0":         {Principal: "alice", ClientID: "c1", UpdatedAt: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		"bad resource":   {Principal: "alice", ClientID: "c1", Resource: "\xff"},
		"bad principal2": {Principal: "\xffalice", ClientID: "c1"},
	} {
		if _, err := s.PutConsent(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutConsent with %s = %v, want ErrInvalid", name, err)
		}
	}
	for name, err := range map[string]error{
		"TouchConsent at the zero time":  s.TouchConsent(ctx, "alice", "c1", time.Time{}),
		"TouchConsent of no principal":   s.TouchConsent(ctx, "", "c1", now),
		"RevokeConsent at the zero time": s.RevokeConsent(ctx, "alice", "c1", time.Time{}),
		"RevokeConsent of no client":     s.RevokeConsent(ctx, "alice", "", now),
	} {
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
}

func testDeleteExpiredOAuth(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c")
	for hash, expires := range map[string]time.Time{"code-old": now.Add(-time.Minute), "code-now": now, "code-live": now.Add(time.Minute)} {
		code := newCode(hash, "c", now.Add(-time.Hour))
		code.ExpiresAt = expires
		if err := s.CreateAuthorizationCode(ctx, code); err != nil {
			t.Fatal(err)
		}
	}
	// Every token is valid for most of an hour but for what ends it.
	past := now.Add(-time.Minute)
	before := now.Add(-30 * time.Second)
	family := newRefresh("rt-family-ended", "f1", "c", "alice", past)
	family.FamilyExpiresAt = now
	own := newRefresh("rt-expired", "f2", "c", "alice", past)
	own.ExpiresAt = now.Add(-time.Second)
	for _, tok := range []store.RefreshToken{
		family, own,
		newRefresh("rt-used", "f3", "c", "alice", past),
		newRefresh("rt-revoked", "f4", "c", "alice", past),
		newRefresh("rt-live", "f5", "c", "alice", past),
		newRefresh("rt-used-later", "f6", "c", "alice", past),
	} {
		mustIssue(t, s, tok)
	}
	if _, err := rotate(ctx, s, "rt-used", nextRefresh("rt-used-next", now), before); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeRefreshFamily(ctx, "rt-revoked", before); err != nil {
		t.Fatal(err)
	}
	if _, err := rotate(ctx, s, "rt-used-later", nextRefresh("rt-used-later-next", now), now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Codes: code-old, code-now. Tokens: rt-family-ended, rt-expired,
	// rt-used, rt-revoked. Revoked grants: rt-revoked's family, f4.
	if n, err := s.DeleteExpiredOAuth(ctx, now); err != nil || n != 7 {
		t.Errorf("DeleteExpiredOAuth = %d, %v; want 7", n, err)
	}
	if n, err := s.DeleteExpiredOAuth(ctx, now); err != nil || n != 0 {
		t.Errorf("DeleteExpiredOAuth again = %d, %v; want 0", n, err)
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "code-now", "f", now.Add(-time.Hour), nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a code expired at the sweep's time: %v, want it deleted", err)
	}
	if _, err := s.RedeemAuthorizationCode(ctx, "code-live", "f", now, nil); err != nil {
		t.Errorf("a live code after the sweep: %v", err)
	}
	for _, hash := range []string{"rt-family-ended", "rt-expired", "rt-used", "rt-revoked"} {
		if err := s.RevokeRefreshFamily(ctx, hash, now); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after the sweep: %v, want it deleted", hash, err)
		}
	}
	// (Revoking finds a token; it ends the test.)
	for _, hash := range []string{"rt-live", "rt-used-next", "rt-used-later"} {
		if err := s.RevokeRefreshFamily(ctx, hash, now); err != nil {
			t.Errorf("%s after the sweep: %v, want it kept", hash, err)
		}
	}
	if _, err := s.DeleteExpiredOAuth(ctx, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeleteExpiredOAuth at the zero time = %v, want ErrInvalid", err)
	}
}

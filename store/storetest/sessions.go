package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

func testBrowserSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	create := func(idHash, principal string, expires time.Time) store.BrowserSession {
		t.Helper()
		out, err := s.CreateBrowserSession(ctx, store.BrowserSession{IDHash: idHash, Principal: principal, CreatedAt: expires.Add(-2 * time.Hour), ExpiresAt: expires})
		if err != nil {
			t.Fatalf("CreateBrowserSession(%s): %v", idHash, err)
		}
		return out
	}
	a1 := create("a1", "alice", now.Add(time.Hour))
	if a1.IDHash != "a1" || a1.Principal != "alice" || !a1.CreatedAt.Equal(now.Add(-time.Hour)) || !a1.ExpiresAt.Equal(now.Add(time.Hour)) || !a1.RevokedAt.IsZero() {
		t.Errorf("CreateBrowserSession returned %+v", a1)
	}
	checkStoreTime(t, "BrowserSession.CreatedAt", a1.CreatedAt)
	if !a1.Active(now) || a1.Active(a1.ExpiresAt) {
		t.Errorf("Active of %+v: at now %v, at its expiry %v", a1, a1.Active(now), a1.Active(a1.ExpiresAt))
	}
	create("a2", "alice", now.Add(time.Hour))
	create("a-old", "alice", now) // expires exactly at now
	create("b1", "bob", now.Add(time.Hour))

	if got, err := s.GetBrowserSession(ctx, "a1"); err != nil || got != a1 {
		t.Errorf("GetBrowserSession = %+v, %v; want %+v", got, err, a1)
	}
	if _, err := s.GetBrowserSession(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBrowserSession of an unknown hash = %v, want ErrNotFound", err)
	}
	if _, err := s.CreateBrowserSession(ctx, store.BrowserSession{IDHash: "a1", Principal: "mallory", ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateBrowserSession of a used hash = %v, want ErrConflict", err)
	}
	if got, _ := s.GetBrowserSession(ctx, "a1"); got.Principal != "alice" {
		t.Errorf("a refused duplicate changed the session: %+v", got)
	}

	// Signing one session out leaves the others.
	at := now.Add(time.Minute)
	if err := s.RevokeBrowserSession(ctx, "a1", at); err != nil {
		t.Fatalf("RevokeBrowserSession: %v", err)
	}
	if err := s.RevokeBrowserSession(ctx, "a1", at.Add(time.Minute)); err != nil {
		t.Errorf("RevokeBrowserSession again: %v", err)
	}
	if got, _ := s.GetBrowserSession(ctx, "a1"); !got.RevokedAt.Equal(at) || got.Active(at) {
		t.Errorf("revoked session = %+v, want RevokedAt %v (the first revocation)", got, at)
	}
	if got, _ := s.GetBrowserSession(ctx, "a2"); !got.Active(at) {
		t.Errorf("alice's other session after revoking one: %+v", got)
	}
	if err := s.RevokeBrowserSession(ctx, "nope", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeBrowserSession of an unknown hash = %v, want ErrNotFound", err)
	}

	// Signing a person out everywhere: their live sessions only.
	if n, err := s.RevokeBrowserSessions(ctx, "alice", at); err != nil || n != 1 {
		t.Errorf("RevokeBrowserSessions(alice) = %d, %v; want 1 (a2; a1 is revoked, a-old expired)", n, err)
	}
	if got, _ := s.GetBrowserSession(ctx, "a2"); got.Active(at) || !got.RevokedAt.Equal(at) {
		t.Errorf("a2 after signing alice out everywhere: %+v", got)
	}
	if got, _ := s.GetBrowserSession(ctx, "b1"); !got.Active(at) {
		t.Errorf("bob's session after signing alice out everywhere: %+v", got)
	}
	if n, err := s.RevokeBrowserSessions(ctx, "carol", at); err != nil || n != 0 {
		t.Errorf("RevokeBrowserSessions(carol) = %d, %v; want 0", n, err)
	}

	// The sweep deletes what ended at or before its time: a-old expired at
	// now; a1 and a2 were revoked at at.
	if n, err := s.DeleteBrowserSessions(ctx, now); err != nil || n != 1 {
		t.Errorf("DeleteBrowserSessions(now) = %d, %v; want 1 (the expired one)", n, err)
	}
	if _, err := s.GetBrowserSession(ctx, "a-old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the expired session after the sweep: %v", err)
	}
	if n, err := s.DeleteBrowserSessions(ctx, at); err != nil || n != 2 {
		t.Errorf("DeleteBrowserSessions(at) = %d, %v; want 2 (the revoked ones)", n, err)
	}
	if got, err := s.GetBrowserSession(ctx, "b1"); err != nil || !got.Active(at) {
		t.Errorf("bob's live session after the sweep: %+v, %v", got, err)
	}

	for name, b := range map[string]store.BrowserSession{
		"no hash":            {Principal: "p", ExpiresAt: now.Add(time.Hour)},
		"no principal":       {IDHash: "x", ExpiresAt: now.Add(time.Hour)},
		"no expiry":          {IDHash: "x", Principal: "p"},
		"expires at created": {IDHash: "x", Principal: "p", CreatedAt: now, ExpiresAt: now},
		"already revoked":    {IDHash: "x", Principal: "p", ExpiresAt: now.Add(time.Hour), RevokedAt: now},
		"NUL in principal":   {IDHash: "x", Principal: "p\x00", ExpiresAt: now.Add(time.Hour)},
	} {
		if _, err := s.CreateBrowserSession(ctx, b); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateBrowserSession with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetBrowserSession(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid session was stored: %v", err)
	}
	if err := s.RevokeBrowserSession(ctx, "b1", time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RevokeBrowserSession at the zero time = %v, want ErrInvalid", err)
	}
}

// testBrowserSessionRevokeRace signs a person out everywhere while their
// sessions are being revoked one by one: every session ends revoked, and
// each revocation is counted once.
func testBrowserSessionRevokeRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const n = 8
	for i := range n {
		if _, err := s.CreateBrowserSession(ctx, store.BrowserSession{IDHash: string(rune('a' + i)), Principal: "alice", ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	counts := make([]int, 2)
	errs := make([]error, 2+n)
	for i := range 2 {
		wg.Go(func() { counts[i], errs[i] = s.RevokeBrowserSessions(ctx, "alice", now) })
	}
	for i := range n {
		wg.Go(func() { errs[2+i] = s.RevokeBrowserSession(ctx, string(rune('a'+i)), now) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("revocation #%d: %v", i, err)
		}
	}
	if counts[0]+counts[1] > n {
		t.Errorf("RevokeBrowserSessions counted %d and %d revocations of %d sessions", counts[0], counts[1], n)
	}
	for i := range n {
		if got, err := s.GetBrowserSession(ctx, string(rune('a'+i))); err != nil || got.Active(now) {
			t.Errorf("session %d after the race: %+v, %v", i, got, err)
		}
	}
}

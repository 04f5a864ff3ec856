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

// testUpstreamSessions: a shared upstream session is recorded once per
// key; a second first record of the key conflicts, a replacement of the
// session it holds succeeds, and one of a session it no longer holds
// conflicts (two replicas replacing one session: the second loses). A
// record that has ended stays until its session is named; invalid
// records are refused and store nothing.
func testUpstreamSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	result := []byte(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}`)
	rec := store.UpstreamSession{Key: "k1", Session: "sealed-1", ProtocolVersion: "2025-11-25", InitializeResult: result,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, err := s.GetUpstreamSession(ctx, "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetUpstreamSession before any record = %v, want ErrNotFound", err)
	}
	a, err := s.PutUpstreamSession(ctx, rec, "")
	if err != nil {
		t.Fatalf("PutUpstreamSession: %v", err)
	}
	checkStoreTime(t, "UpstreamSession.CreatedAt", a.CreatedAt)
	got, err := s.GetUpstreamSession(ctx, "k1")
	if err != nil || got.Key != "k1" || got.Session != "sealed-1" || got.ProtocolVersion != "2025-11-25" ||
		string(got.InitializeResult) != string(result) || !got.CreatedAt.Equal(now) || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("GetUpstreamSession = %+v, %v; want %+v", got, err, rec)
	}
	if !got.Active(now) || got.Active(got.ExpiresAt) {
		t.Errorf("Active of %+v: at now %v, at its expiry %v", got, got.Active(now), got.Active(got.ExpiresAt))
	}

	// Another replica records its own first session of the key: refused.
	other := rec
	other.Session = "sealed-2"
	if _, err := s.PutUpstreamSession(ctx, other, ""); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second first record of k1 = %v, want ErrConflict", err)
	}
	// It replaces the session the record holds: done.
	if _, err := s.PutUpstreamSession(ctx, other, "sealed-1"); err != nil {
		t.Fatalf("replacing sealed-1: %v", err)
	}
	// A replica that saw sealed-1 fail too replaces it late: refused.
	late := rec
	late.Session = "sealed-3"
	if _, err := s.PutUpstreamSession(ctx, late, "sealed-1"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("replacing a session the record no longer holds = %v, want ErrConflict", err)
	}
	if got, err := s.GetUpstreamSession(ctx, "k1"); err != nil || got.Session != "sealed-2" {
		t.Errorf("after the replacements: %+v, %v; want sealed-2", got, err)
	}

	big := []byte(`"` + strings.Repeat("x", store.MaxUpstreamSessionResult) + `"`)
	for name, bad := range map[string]store.UpstreamSession{
		"no key":          {Session: "s", ProtocolVersion: "v", InitializeResult: result, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"key too long":    {Key: strings.Repeat("k", store.MaxUpstreamSessionKey+1), Session: "s", ProtocolVersion: "v", InitializeResult: result, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"no session":      {Key: "bad", ProtocolVersion: "v", InitializeResult: result, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"session too big": {Key: "bad", Session: strings.Repeat("s", store.MaxUpstreamSessionID+1), ProtocolVersion: "v", InitializeResult: result, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"no version":      {Key: "bad", Session: "s", InitializeResult: result, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"no result":       {Key: "bad", Session: "s", ProtocolVersion: "v", CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"result too big":  {Key: "bad", Session: "s", ProtocolVersion: "v", InitializeResult: big, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"ends at once":    {Key: "bad", Session: "s", ProtocolVersion: "v", InitializeResult: result, CreatedAt: now, ExpiresAt: now},
	} {
		if _, err := s.PutUpstreamSession(ctx, bad, ""); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutUpstreamSession (%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetUpstreamSession(ctx, "bad"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid record was stored: GetUpstreamSession = %v", err)
	}

	// An hour later k1's record has ended: it stays, to be ended upstream
	// before it goes. A first record of k1 conflicts with it; naming its
	// session replaces it.
	later := rec
	later.Session, later.CreatedAt, later.ExpiresAt = "sealed-4", now.Add(time.Hour), now.Add(2*time.Hour)
	if _, err := s.PutUpstreamSession(ctx, later, ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a first record in place of one that has ended = %v, want ErrConflict", err)
	}
	if got, err := s.GetUpstreamSession(ctx, "k1"); err != nil || got.Session != "sealed-2" || got.Active(later.CreatedAt) {
		t.Fatalf("the ended record of k1 = %+v, %v; want it there, ended", got, err)
	}
	if _, err := s.PutUpstreamSession(ctx, later, "sealed-2"); err != nil {
		t.Fatalf("replacing a record that has ended: %v", err)
	}
	// Replacing a session whose record is gone records the new one.
	k2 := later
	k2.Key, k2.Session = "k2", "sealed-5"
	if _, err := s.PutUpstreamSession(ctx, k2, "sealed-gone"); err != nil {
		t.Fatalf("replacing a record that is gone: %v", err)
	}
}

// testUpstreamSessionsIdle: a record is last used when written, and a
// touch moves that forward (never back, and only for the session it
// names); a claim deletes and returns the records used at or before its
// time, ended or not, and leaves the others; of claims at once, each
// record goes to one.
func testUpstreamSessionsIdle(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	result := []byte(`{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"up","version":"1"}}`)
	put := func(key, session string, created time.Time, life time.Duration) {
		t.Helper()
		rec := store.UpstreamSession{Key: key, Session: session, ProtocolVersion: "2025-11-25", InitializeResult: result,
			CreatedAt: created, ExpiresAt: created.Add(life)}
		if _, err := s.PutUpstreamSession(ctx, rec, ""); err != nil {
			t.Fatalf("PutUpstreamSession(%s): %v", key, err)
		}
	}
	put("idle-a", "sa", now, 24*time.Hour)
	put("idle-b", "sb", now, 24*time.Hour)
	put("ended", "se", now.Add(-25*time.Hour), 24*time.Hour)
	if got, err := s.GetUpstreamSession(ctx, "idle-a"); err != nil || !got.UsedAt.Equal(now) {
		t.Fatalf("a new record's UsedAt = %v, %v; want its CreatedAt %v", got.UsedAt, err, now)
	}
	// idle-b is used a minute later; a touch naming another session, or
	// an earlier time, changes nothing. A touch reports whether the
	// record holds its session, earlier or not.
	for _, touch := range []struct {
		session string
		at      time.Time
		holds   bool
	}{{"sb", now.Add(time.Minute), true}, {"other", now.Add(time.Hour), false}, {"sb", now.Add(time.Second), true}} {
		if holds, err := s.TouchUpstreamSession(ctx, "idle-b", touch.session, touch.at); err != nil || holds != touch.holds {
			t.Fatalf("TouchUpstreamSession(%s, %v) = %v, %v; want %v", touch.session, touch.at, holds, err, touch.holds)
		}
	}
	if holds, err := s.TouchUpstreamSession(ctx, "none", "x", now); err != nil || holds {
		t.Fatalf("TouchUpstreamSession of no record: %v, %v", holds, err)
	}
	if got, err := s.GetUpstreamSession(ctx, "idle-b"); err != nil || !got.UsedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("idle-b's UsedAt = %v, %v; want %v", got.UsedAt, err, now.Add(time.Minute))
	}
	// Claiming what was used by now takes idle-a and the ended record,
	// not idle-b, used since.
	claimed, err := s.ClaimIdleUpstreamSessions(ctx, now, 10)
	if err != nil {
		t.Fatalf("ClaimIdleUpstreamSessions: %v", err)
	}
	got := map[string]string{}
	for _, c := range claimed {
		got[c.Key] = c.Session
	}
	if len(claimed) != 2 || got["idle-a"] != "sa" || got["ended"] != "se" {
		t.Fatalf("claimed %+v, want idle-a and ended", got)
	}
	for _, key := range []string{"idle-a", "ended"} {
		if _, err := s.GetUpstreamSession(ctx, key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("claimed record %s still there: %v", key, err)
		}
	}
	if _, err := s.GetUpstreamSession(ctx, "idle-b"); err != nil {
		t.Errorf("the record used since is gone: %v", err)
	}
	if _, err := s.ClaimIdleUpstreamSessions(ctx, now, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a claim of no records = %v, want ErrInvalid", err)
	}

	// Claims at once: every record goes to exactly one.
	const n = 20
	for i := range n {
		put(fmt.Sprintf("race-%d", i), fmt.Sprintf("sr-%d", i), now.Add(-time.Hour), 24*time.Hour)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				c, err := s.ClaimIdleUpstreamSessions(ctx, now.Add(2*time.Minute), 3)
				if err != nil {
					t.Errorf("ClaimIdleUpstreamSessions at once: %v", err)
					return
				}
				if len(c) == 0 {
					return
				}
				mu.Lock()
				for _, r := range c {
					seen[r.Key]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n+1 { // the race records and idle-b
		t.Errorf("claims at once took %d records, want %d", len(seen), n+1)
	}
	for key, times := range seen {
		if times != 1 {
			t.Errorf("record %s was claimed %d times", key, times)
		}
	}
}

// testUpstreamSessionsReseal: a record's session is sealed anew only in
// place of the seal it holds, keeping its other fields, with its UsedAt
// moved forward (never back); a reseal naming another seal, or no
// record, changes nothing; an invalid seal is refused.
func testUpstreamSessionsReseal(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	rec := store.UpstreamSession{Key: "reseal", Session: "s1", ProtocolVersion: "2025-11-25",
		InitializeResult: []byte(`{"protocolVersion":"2025-11-25"}`), CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
	if _, err := s.PutUpstreamSession(ctx, rec, ""); err != nil {
		t.Fatalf("PutUpstreamSession: %v", err)
	}
	if done, err := s.ResealUpstreamSession(ctx, "reseal", "s1", "s2", now.Add(time.Hour)); err != nil || !done {
		t.Fatalf("ResealUpstreamSession of the seal held = %v, %v; want done", done, err)
	}
	for _, r := range []struct{ key, old string }{{"reseal", "s1"}, {"none", "s2"}} {
		if done, err := s.ResealUpstreamSession(ctx, r.key, r.old, "s3", now.Add(2*time.Hour)); err != nil || done {
			t.Errorf("ResealUpstreamSession(%s, %s) = %v, %v; want nothing done", r.key, r.old, done, err)
		}
	}
	// A reseal at an earlier time keeps the later UsedAt.
	if done, err := s.ResealUpstreamSession(ctx, "reseal", "s2", "s4", now.Add(time.Minute)); err != nil || !done {
		t.Fatalf("ResealUpstreamSession at an earlier time = %v, %v; want done", done, err)
	}
	got, err := s.GetUpstreamSession(ctx, "reseal")
	if err != nil {
		t.Fatal(err)
	}
	if got.Session != "s4" || !got.UsedAt.Equal(now.Add(time.Hour)) || !got.CreatedAt.Equal(now) ||
		!got.ExpiresAt.Equal(rec.ExpiresAt) || got.ProtocolVersion != rec.ProtocolVersion || string(got.InitializeResult) != string(rec.InitializeResult) {
		t.Errorf("after the reseals the record is %+v; want session s4, used at %v, the rest as written", got, now.Add(time.Hour))
	}
	for name, seal := range map[string]string{"empty": "", "too long": strings.Repeat("x", store.MaxUpstreamSessionID+1), "not text": "s\x00"} {
		if _, err := s.ResealUpstreamSession(ctx, "reseal", "s4", seal, now); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("a reseal with a seal %s = %v, want ErrInvalid", name, err)
		}
	}
}

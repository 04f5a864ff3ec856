package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testUpstreamSessions: a shared upstream session is recorded once per
// key; a second first record of the key conflicts, a replacement of the
// session it holds succeeds, and one of a session it no longer holds
// conflicts (two replicas replacing one session: the second loses). A
// record that has ended counts as none and is deleted as another is
// written; invalid records are refused and store nothing.
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

	// An hour later k1's record has ended: a first record of k1 is
	// written in its place, and a record of k2 deletes it.
	later := rec
	later.Session, later.CreatedAt, later.ExpiresAt = "sealed-4", now.Add(time.Hour), now.Add(2*time.Hour)
	if _, err := s.PutUpstreamSession(ctx, later, ""); err != nil {
		t.Fatalf("a first record in place of one that has ended: %v", err)
	}
	// Replacing a session whose record has ended (and is gone) records
	// the new one.
	k2 := later
	k2.Key, k2.Session = "k2", "sealed-5"
	if _, err := s.PutUpstreamSession(ctx, k2, "sealed-gone"); err != nil {
		t.Fatalf("replacing a record that is gone: %v", err)
	}
	k2.Session, k2.CreatedAt, k2.ExpiresAt = "sealed-6", now.Add(3*time.Hour), now.Add(4*time.Hour)
	if _, err := s.PutUpstreamSession(ctx, k2, "sealed-5"); err != nil {
		t.Fatalf("replacing k2 after k1 has ended: %v", err)
	}
	if _, err := s.GetUpstreamSession(ctx, "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the ended record of k1 is still there: GetUpstreamSession = %v", err)
	}
}

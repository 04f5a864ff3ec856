package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testMCPSessions: a stateful MCP session is created, read back, its state
// replaced and the session deleted; invalid sessions are refused and store
// nothing; a session that has ended is deleted when the next one is
// created.
func testMCPSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	state := []byte(`{"negotiatedProtocolVersion":"2025-11-25"}`)
	a, err := s.CreateMCPSession(ctx, store.MCPSession{ID: "s1", Principal: "alice", State: state, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatalf("CreateMCPSession: %v", err)
	}
	if a.ID != "s1" || a.Principal != "alice" || !bytes.Equal(a.State, state) || !a.CreatedAt.Equal(now) || !a.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("CreateMCPSession returned %+v", a)
	}
	checkStoreTime(t, "MCPSession.CreatedAt", a.CreatedAt)
	if !a.Active(now) || a.Active(a.ExpiresAt) {
		t.Errorf("Active of %+v: at now %v, at its expiry %v", a, a.Active(now), a.Active(a.ExpiresAt))
	}
	if got, err := s.GetMCPSession(ctx, "s1"); err != nil || got.ID != "s1" || !bytes.Equal(got.State, state) || !got.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("GetMCPSession = %+v, %v; want %+v", got, err, a)
	}
	if _, err := s.CreateMCPSession(ctx, store.MCPSession{ID: "s1", Principal: "bob", State: state, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateMCPSession of a duplicate id = %v, want ErrConflict", err)
	}

	changed := []byte(`{"negotiatedProtocolVersion":"2025-11-25","logLevel":"debug"}`)
	if err := s.UpdateMCPSessionState(ctx, "s1", state, changed); err != nil {
		t.Fatalf("UpdateMCPSessionState: %v", err)
	}
	// A change made from the state before is refused: it would undo this.
	if err := s.UpdateMCPSessionState(ctx, "s1", state, []byte(`{"lost":true}`)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("UpdateMCPSessionState from a state that is not the session's = %v, want ErrConflict", err)
	}
	if got, err := s.GetMCPSession(ctx, "s1"); err != nil || !bytes.Equal(got.State, changed) || got.Principal != "alice" {
		t.Errorf("after UpdateMCPSessionState: %+v, %v", got, err)
	}
	if err := s.UpdateMCPSessionState(ctx, "nope", state, changed); !errors.Is(err, store.ErrConflict) {
		t.Errorf("UpdateMCPSessionState of an unknown session = %v, want ErrConflict", err)
	}

	big := []byte(`"` + strings.Repeat("x", store.MaxMCPSessionState) + `"`)
	for name, bad := range map[string]store.MCPSession{
		"no id":           {Principal: "alice", State: state, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"no principal":    {ID: "bad", State: state, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"no state":        {ID: "bad", Principal: "alice", CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"state too large": {ID: "bad", Principal: "alice", State: big, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		"ends at once":    {ID: "bad", Principal: "alice", State: state, CreatedAt: now, ExpiresAt: now},
	} {
		if _, err := s.CreateMCPSession(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateMCPSession (%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetMCPSession(ctx, "bad"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid session was stored: GetMCPSession = %v", err)
	}
	if err := s.UpdateMCPSessionState(ctx, "s1", changed, big); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("UpdateMCPSessionState with too large a state = %v, want ErrInvalid", err)
	}

	// s1 has ended when s2 is created an hour later: it is deleted.
	if _, err := s.CreateMCPSession(ctx, store.MCPSession{ID: "s2", Principal: "bob", State: state, CreatedAt: now.Add(time.Hour), ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
		t.Fatalf("CreateMCPSession(s2): %v", err)
	}
	if _, err := s.GetMCPSession(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the ended session s1 is still there: GetMCPSession = %v", err)
	}
	if err := s.DeleteMCPSession(ctx, "s2"); err != nil {
		t.Fatalf("DeleteMCPSession: %v", err)
	}
	if err := s.DeleteMCPSession(ctx, "s2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteMCPSession again = %v, want ErrNotFound", err)
	}
}

// testMCPAnswers: an MCP answer (or a held call's input or outcome)
// published by one process reaches every
// process's Updates, whole, however large up to MaxMCPAnswer (on
// PostgreSQL one too large for a notification is kept in a row whose id
// the notification carries, and read back); one without a session or
// publisher, larger than MaxMCPAnswer, or naming a kept row itself, is
// refused.
func testMCPAnswers(t *testing.T, s store.Store) {
	ctx := t.Context()
	updates, err := s.Updates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	answer := store.Notification{Kind: store.NotifyMCPAnswer, Session: "s1", From: "replica-a", Owner: "alice",
		Text: `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"name":"Ada \"the first\""}}}`}
	for name, bad := range map[string]store.Notification{
		"no session":   {Kind: store.NotifyMCPAnswer, From: "replica-a", Text: answer.Text},
		"no publisher": {Kind: store.NotifyMCPAnswer, Session: "s1", Text: answer.Text},
		"no text":      {Kind: store.NotifyMCPAnswer, Session: "s1", From: "replica-a"},
		"too large":    {Kind: store.NotifyMCPAnswer, Session: "s1", From: "replica-a", Text: strings.Repeat(`"`, store.MaxMCPAnswer+1)},
		"kept":         {Kind: store.NotifyMCPAnswer, Session: "s1", From: "replica-a", Text: answer.Text, Kept: "row"},
		"held no text": {Kind: store.NotifyHeldInput, Session: "h1", From: "replica-a"},
	} {
		if err := s.Publish(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Publish (%s) = %v, want ErrInvalid", name, err)
		}
	}
	// A larger answer than a notification carries (each quote is escaped
	// in the payload), and the largest.
	larger, largest := answer, answer
	larger.Text = strings.Repeat(`"é`, 4000)
	largest.Text = strings.Repeat(`"`, store.MaxMCPAnswer)
	// A held call's input and outcome are carried the same way.
	heldInput, heldOutcome := larger, answer
	heldInput.Kind, heldOutcome.Kind = store.NotifyHeldInput, store.NotifyHeldOutcome
	all := []store.Notification{answer, larger, largest, heldInput, heldOutcome}
	for _, n := range all {
		if err := s.Publish(ctx, n); err != nil {
			t.Fatalf("Publish(%d bytes): %v", len(n.Text), err)
		}
	}
	for _, want := range all {
		for got := range updates {
			if got.Kind == store.NotifyResync {
				continue
			}
			if got != want {
				t.Errorf("Updates gave %.200v, want the answer of %d bytes", got, len(want.Text))
			}
			break
		}
	}
}

package devoidc

import (
	"testing"
	"time"
)

func TestCodeStore(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	s := newCodeStore(2)
	g := grant{user: "alice", expires: now.Add(codeLifetime)}

	a, err := s.put(now, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.put(now, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.put(now, g); err != errTooManyCodes {
		t.Fatalf("third outstanding code: %v, want errTooManyCodes", err)
	}

	if got, ok := s.take(now, a); !ok || got.user != "alice" {
		t.Fatalf("take = %+v, %v", got, ok)
	}
	if _, ok := s.take(now, a); ok {
		t.Fatal("a code was taken twice")
	}

	// Expired codes neither redeem nor count against the cap.
	later := now.Add(codeLifetime)
	if _, err := s.put(later, grant{expires: later.Add(codeLifetime)}); err != nil {
		t.Fatalf("put after expiry: %v", err)
	}
	if _, err := s.put(later, grant{expires: later.Add(codeLifetime)}); err != nil {
		t.Fatalf("put after expiry: %v", err)
	}
	s = newCodeStore(2)
	c, err := s.put(now, grant{expires: now.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.take(now.Add(time.Second), c); ok {
		t.Fatal("an expired code was redeemed")
	}
}

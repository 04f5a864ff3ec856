package broker

import (
	"testing"
	"time"
)

// TestTokenCache checks that a pair's token is reused until it is near
// expiry, and that the cache holds at most its size of pairs, forgetting
// the least recently used first and any unused for a token's lifetime.
func TestTokenCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := NewTokenCache(f.broker, 2)
	ctx := t.Context()
	token := func(subject, audience string) string {
		t.Helper()
		tok, err := c.Token(ctx, subject, audience)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	first := token("alice", "https://a.example.com/mcp")
	if again := token("alice", "https://a.example.com/mcp"); again != first {
		t.Error("a fresh token was minted again")
	}
	claims, err := NewVerifier(f.keys, &VerifierOptions{Issuer: testIssuer, Audience: "https://a.example.com/mcp", Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := claims.Verify(ctx, first); err != nil || got.Subject != "alice" {
		t.Errorf("the token verifies as %+v, %v; want alice's for the upstream", got, err)
	}
	if other := token("bob", "https://a.example.com/mcp"); other == first {
		t.Error("bob got alice's token")
	}

	// Near expiry, a new one.
	f.clock.Advance(DefaultTokenLifetime - 30*time.Second)
	if renewed := token("alice", "https://a.example.com/mcp"); renewed == first {
		t.Error("a token 30 s from expiry was handed out again")
	}

	// Full: the least recently used pair (bob's) goes.
	token("carol", "https://a.example.com/mcp")
	if n := c.len(); n != 2 {
		t.Errorf("Len = %d, want the size, 2", n)
	}
	c.mu.Lock()
	_, bob := c.entries[[2]string{"bob", "https://a.example.com/mcp"}]
	c.mu.Unlock()
	if bob {
		t.Error("the least recently used pair is still held")
	}

	// Unused for a lifetime: forgotten when the next pair comes.
	f.clock.Advance(DefaultTokenLifetime + time.Second)
	token("dave", "https://a.example.com/mcp")
	if n := c.len(); n != 1 {
		t.Errorf("Len = %d after a lifetime unused, want 1 (the new pair)", n)
	}
}

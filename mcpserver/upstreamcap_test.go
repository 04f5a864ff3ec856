package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestUpstreamSessionsPerUser checks CatalogOptions.MaxSessionsPerUser: at
// a user's bound, a new session of theirs replaces their least recently
// used idle one; when every one of theirs is in use, their call fails with
// a tool error that says why, before anything is sent; another user is not
// affected; and once a session is free the call succeeds.
func TestUpstreamSessionsPerUser(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	started, release := addHoldTool(up, 1)
	// Two upstreams, both the fixture: a user's sessions to each count
	// against one bound.
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fa__echo": Allow, "fb__echo": Allow, "fb__hold": Allow},
		upstreams: []Upstream{{Name: "fa", URL: up.url}, {Name: "fb", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.MaxSessionsPerUser = 1 },
	})
	sessionsOf := func(sub string) []string {
		e.catalog.pool.mu.Lock()
		defer e.catalog.pool.mu.Unlock()
		var ups []string
		for k := range e.catalog.pool.conns {
			if k.subject == sub {
				ups = append(ups, k.upstream)
			}
		}
		slices.Sort(ups)
		return ups
	}
	echo := func(sub, tool string) *mcp.CallToolResult {
		return call(t, e.connect(sub, "", nil, ""), tool, map[string]any{"text": sub}, nil)
	}

	if res := echo(alice, "fa__echo"); res.IsError {
		t.Fatal(text(res))
	}
	if res := echo(alice, "fb__echo"); res.IsError {
		t.Fatal(text(res))
	}
	if got := sessionsOf(alice); !slices.Equal(got, []string{"fb"}) {
		t.Fatalf("alice's sessions %q, want fb's only: her idle fa session makes room", got)
	}

	// Alice's one session is busy: her call to the other upstream is
	// refused, and says why.
	held := make(chan *mcp.CallToolResult, 1)
	cs := e.connect(alice, "", nil, "")
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fb__hold", Arguments: map[string]any{}})
		if err != nil {
			res = errorResult(err.Error())
		}
		held <- res
	}()
	<-started
	calls := up.called("echo")
	res := echo(alice, "fa__echo")
	if !res.IsError || !strings.Contains(text(res), "Too many of your calls") || !strings.Contains(text(res), "Nothing was run") {
		t.Errorf("alice's call beyond her bound: %v %s", res.IsError, text(res))
	}
	if up.called("echo") != calls {
		t.Error("a call beyond the user's bound reached the upstream")
	}
	if !strings.Contains(e.logs.String(), "too many upstream sessions of this user") {
		t.Error("the refusal was not logged")
	}
	// Bob has a bound of his own.
	if res := echo(bob, "fa__echo"); res.IsError {
		t.Errorf("bob's call while alice is at her bound: %s", text(res))
	}

	close(release)
	if res := <-held; res.IsError {
		t.Errorf("alice's held call failed: %s", text(res))
	}
	if res := echo(alice, "fa__echo"); res.IsError {
		t.Errorf("once alice's session is idle, her call fails: %s", text(res))
	}
	e.catalog.pool.mu.Lock()
	n := e.catalog.pool.byUser[alice]
	e.catalog.pool.mu.Unlock()
	if n != 1 || len(sessionsOf(alice)) != 1 {
		t.Errorf("alice has %d sessions counted and %q open, want 1", n, sessionsOf(alice))
	}
}

// addHoldTool adds the tool "hold" to the fixture: each call reports on
// started (which has room for n) and answers "held" once release is
// closed.
func addHoldTool(up *fixture, n int) (started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}, n), make(chan struct{})
	up.addTool(&mcp.Tool{Name: "hold", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil
		})
	return started, release
}

// TestUpstreamSessionsPerUserOptions checks the option's default and its
// validation.
func TestUpstreamSessionsPerUserOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	if e.catalog.pool.maxUser != DefaultMaxSessionsPerUser {
		t.Errorf("default per-user bound %d, want %d", e.catalog.pool.maxUser, DefaultMaxSessionsPerUser)
	}
	if _, err := NewCatalog(&CatalogOptions{DefinitionHash: testDefinitionHash, MaxSessionsPerUser: -1}); err == nil || !strings.Contains(err.Error(), "MaxSessionsPerUser") {
		t.Errorf("a negative MaxSessionsPerUser: %v", err)
	}
}

// TestUpstreamSessionsPerUserCountsFailed checks that a session that
// failed while a call still uses it counts against its user's bound until
// that call lets go of it: failing calls cannot pile up sessions (for
// stdio, processes) beyond the bound.
func TestUpstreamSessionsPerUserCountsFailed(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
		catalog:   func(o *CatalogOptions) { o.MaxSessionsPerUser = 1 },
	})
	ctx := t.Context()
	p, u := e.catalog.pool, e.catalog.upstreams[0]
	inUse, err := p.acquire(ctx, u, connKey{upstream: u.cfg.Name, subject: alice})
	if err != nil {
		t.Fatal(err)
	}
	// What a call does when its session fails under it (a transport
	// error): the session leaves the pool, the call still holds it.
	p.broken(inUse)
	if _, err := p.acquire(ctx, u, connKey{upstream: u.cfg.Name, subject: alice}); !errors.Is(err, errTooManyUserSessions) {
		t.Fatalf("a new session while alice's failed one is in use: %v, want errTooManyUserSessions", err)
	}
	other, err := p.acquire(ctx, u, connKey{upstream: u.cfg.Name, subject: bob})
	if err != nil {
		t.Fatalf("bob's session: %v", err)
	}
	p.release(other)
	p.release(inUse) // its last user closes it
	again, err := p.acquire(ctx, u, connKey{upstream: u.cfg.Name, subject: alice})
	if err != nil {
		t.Fatalf("once the failed session is let go: %v", err)
	}
	if again == inUse {
		t.Error("the failed session was used again")
	}
	p.release(again)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byUser[alice] != 1 || p.byUser[bob] != 1 {
		t.Errorf("sessions counted: alice %d, bob %d; want 1 each (the idle ones)", p.byUser[alice], p.byUser[bob])
	}
}

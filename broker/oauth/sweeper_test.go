package oauth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestSweeper checks, on both engines, what a sweep deletes and when: an
// ended code and a used refresh token once they have been ended for the
// retention (the refresh idle lifetime), so that a used token presented
// again within it is still recognised as reused; a client assertion's jti
// AssertionLeeway after it expired; and nothing still in use.
func TestSweeper(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e := newEnv(t, st, nil)
		sw, err := oauth.NewSweeper(e.server, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sw.Retention() != oauth.DefaultRefreshIdle {
			t.Errorf("Retention = %s, want the refresh idle lifetime %s", sw.Retention(), oauth.DefaultRefreshIdle)
		}
		sweep := func(when string, want int) {
			t.Helper()
			if n, err := sw.Sweep(ctx); err != nil || n != want {
				t.Errorf("the sweep %s deleted %d rows, %v; want %d", when, n, err, want)
			}
		}
		c := e.register(nil)
		code, verifier := e.code(c, "alice", nil)
		first := e.redeem(c, code, verifier)
		second := e.refresh(c, first.RefreshToken) // first is used
		if second.RefreshToken == "" {
			t.Fatalf("refresh: %+v", second)
		}
		if err := st.UseClientAssertion(ctx, c.ID, "jti-a", e.clock.Now().Add(time.Minute), e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		sweep("at once", 0)

		// A minute before the retention has passed: only the assertion,
		// long expired, goes; the used token is still known, and its reuse
		// revokes the family.
		e.clock.Advance(sw.Retention() - time.Minute)
		// Another client's: a client's own use deletes its expired ones.
		d := e.register(nil)
		if err := st.UseClientAssertion(ctx, d.ID, "jti-b", e.clock.Now().Add(10*time.Second), e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		sweep("within the retention", 1)
		if tok := e.refresh(c, first.RefreshToken); tok.Error != oauth.CodeInvalidGrant || !strings.Contains(tok.Description, "already used") {
			t.Errorf("the used token within the retention: %+v, want it recognised as reused", tok)
		}

		// Past it: the code and the used token go, with the assertion
		// expired since; the token revoked a moment ago stays.
		e.clock.Advance(2 * time.Minute)
		sweep("past the retention", 3)
		if _, err := st.GetAuthorizationCode(ctx, oauth.HashSecret(code)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the code past the retention: %v, want it deleted", err)
		}
		if _, err := st.GetRefreshToken(ctx, oauth.HashSecret(first.RefreshToken)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the used token past the retention: %v, want it deleted", err)
		}
		if rt, err := st.GetRefreshToken(ctx, oauth.HashSecret(second.RefreshToken)); err != nil || rt.RevokedAt.IsZero() {
			t.Errorf("the token revoked within the retention: %+v, %v; want it kept, revoked", rt, err)
		}
		sweep("again", 0)
	})
}

// sweptStore is a real store that tells swept when a sweep has run.
type sweptStore struct {
	store.Store
	swept chan struct{}
}

// DeleteExpiredOAuth is the sweep's last call.
func (s sweptStore) DeleteExpiredOAuth(ctx context.Context, before time.Time) (int, error) {
	n, err := s.Store.DeleteExpiredOAuth(ctx, before)
	select {
	case s.swept <- struct{}{}:
	default:
	}
	return n, err
}

// TestSweeperLifecycle checks that a Sweeper sweeps at Start, starts once,
// and that Stop, idempotent, joins its goroutine (TestMain finds any
// left); and that NewSweeper refuses bad options together.
func TestSweeperLifecycle(t *testing.T) {
	t.Parallel()
	st := sweptStore{Store: storetest.NewSQLite(t), swept: make(chan struct{}, 1)}
	e := newEnv(t, st, nil)
	c := e.register(nil)
	code, _ := e.code(c, "alice", nil)
	e.clock.Advance(oauth.DefaultRefreshIdle + time.Hour)
	sw, err := oauth.NewSweeper(e.server, &oauth.SweeperOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sw.Stop() // before Start: nothing to stop
	if err := sw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-st.swept // the first sweep runs at once
	if _, err := st.GetAuthorizationCode(t.Context(), oauth.HashSecret(code)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the code ended past the retention after the first sweep: %v, want it deleted", err)
	}
	if err := sw.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	sw.Stop()
	sw.Stop()
	if _, err := oauth.NewSweeper(nil, &oauth.SweeperOptions{Interval: -time.Second}); err == nil ||
		!strings.Contains(err.Error(), "a server is required") || !strings.Contains(err.Error(), "interval") {
		t.Errorf("NewSweeper without a server and with a negative interval = %v, want both refused", err)
	}
}

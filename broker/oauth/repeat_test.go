package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
)

// reuseInterval is the RefreshReuseInterval of the repeat tests.
const reuseInterval = 30 * time.Second

// TestRefreshRepeat checks a refresh presented again within
// RefreshReuseInterval — a retry whose answer was lost, or refreshes of
// one client at once — as the client sees it: the same next refresh
// token, a new access token, a record of the repeat; and that everything
// else a second use is still revokes the family.
func TestRefreshRepeat(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, func(o *oauth.ServerOptions) { o.RefreshReuseInterval = reuseInterval })
		c := e.register(nil)
		refreshed := func(a tokenAnswer, what string) tokenAnswer {
			t.Helper()
			if a.Status != http.StatusOK || a.AccessToken == "" || a.RefreshToken == "" {
				t.Fatalf("%s: %+v, want a new access token and refresh token", what, a)
			}
			return a
		}
		revoked := func(refresh, what string) {
			t.Helper()
			if a := e.refresh(c, refresh); a.Status != http.StatusBadRequest || a.Error != oauth.CodeInvalidGrant {
				t.Errorf("%s: %+v, want invalid_grant", what, a)
			}
		}
		v, err := broker.NewVerifier(e.keys, &broker.VerifierOptions{Issuer: e.issuer, Audience: e.resource, Now: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}

		// The answer is lost; the client retries a few seconds later, with
		// the token it still holds: the same next token, a new access token
		// that verifies, and a record saying it was a repeat.
		tok := e.connect(c, "alice")
		first := refreshed(e.refresh(c, tok.RefreshToken), "the first refresh")
		e.clock.Advance(5 * time.Second)
		again := refreshed(e.refresh(c, tok.RefreshToken), "the retry")
		if again.RefreshToken != first.RefreshToken {
			t.Errorf("the retry's refresh token differs from the lost answer's: a client holding either would lose its grant")
		}
		if again.AccessToken == first.AccessToken {
			t.Error("the retry was answered the same access token")
		}
		if _, err := v.Verify(context.Background(), again.AccessToken); err != nil {
			t.Errorf("the retry's access token does not verify: %v", err)
		}
		recs, err := st.AuditRecords(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var details map[string]any
		last := recs[len(recs)-1]
		if err := json.Unmarshal(last.Details, &details); err != nil || last.Kind != "oauth_token_issued" || details["repeat"] != true {
			t.Errorf("the repeat's record = %s %s, want oauth_token_issued with repeat true", last.Kind, last.Details)
		}
		assertNoSecretsAudited(t, st, tok.RefreshToken, first.RefreshToken, again.AccessToken)

		// Another client with the token: refused, and nothing revoked.
		other := e.register(nil)
		if a := e.refresh(other, tok.RefreshToken); a.Error != oauth.CodeInvalidGrant {
			t.Errorf("another client presenting the token: %+v, want invalid_grant", a)
		}

		// The next token rotates as any; then the first token, within the
		// interval still, is a copy: the family is revoked.
		next := refreshed(e.refresh(c, first.RefreshToken), "the next token's rotation")
		e.clock.Advance(time.Second)
		revoked(tok.RefreshToken, "the first token after its successor was used")
		revoked(next.RefreshToken, "the newest token of a family revoked by a reuse")

		// After the interval: a reuse, as without repeats.
		tok = e.connect(c, "alice")
		first = refreshed(e.refresh(c, tok.RefreshToken), "a refresh")
		e.clock.Advance(reuseInterval)
		revoked(tok.RefreshToken, "the token presented again at the interval's end")
		revoked(first.RefreshToken, "the successor of a token reused after the interval")

		// Refreshes at once: one rotates the token, the others repeat it.
		tok = e.connect(c, "alice")
		const n = 4
		answers := make([]tokenAnswer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { answers[i] = e.refresh(c, tok.RefreshToken) })
		}
		wg.Wait()
		access := map[string]bool{}
		for i, a := range answers {
			refreshed(a, "a refresh of one token at once")
			if a.RefreshToken != answers[0].RefreshToken {
				t.Errorf("refresh #%d at once answered another refresh token", i)
			}
			access[a.AccessToken] = true
		}
		if len(access) != n {
			t.Errorf("%d refreshes at once were answered %d access tokens, want one each", n, len(access))
		}
		refreshed(e.refresh(c, answers[0].RefreshToken), "the rotation of the token the refreshes at once answered")

		// The sweep clears the salt of a repeat that ended unused.
		tok = e.connect(c, "alice")
		refreshed(e.refresh(c, tok.RefreshToken), "a refresh")
		sw, err := oauth.NewSweeper(e.server, nil)
		if err != nil {
			t.Fatal(err)
		}
		salt := func() string {
			t.Helper()
			rt, err := st.GetRefreshToken(context.Background(), oauth.HashSecret(tok.RefreshToken))
			if err != nil {
				t.Fatal(err)
			}
			return rt.SuccessorSalt
		}
		if _, err := sw.Sweep(context.Background()); err != nil || salt() == "" {
			t.Fatalf("a sweep within the interval: %v, salt %q; want the salt kept", err, salt())
		}
		e.clock.Advance(reuseInterval)
		if _, err := sw.Sweep(context.Background()); err != nil || salt() != "" {
			t.Errorf("a sweep after the interval: %v, salt %q; want it cleared", err, salt())
		}
	})
}

// TestRefreshRepeatAcrossASecret checks a repeat of a rotation made
// before the server's Secret was replaced: answered with the same token
// while the old secret is among PreviousSecrets, a server error (and no
// other token) without it.
func TestRefreshRepeatAcrossASecret(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		reuse := func(o *oauth.ServerOptions) { o.RefreshReuseInterval = reuseInterval }
		before := newEnv(t, st, reuse)
		c := before.register(nil)
		tok := before.connect(c, "alice")
		first := before.refresh(c, tok.RefreshToken)
		if first.Status != http.StatusOK {
			t.Fatalf("refresh: %+v", first)
		}
		newSecret := bytes.Repeat([]byte{10}, 32)
		alone := newEnv(t, st, func(o *oauth.ServerOptions) { reuse(o); o.Secret = newSecret })
		if a := alone.refresh(c, tok.RefreshToken); a.Status != http.StatusInternalServerError || a.RefreshToken != "" {
			t.Errorf("a repeat under a new secret alone: %+v, want a server error and no token", a)
		}
		both := newEnv(t, st, func(o *oauth.ServerOptions) {
			reuse(o)
			o.PreviousSecrets = [][]byte{o.Secret}
			o.Secret = newSecret
		})
		if a := both.refresh(c, tok.RefreshToken); a.Status != http.StatusOK || a.RefreshToken != first.RefreshToken {
			t.Errorf("a repeat with the old secret among the previous ones: %+v, want the same refresh token", a)
		}
	})
}

// TestConsentAcrossASecret checks a consent form rendered before the
// server's Secret was replaced: answered, with a code, by the server of
// the new Secret that keeps the old among PreviousSecrets; refused by
// one without it, which can open neither its request nor its CSRF token.
func TestConsentAcrossASecret(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		_, challenge := pkce()
		q := e.authQuery(c, challenge, nil)
		csrf, request := e.consentPage(q, "alice")
		newSecret := bytes.Repeat([]byte{10}, 32)

		e.replace(func(o *oauth.ServerOptions) { o.Secret = newSecret })
		if resp := e.approve(csrf, request, "alice", oauth.DecisionApprove); resp.StatusCode/100 == 3 {
			t.Fatalf("the form under a new secret alone: %d to %s, want it refused", resp.StatusCode, resp.Header.Get("Location"))
		}
		e.replace(func(o *oauth.ServerOptions) {
			o.PreviousSecrets = [][]byte{o.Secret}
			o.Secret = newSecret
		})
		rq := redirectQuery(t, e.approve(csrf, request, "alice", oauth.DecisionApprove), c.RedirectURI)
		if rq.Get("code") == "" || rq.Get("state") != q.Get("state") {
			t.Errorf("the form with the old secret among the previous ones: %v, want a code", rq)
		}
		if bad := e.approve(csrf+"x", request, "alice", oauth.DecisionApprove); bad.StatusCode/100 == 3 {
			t.Errorf("an altered CSRF token under either secret: %d, want it refused", bad.StatusCode)
		}
	})
}

// TestRefreshWithoutRepeats checks that with no RefreshReuseInterval a
// refresh presented again at once is a reuse, and that the option's
// bounds are enforced.
func TestRefreshWithoutRepeats(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		tok := e.connect(c, "alice")
		first := e.refresh(c, tok.RefreshToken)
		if first.Status != http.StatusOK {
			t.Fatalf("refresh: %+v", first)
		}
		if a := e.refresh(c, tok.RefreshToken); a.Error != oauth.CodeInvalidGrant {
			t.Errorf("a refresh presented again at once, without repeats: %+v, want invalid_grant", a)
		}
		if a := e.refresh(c, first.RefreshToken); a.Error != oauth.CodeInvalidGrant {
			t.Errorf("the successor of a reused token: %+v, want invalid_grant", a)
		}
	})
	if _, err := oauth.NewServer(&oauth.ServerOptions{PreviousSecrets: [][]byte{[]byte("short")}}); err == nil || !strings.Contains(err.Error(), "previous secret 1") {
		t.Errorf("NewServer with a previous secret of 5 bytes = %v, want it refused", err)
	}
	for _, d := range []time.Duration{-time.Second, oauth.MaxRefreshReuseInterval + time.Second} {
		_, err := oauth.NewServer(&oauth.ServerOptions{RefreshReuseInterval: d, Secret: bytes.Repeat([]byte{1}, 32)})
		if err == nil || !strings.Contains(err.Error(), "RefreshReuseInterval") {
			t.Errorf("NewServer with RefreshReuseInterval %s = %v, want it refused", d, err)
		}
	}
}

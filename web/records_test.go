package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// engines runs test on a server whose sessions are in SQLite, and on one
// whose sessions are in PostgreSQL.
func engines(t *testing.T, test func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { test(t, newEnv(t)) })
	t.Run("postgres", func(t *testing.T) { test(t, newEnvOn(t, storetest.NewPostgres(t))) })
}

// sessionCookie returns the session cookie b holds.
func (b *browser) sessionCookie(e *env) string {
	b.t.Helper()
	for _, c := range b.jar.Cookies(mustURL(b.t, e.url)) {
		if c.Name == "usher_session" {
			return c.Value
		}
	}
	b.t.Fatal("the browser holds no session cookie")
	return ""
}

// withCookie requests path with nothing but the session cookie value, as
// someone who copied it would.
func (e *env) withCookie(t *testing.T, method, path, value string) response {
	t.Helper()
	h := http.Header{"Cookie": {(&http.Cookie{Name: "usher_session", Value: value}).String()}, "Sec-Fetch-Site": {"same-origin"}}
	return e.browser(t).do(method, e.url+path, h, nil)
}

var sameOrigin = http.Header{"Sec-Fetch-Site": {"same-origin"}}

// TestSignOutEndsCopies checks that signing out ends the session, not
// only the cookie of the browser that asked: a copy of the cookie is
// refused afterwards, on this replica at once and on another within
// RevocationTTL; a tampered cookie, and one sealed right but for a session
// the store never recorded, are refused all along.
func TestSignOutEndsCopies(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		// A second replica: the same secret and store, its own cache.
		replica, err := New(t.Context(), &e.opts)
		if err != nil {
			t.Fatal(err)
		}
		e.mux.Handle("/replica/whoami", replica.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, _ := identity.FromContext(r.Context())
			io.WriteString(w, p.ID())
		}), e.verifier.Middleware))

		b := e.browser(t)
		b.signIn(e, "alice", "/")
		stolen := b.sessionCookie(e)
		alice := e.principalOf(t, "alice")
		for _, path := range []string{"/api/whoami", "/replica/whoami"} {
			if r := e.withCookie(t, http.MethodGet, path, stolen); r.status != http.StatusOK || r.body != alice {
				t.Fatalf("the copied cookie before sign-out at %s: %d %s", path, r.status, r.body)
			}
		}
		// Sealed with the installation's secret, but no sign-in recorded it.
		unrecorded, _ := e.sessions.session.Seal(newSession(identity.Principal{Issuer: "x", ObjectID: "y"}, e.clock.Now(), e.clock.Now().Add(time.Hour)), e.clock.Now().Add(time.Hour))
		tampered := []byte(stolen)
		tampered[len(tampered)/2] ^= 1
		if tampered[len(tampered)/2] == '`' || tampered[len(tampered)/2] == '.' {
			tampered[len(tampered)/2] = 'A'
		}
		for name, v := range map[string]string{"unrecorded": unrecorded, "tampered": string(tampered)} {
			if r := e.withCookie(t, http.MethodGet, "/api/whoami", v); r.status != http.StatusUnauthorized {
				t.Errorf("a %s cookie: %d %s", name, r.status, r.body)
			}
		}

		if r := b.do(http.MethodPost, e.url+"/auth/logout", sameOrigin, nil); r.status != http.StatusNoContent {
			t.Fatalf("logout: %d %s", r.status, r.body)
		}
		r := e.withCookie(t, http.MethodGet, "/api/whoami", stolen)
		if r.status != http.StatusUnauthorized || apiError(t, r.body) != "unauthenticated" {
			t.Fatalf("the copied cookie after sign-out: %d %s", r.status, r.body)
		}
		if c := r.cookie("usher_session"); c == nil || c.MaxAge >= 0 {
			t.Errorf("the refused copy's cookie is not deleted: %v", c)
		}
		if r := e.withCookie(t, http.MethodPost, "/api/whoami", stolen); r.status != http.StatusUnauthorized {
			t.Errorf("a POST with the copied cookie after sign-out: %d", r.status)
		}
		var v sessionView
		if err := json.Unmarshal([]byte(e.withCookie(t, http.MethodGet, "/auth/session", stolen).body), &v); err != nil || v.SignedIn {
			t.Errorf("/auth/session with the copied cookie: %+v %v", v, err)
		}

		// The other replica checked the session before the sign-out: it
		// trusts that check for RevocationTTL, and no longer.
		if r := e.withCookie(t, http.MethodGet, "/replica/whoami", stolen); r.status != http.StatusOK {
			t.Errorf("the other replica within RevocationTTL of its last check: %d (the cache is not used)", r.status)
		}
		e.clock.Advance(DefaultRevocationTTL)
		if r := e.withCookie(t, http.MethodGet, "/replica/whoami", stolen); r.status != http.StatusUnauthorized {
			t.Fatalf("the copied cookie on the other replica after RevocationTTL: %d %s", r.status, r.body)
		}
		if row, err := e.store.GetBrowserSession(t.Context(), hashSessionID(mustOpen(t, e, stolen).ID)); err != nil || row.RevokedAt.IsZero() {
			t.Errorf("the stored session after sign-out: %+v %v", row, err)
		}
	})
}

// mustOpen opens a session cookie's value.
func mustOpen(t *testing.T, e *env, value string) session {
	t.Helper()
	var sess session
	if err := e.sessions.session.Open(value, e.clock.Now(), &sess); err != nil {
		t.Fatal(err)
	}
	return sess
}

// TestSignOutEverywhere checks POST /auth/logout-all: every session of the
// caller ends, whichever browser holds it; another person's does not.
func TestSignOutEverywhere(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		laptop, phone, bobs := e.browser(t), e.browser(t), e.browser(t)
		laptop.signIn(e, "alice", "/")
		phone.signIn(e, "alice", "/")
		bobs.signIn(e, "bob", "/")
		phoneCopy := phone.sessionCookie(e)
		for _, b := range []*browser{laptop, phone, bobs} {
			if r := b.get(e.url + "/api/whoami"); r.status != http.StatusOK {
				t.Fatalf("before: %d", r.status)
			}
		}

		if r := laptop.do(http.MethodPost, e.url+"/auth/logout-all", http.Header{"Sec-Fetch-Site": {"cross-site"}}, nil); r.status != http.StatusForbidden {
			t.Fatalf("a cross-site sign-out everywhere: %d", r.status)
		}
		if r := phone.get(e.url + "/api/whoami"); r.status != http.StatusOK {
			t.Fatalf("a refused sign-out everywhere signed the phone out: %d", r.status)
		}
		if r := e.browser(t).do(http.MethodPost, e.url+"/auth/logout-all", sameOrigin, nil); r.status != http.StatusUnauthorized {
			t.Fatalf("sign-out everywhere without a session: %d", r.status)
		}
		if r := laptop.get(e.url + "/auth/logout-all"); r.status != http.StatusMethodNotAllowed {
			t.Fatalf("GET logout-all: %d", r.status)
		}

		r := laptop.do(http.MethodPost, e.url+"/auth/logout-all", sameOrigin, nil)
		var body struct{ Revoked int }
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &body) != nil || body.Revoked != 2 {
			t.Fatalf("logout-all: %d %s, want 200 with 2 revoked", r.status, r.body)
		}
		if c := r.cookie("usher_session"); c == nil || c.MaxAge >= 0 {
			t.Errorf("logout-all must delete the caller's cookie: %v", c)
		}
		for name, r := range map[string]response{
			"the laptop":          laptop.get(e.url + "/api/whoami"),
			"the phone":           phone.get(e.url + "/api/whoami"),
			"a copy of the phone": e.withCookie(t, http.MethodGet, "/api/whoami", phoneCopy),
		} {
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s after signing out everywhere: %d", name, r.status)
			}
		}
		if r := bobs.get(e.url + "/api/whoami"); r.status != http.StatusOK || r.body != e.principalOf(t, "bob") {
			t.Fatalf("bob after alice signed out everywhere: %d %s", r.status, r.body)
		}

		// With a bearer token the API accepts: from a device that has no
		// session of its own.
		token, err := e.provider.IssueAccessToken(t.Context(), "bob")
		if err != nil {
			t.Fatal(err)
		}
		if r := e.browser(t).do(http.MethodPost, e.url+"/auth/logout-all", http.Header{"Authorization": {"Bearer nope"}}, nil); r.status != http.StatusUnauthorized {
			t.Errorf("logout-all with a bad token: %d", r.status)
		}
		r = e.browser(t).do(http.MethodPost, e.url+"/auth/logout-all", http.Header{"Authorization": {"Bearer " + token}}, nil)
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &body) != nil || body.Revoked != 1 {
			t.Fatalf("logout-all with bob's token: %d %s", r.status, r.body)
		}
		if r := bobs.get(e.url + "/api/whoami"); r.status != http.StatusUnauthorized {
			t.Errorf("bob's browser after his token signed him out everywhere: %d", r.status)
		}
		// A new sign-in works again.
		laptop.signIn(e, "alice", "/")
		if r := laptop.get(e.url + "/api/whoami"); r.status != http.StatusOK {
			t.Errorf("a new sign-in after signing out everywhere: %d", r.status)
		}
	})
}

// faultyStore is the real store with failures injected on demand.
type faultyStore struct {
	store.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected failure")

func (f *faultyStore) GetBrowserSession(ctx context.Context, idHash string) (store.BrowserSession, error) {
	if f.fail.Load() {
		return store.BrowserSession{}, errInjected
	}
	return f.Store.GetBrowserSession(ctx, idHash)
}

func (f *faultyStore) RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error {
	if f.fail.Load() {
		return errInjected
	}
	return f.Store.RevokeBrowserSession(ctx, idHash, now)
}

// TestSessionStoreDown checks that a store that does not answer refuses
// the request (503) without signing anyone out or in: the cookie is kept,
// and a sign-out that was not recorded says so, so that it can be tried
// again.
func TestSessionStoreDown(t *testing.T) {
	st := &faultyStore{Store: storetest.NewSQLite(t)}
	e := newEnvOn(t, st)
	b := e.browser(t)
	b.signIn(e, "carol", "/")
	st.fail.Store(true)
	e.clock.Advance(DefaultRevocationTTL) // past the sign-in's check

	r := b.get(e.url + "/api/whoami")
	if r.status != http.StatusServiceUnavailable || apiError(t, r.body) != "session_check_failed" {
		t.Fatalf("with the store down: %d %s", r.status, r.body)
	}
	if c := r.cookie("usher_session"); c != nil {
		t.Errorf("the store being down deleted the cookie: %v", c)
	}
	r = b.do(http.MethodPost, e.url+"/auth/logout", sameOrigin, nil)
	if r.status != http.StatusServiceUnavailable || apiError(t, r.body) != "sign_out_failed" {
		t.Fatalf("logout with the store down: %d %s", r.status, r.body)
	}
	if c := r.cookie("usher_session"); c != nil {
		t.Errorf("an unrecorded sign-out deleted the cookie: %v", c)
	}
	st.fail.Store(false)
	if r := b.get(e.url + "/api/whoami"); r.status != http.StatusOK {
		t.Fatalf("with the store back: %d %s", r.status, r.body)
	}
	if r := b.do(http.MethodPost, e.url+"/auth/logout", sameOrigin, nil); r.status != http.StatusNoContent {
		t.Fatalf("logout again: %d", r.status)
	}
	if r := b.get(e.url + "/api/whoami"); r.status != http.StatusUnauthorized {
		t.Fatalf("after the retried logout: %d", r.status)
	}
}

// TestSweepDeletesEndedSessions checks Start: ended sessions go, live ones
// stay, and Start and Stop pair up.
func TestSweepDeletesEndedSessions(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	now := e.clock.Now()
	for i, expires := range []time.Time{now.Add(-time.Second), now, now.Add(time.Hour), now.Add(time.Hour)} {
		if _, err := e.store.CreateBrowserSession(ctx, store.BrowserSession{IDHash: "h" + strconv.Itoa(i), Principal: "p", CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.RevokeBrowserSession(ctx, "h3", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := e.sessions.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.sessions.Start(ctx); err == nil {
		t.Error("a second Start succeeded")
	}
	e.sessions.Stop()
	e.sessions.Stop()
	for i, want := range []bool{false, false, true, false} {
		_, err := e.store.GetBrowserSession(ctx, "h"+strconv.Itoa(i))
		if kept := err == nil; kept != want {
			t.Errorf("session %d kept: %v, want %v (%v)", i, kept, want, err)
		}
	}
	var off *Sessions
	if err := off.Start(ctx); err != nil {
		t.Errorf("Start of sign-in off: %v", err)
	}
	off.Stop()
}

// TestChecksBounded checks that the cache of checks never holds more than
// maxCachedChecks, and that a check is trusted for the TTL only.
func TestChecksBounded(t *testing.T) {
	c := &checks{ttl: time.Second, entries: map[string]check{}}
	at := time.Unix(1_800_000_000, 0)
	for i := range maxCachedChecks + 10 {
		c.put(strconv.Itoa(i), check{principal: "p", active: true, at: at})
	}
	if n := len(c.entries); n > maxCachedChecks {
		t.Fatalf("%d checks cached, more than %d", n, maxCachedChecks)
	}
	c.put("x", check{principal: "p", active: true, at: at})
	if _, ok := c.get("x", at.Add(time.Second-time.Nanosecond)); !ok {
		t.Error("a check within the TTL is not used")
	}
	if _, ok := c.get("x", at.Add(time.Second)); ok {
		t.Error("a check as old as the TTL is used")
	}
	if _, ok := c.get("x", at.Add(-time.Second)); ok {
		t.Error("a check from the future (the clock went back) is used")
	}
	c.forget("", "p")
	if len(c.entries) != 0 {
		t.Errorf("forgetting p's checks left %d", len(c.entries))
	}
}

package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// probe mounts on e a handler that answers who SignedIn says is signed in
// to the browser: the principal, "nobody", or "error: …"; and /probe/session
// that answers the session SignedIn names.
func (e *env) probe(t *testing.T) string {
	t.Helper()
	answer := func(session bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			p, sid, ok, err := e.sessions.SignedIn(r)
			switch {
			case err != nil:
				fmt.Fprint(w, "error: ", err)
			case !ok:
				fmt.Fprint(w, "nobody")
			case session:
				fmt.Fprint(w, sid)
			default:
				fmt.Fprint(w, p.ID())
			}
		}
	}
	e.mux.HandleFunc("/probe", answer(false))
	e.mux.HandleFunc("/probe/session", answer(true))
	return e.url + "/probe"
}

// TestSignedInSession checks the session SignedIn names: the same on every
// request of a sign-in, another for another sign-in of the same person,
// and neither the session's id nor its row's key.
func TestSignedInSession(t *testing.T) {
	e := newEnv(t)
	probe := e.probe(t) + "/session"
	b1, b2 := e.browser(t), e.browser(t)
	b1.signIn(e, "hana", "/")
	b2.signIn(e, "hana", "/")
	first := b1.get(probe).body
	if len(first) != 64 || first == "nobody" {
		t.Fatalf("session = %q, want a 64-character hash", first)
	}
	if again := b1.get(probe).body; again != first {
		t.Errorf("the same sign-in: %q, then %q", first, again)
	}
	if other := b2.get(probe).body; other == first || len(other) != 64 {
		t.Errorf("another sign-in of the same person: %q, the first's %q", other, first)
	}
	if _, err := e.store.GetBrowserSession(t.Context(), first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the session named finds a row (%v): it must not be its key", err)
	}
	if cookie := b1.sessionCookie(e); strings.Contains(cookie, first) || strings.Contains(first, cookie) {
		t.Errorf("the session named is in the cookie")
	}
}

// TestSignedIn checks the read-only question another handler (the OAuth
// authorization endpoint) asks: the signed-in principal, nobody for a
// cookie that does not open or a session that ended — without deleting
// the cookie — and no origin check, since a consent page is reached by a
// navigation from another site.
func TestSignedIn(t *testing.T) {
	e := newEnv(t)
	probe := e.probe(t)
	b := e.browser(t)
	if r := b.get(probe); r.body != "nobody" {
		t.Fatalf("before sign-in: %q", r.body)
	}
	b.signIn(e, "dana", "/")
	dana := e.principalOf(t, "dana")
	crossSite := http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://client.example.com"}}
	for name, r := range map[string]response{
		"GET":             b.get(probe),
		"cross-site GET":  b.do(http.MethodGet, probe, crossSite, nil),
		"cross-site POST": b.do(http.MethodPost, probe, crossSite, nil),
	} {
		if r.body != dana {
			t.Errorf("%s: %q, want %q", name, r.body, dana)
		}
	}

	good := b.sessionCookie(e)
	for name, cookie := range map[string]string{"garbage": "not-a-session", "truncated": good[:len(good)-4]} {
		r := e.withCookie(t, http.MethodGet, "/probe", cookie)
		if r.body != "nobody" || len(r.setCookies) != 0 {
			t.Errorf("%s cookie: %q, Set-Cookie %v: want nobody, and no cookie written", name, r.body, r.setCookies)
		}
	}

	if r := b.do(http.MethodPost, e.url+"/auth/logout", sameOrigin, nil); r.status != http.StatusNoContent {
		t.Fatalf("logout: %d", r.status)
	}
	if r := e.withCookie(t, http.MethodGet, "/probe", good); r.body != "nobody" || len(r.setCookies) != 0 {
		t.Errorf("a copy of a signed-out session's cookie: %q, Set-Cookie %v", r.body, r.setCookies)
	}
}

// TestSignedInStoreDown checks that a store that does not answer is an
// error, not "nobody": the caller must not send a signed-in person to sign
// in again, nor sign anyone in.
func TestSignedInStoreDown(t *testing.T) {
	st := &faultyStore{Store: storetest.NewSQLite(t)}
	e := newEnvOn(t, st)
	probe := e.probe(t)
	b := e.browser(t)
	b.signIn(e, "erin", "/")
	st.fail.Store(true)
	e.clock.Advance(DefaultRevocationTTL) // past the sign-in's check
	if r := b.get(probe); len(r.body) < 7 || r.body[:7] != "error: " {
		t.Fatalf("with the store down: %q", r.body)
	}
}

// TestLoginURL checks that a browser sent to LoginURL signs in and comes
// back to the path it was given, query and all.
func TestLoginURL(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	returnTo := "/oauth/authorize/continue?r=" + url.QueryEscape("sealed+/request=")
	u := e.sessions.LoginURL(returnTo, "")
	if want := e.url + "/auth/login?return=" + url.QueryEscape(returnTo); u != want {
		t.Fatalf("LoginURL = %q, want %q", u, want)
	}
	login := b.get(u)
	if login.status != http.StatusSeeOther {
		t.Fatalf("login: %d %s", login.status, login.body)
	}
	cb := b.get(b.authorize(login.location(), "frank"))
	if cb.status != http.StatusSeeOther || cb.location() != returnTo {
		t.Fatalf("callback: %d to %q, want %q", cb.status, cb.location(), returnTo)
	}
	// The longest return path still comes back, and the login cookie that
	// carries it stays within a browser's 4 KiB for a cookie.
	long := "/oauth/authorize/continue?r=" + strings.Repeat("A", MaxReturnPath-len("/oauth/authorize/continue?r="))
	b2 := e.browser(t)
	login = b2.get(e.sessions.LoginURL(long, long))
	for _, c := range login.setCookies {
		if n := len(c.String()); n > 4096 {
			t.Errorf("a login cookie of %d bytes, more than a browser keeps", n)
		}
	}
	if cb := b2.get(b2.authorize(login.location(), "gina")); cb.location() != long {
		t.Errorf("a return path of %d bytes came back as %q", len(long), cb.location())
	}
	if got := e.sessions.LoginURL("https://evil.example.com/", "https://evil.example.com/"); b.get(got).status != http.StatusSeeOther {
		t.Errorf("a foreign return address must still start a sign-in (that returns to /)")
	}
}

// TestSignedInOff checks a nil *Sessions: nobody is signed in, and the
// sign-in page it leads to says that browser sign-in is off.
func TestSignedInOff(t *testing.T) {
	var s *Sessions
	req, _ := http.NewRequest(http.MethodGet, "/oauth/authorize", nil)
	req.AddCookie(&http.Cookie{Name: "usher_session", Value: "x"})
	if p, sid, ok, err := s.SignedIn(req); ok || err != nil || p.Issuer != "" || p.ObjectID != "" || p.Subject != "" || sid != "" {
		t.Errorf("SignedIn = %v %q %v %v", p, sid, ok, err)
	}
	if got, want := s.LoginURL("/x?y=1", "/x?y=1&no=1"), "/auth/login?refused=%2Fx%3Fy%3D1%26no%3D1&return=%2Fx%3Fy%3D1"; got != want {
		t.Errorf("LoginURL = %q, want %q", got, want)
	}
}

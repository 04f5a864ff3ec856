package web

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

func TestSignInRoundTrip(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)

	login := b.get(e.url + "/auth/login?return=" + url.QueryEscape("/approvals/ABC?x=1"))
	if login.status != http.StatusSeeOther {
		t.Fatalf("login: %d", login.status)
	}
	to, err := url.Parse(login.location())
	if err != nil {
		t.Fatal(err)
	}
	q := to.Query()
	if to.String()[:len(e.url+"/dev/oidc/authorize")] != e.url+"/dev/oidc/authorize" {
		t.Errorf("login redirects to %s", to)
	}
	for name, want := range map[string]string{
		"response_type": "code", "client_id": devoidc.DefaultClientID,
		"redirect_uri": e.url + "/auth/callback", "code_challenge_method": "S256",
	} {
		if got := q.Get(name); got != want {
			t.Errorf("authorize %s = %q, want %q", name, got, want)
		}
	}
	if scopes := strings.Fields(q.Get("scope")); !contains(scopes, "openid") || !contains(scopes, devoidc.DefaultScope) {
		t.Errorf("scope = %q", q.Get("scope"))
	}
	if len(q.Get("state")) < 32 || len(q.Get("nonce")) < 32 || q.Get("state") == q.Get("nonce") {
		t.Errorf("state %q and nonce %q must be long and distinct", q.Get("state"), q.Get("nonce"))
	}
	if len(q.Get("code_challenge")) != 43 {
		t.Errorf("code_challenge = %q", q.Get("code_challenge"))
	}

	// The login cookie holds what the callback checks: this state and
	// nonce, and the verifier of this very challenge.
	lc := login.cookie("usher_login")
	if lc == nil {
		t.Fatal("no login cookie")
	}
	checkCookie(t, lc, false)
	var st loginState
	if err := e.sessions.login.Open(lc.Value, e.clock.Now(), &st); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(st.Verifier))
	if st.State != q.Get("state") || st.Nonce != q.Get("nonce") ||
		base64.RawURLEncoding.EncodeToString(sum[:]) != q.Get("code_challenge") || st.Return != "/approvals/ABC?x=1" {
		t.Errorf("login state %+v does not match the request", st)
	}
	if strings.Contains(lc.Value, st.Verifier) || strings.Contains(lc.Value, st.Nonce) {
		t.Error("the login cookie shows its secrets in the clear")
	}

	cb := b.get(b.authorize(login.location(), "Alice"))
	if cb.status != http.StatusSeeOther || cb.location() != "/approvals/ABC?x=1" {
		t.Fatalf("callback: %d to %q: %s", cb.status, cb.location(), cb.body)
	}
	sc := cb.cookie("usher_session")
	if sc == nil {
		t.Fatal("no session cookie")
	}
	checkCookie(t, sc, false)
	if sc.MaxAge != int(DefaultSessionLifetime/time.Second) {
		t.Errorf("session Max-Age = %d", sc.MaxAge)
	}
	if gone := cb.cookie("usher_login"); gone == nil || gone.MaxAge >= 0 {
		t.Errorf("the login cookie must be deleted by the callback: %v", gone)
	}

	want := e.principalOf(t, "alice")
	if got := b.get(e.url + "/api/whoami"); got.status != http.StatusOK || got.body != want {
		t.Fatalf("whoami with the session: %d %q, want the API's principal %q", got.status, got.body, want)
	}
	var sess sessionView
	if err := json.Unmarshal([]byte(b.get(e.url+"/auth/session").body), &sess); err != nil {
		t.Fatal(err)
	}
	if !sess.SignedIn || !sess.SignInAvailable || sess.Principal == nil || sess.Principal.ID != want || sess.Principal.Name != "alice" ||
		sess.ExpiresAt == nil || !sess.ExpiresAt.Equal(e.clock.Now().Add(DefaultSessionLifetime)) {
		t.Errorf("/auth/session = %+v", sess)
	}
}

// checkCookie checks the attributes every cookie of ours has.
func checkCookie(t *testing.T, c *http.Cookie, secure bool) {
	t.Helper()
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" || c.Secure != secure {
		t.Errorf("cookie %s: HttpOnly=%v SameSite=%v Path=%q Domain=%q Secure=%v; want HttpOnly, Lax, /, no domain, Secure=%v",
			c.Name, c.HttpOnly, c.SameSite, c.Path, c.Domain, c.Secure, secure)
	}
	if secure != strings.HasPrefix(c.Name, "__Host-") {
		t.Errorf("cookie %s: the __Host- prefix goes with Secure (%v)", c.Name, secure)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestCallbackRefusals(t *testing.T) {
	e := newEnv(t)

	// start begins a sign-in and signs in at the provider, returning the
	// browser (holding the login cookie) and the callback URL.
	start := func(t *testing.T) (*browser, string) {
		b := e.browser(t)
		login := b.get(e.url + "/auth/login")
		return b, b.authorize(login.location(), "mallory")
	}
	withQuery := func(t *testing.T, raw string, edit func(url.Values)) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		edit(q)
		u.RawQuery = q.Encode()
		return u.String()
	}
	refused := func(t *testing.T, r response, status int) {
		t.Helper()
		if r.status != status {
			t.Fatalf("callback answered %d, want %d: %s", r.status, status, r.body)
		}
		if c := r.cookie("usher_session"); c != nil && c.MaxAge >= 0 {
			t.Fatal("a refused callback set a session cookie")
		}
		if !strings.Contains(r.body, "Sign-in did not complete") || strings.Contains(r.body, "invalid_grant") {
			t.Errorf("refusal page: %s", r.body)
		}
	}

	t.Run("wrong state", func(t *testing.T) {
		b, cb := start(t)
		refused(t, b.get(withQuery(t, cb, func(q url.Values) { q.Set("state", "not-the-state") })), http.StatusBadRequest)
		// The attempt is spent: the right state afterwards is refused too.
		refused(t, b.get(cb), http.StatusBadRequest)
	})
	t.Run("no state", func(t *testing.T) {
		b, cb := start(t)
		refused(t, b.get(withQuery(t, cb, func(q url.Values) { q.Del("state") })), http.StatusBadRequest)
	})
	t.Run("another issuer named", func(t *testing.T) {
		b, cb := start(t)
		refused(t, b.get(withQuery(t, cb, func(q url.Values) { q.Set("iss", "https://evil.example.com") })), http.StatusBadRequest)
	})
	t.Run("replayed callback", func(t *testing.T) {
		b, cb := start(t)
		var loginCookie *http.Cookie
		for _, c := range b.jar.Cookies(mustURL(t, e.url)) {
			if c.Name == "usher_login" {
				loginCookie = c
			}
		}
		if first := b.get(cb); first.status != http.StatusSeeOther {
			t.Fatalf("first callback: %d %s", first.status, first.body)
		}
		// An attacker holding the callback URL and the old login cookie:
		// the code is spent.
		replay := e.browser(t)
		r := replay.do(http.MethodGet, cb, http.Header{"Cookie": {loginCookie.String()}}, nil)
		refused(t, r, http.StatusBadRequest)
		// The same browser again: its login cookie is gone.
		refused(t, b.get(cb), http.StatusBadRequest)
	})
	t.Run("callback in another browser", func(t *testing.T) {
		_, cb := start(t)
		refused(t, e.browser(t).get(cb), http.StatusBadRequest)
	})
	t.Run("sign-in too slow", func(t *testing.T) {
		b, cb := start(t)
		e.clock.Advance(loginLifetime + time.Second)
		defer e.clock.Advance(-(loginLifetime + time.Second))
		refused(t, b.get(cb), http.StatusBadRequest)
	})
	t.Run("issuer error", func(t *testing.T) {
		b := e.browser(t)
		login := b.get(e.url + "/auth/login")
		st := mustURL(t, login.location()).Query().Get("state")
		r := b.get(e.url + "/auth/callback?" + url.Values{"error": {"invalid_scope"}, "state": {st}}.Encode())
		refused(t, r, http.StatusBadRequest)
	})
	t.Run("issuer error, another state", func(t *testing.T) {
		// A link someone made: its description is not shown.
		b := e.browser(t)
		b.get(e.url + "/auth/login")
		r := b.get(e.url + "/auth/callback?" + url.Values{"error": {"access_denied"}, "error_description": {"Call 555-0100"}, "state": {"guess"}}.Encode())
		refused(t, r, http.StatusBadRequest)
		if strings.Contains(r.body, "555-0100") {
			t.Errorf("the page shows the text of a callback of another state: %s", r.body)
		}
	})
	t.Run("code forged", func(t *testing.T) {
		b, cb := start(t)
		refused(t, b.get(withQuery(t, cb, func(q url.Values) { q.Set("code", "forged") })), http.StatusBadRequest)
	})
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestAuthenticate(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	b.signIn(e, "bob", "/")
	var good string
	for _, c := range b.jar.Cookies(mustURL(t, e.url)) {
		if c.Name == "usher_session" {
			good = c.Value
		}
	}
	other, err := newSealer([]byte("another installation's secret..."), nil, "usher web session")
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Seal(newSession(identity.Principal{Issuer: "x", ObjectID: "y"}, e.clock.Now(), e.clock.Now().Add(time.Hour)), e.clock.Now().Add(time.Hour))
	loginValue, _ := e.sessions.login.Seal(loginState{State: "s"}, e.clock.Now().Add(time.Hour))
	token, err := e.provider.IssueAccessToken(t.Context(), "carol")
	if err != nil {
		t.Fatal(err)
	}
	bob, carol := e.principalOf(t, "bob"), e.principalOf(t, "carol")

	flip := []byte(good)
	flip[len(flip)/2] ^= 1
	if flip[len(flip)/2] == '`' || flip[len(flip)/2] == '.' { // keep it base64url
		flip[len(flip)/2] = 'A'
	}
	tests := []struct {
		name    string
		cookie  string
		bearer  string
		advance time.Duration
		status  int
		body    string // the principal, for 200
		cleared bool   // a Set-Cookie deletes the session cookie
	}{
		{name: "valid session", cookie: good, status: http.StatusOK, body: bob},
		{name: "nothing", status: http.StatusUnauthorized},
		{name: "tampered", cookie: string(flip), status: http.StatusUnauthorized, cleared: true},
		{name: "truncated", cookie: good[:len(good)-4], status: http.StatusUnauthorized, cleared: true},
		{name: "garbage", cookie: "not-a-session", status: http.StatusUnauthorized, cleared: true},
		{name: "expired", cookie: good, advance: DefaultSessionLifetime + time.Second, status: http.StatusUnauthorized, cleared: true},
		{name: "just before expiry", cookie: good, advance: DefaultSessionLifetime - time.Second, status: http.StatusOK, body: bob},
		{name: "sealed by another secret", cookie: foreign, status: http.StatusUnauthorized, cleared: true},
		{name: "a login cookie's value", cookie: loginValue, status: http.StatusUnauthorized, cleared: true},
		{name: "bearer token", bearer: token, status: http.StatusOK, body: carol},
		{name: "bearer token wins over the cookie", cookie: good, bearer: token, status: http.StatusOK, body: carol},
		{name: "bad bearer token is not rescued by the cookie", cookie: good, bearer: "nope", status: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.clock.Advance(tt.advance)
			defer e.clock.Advance(-tt.advance)
			h := http.Header{}
			if tt.cookie != "" {
				h.Set("Cookie", (&http.Cookie{Name: "usher_session", Value: tt.cookie}).String())
			}
			if tt.bearer != "" {
				h.Set("Authorization", "Bearer "+tt.bearer)
			}
			r := e.browser(t).do(http.MethodGet, e.url+"/api/whoami", h, nil)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status == http.StatusOK && r.body != tt.body {
				t.Errorf("principal %q, want %q", r.body, tt.body)
			}
			if tt.status == http.StatusUnauthorized && apiError(t, r.body) != "unauthenticated" {
				t.Errorf("401 body %s", r.body)
			}
			c := r.cookie("usher_session")
			if cleared := c != nil && c.MaxAge < 0; cleared != tt.cleared {
				t.Errorf("session cookie deleted: %v, want %v", cleared, tt.cleared)
			}
		})
	}
}

func TestCSRF(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	b.signIn(e, "dave", "/")
	dave := e.principalOf(t, "dave")
	tests := []struct {
		name   string
		method string
		header http.Header
		status int
	}{
		{name: "cross-site POST by Sec-Fetch-Site", method: http.MethodPost, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, status: http.StatusForbidden},
		{name: "same-site POST from a sibling", method: http.MethodPost, header: http.Header{"Sec-Fetch-Site": {"same-site"}}, status: http.StatusForbidden},
		{name: "cross-origin POST by Origin", method: http.MethodPost, header: http.Header{"Origin": {"https://evil.example.com"}}, status: http.StatusForbidden},
		{name: "cross-origin DELETE", method: http.MethodDelete, header: http.Header{"Origin": {"https://evil.example.com"}}, status: http.StatusForbidden},
		{name: "same-origin POST by Sec-Fetch-Site", method: http.MethodPost, header: http.Header{"Sec-Fetch-Site": {"same-origin"}}, status: http.StatusOK},
		{name: "same-origin POST by Origin", method: http.MethodPost, header: http.Header{"Origin": {e.url}}, status: http.StatusOK},
		{name: "POST from the https twin by Origin", method: http.MethodPost, header: http.Header{"Origin": {strings.Replace(e.url, "http://", "https://", 1)}}, status: http.StatusForbidden},
		{name: "same-origin Sec-Fetch-Site with another Origin", method: http.MethodPost, header: http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {strings.Replace(e.url, "http://", "https://", 1)}}, status: http.StatusForbidden},
		{name: "cross-site GET (safe)", method: http.MethodGet, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, status: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.do(tt.method, e.url+"/api/whoami", tt.header, strings.NewReader("{}"))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status == http.StatusForbidden && apiError(t, r.body) != "cross_origin_refused" {
				t.Errorf("403 body %s", r.body)
			}
			if tt.status == http.StatusOK && r.body != dave {
				t.Errorf("principal %q", r.body)
			}
		})
	}
}

func TestLogout(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	b.signIn(e, "erin", "/")

	if r := b.do(http.MethodPost, e.url+"/auth/logout", http.Header{"Sec-Fetch-Site": {"cross-site"}}, nil); r.status != http.StatusForbidden {
		t.Fatalf("cross-site logout: %d", r.status)
	}
	if r := b.get(e.url + "/api/whoami"); r.status != http.StatusOK {
		t.Fatalf("still signed in after a refused logout: %d", r.status)
	}
	if r := b.get(e.url + "/auth/logout"); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET logout: %d", r.status)
	}
	r := b.do(http.MethodPost, e.url+"/auth/logout", http.Header{"Sec-Fetch-Site": {"same-origin"}}, nil)
	if r.status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	if c := r.cookie("usher_session"); c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Fatalf("logout must delete the session cookie: %v", c)
	}
	if r := b.get(e.url + "/api/whoami"); r.status != http.StatusUnauthorized {
		t.Fatalf("after logout: %d", r.status)
	}
	var v sessionView
	if err := json.Unmarshal([]byte(b.get(e.url+"/auth/session").body), &v); err != nil || v.SignedIn || !v.SignInAvailable {
		t.Fatalf("/auth/session after logout: %+v %v", v, err)
	}
}

// TestHTTPSCookies checks the cookies of an https installation: __Host-
// names, Secure, and that they authenticate.
func TestHTTPSCookies(t *testing.T) {
	s, err := New(t.Context(), &Options{
		PublicURL: "https://usher.example.com",
		Issuer:    "https://login.example.com",
		Endpoints: &Endpoints{AuthURL: "https://login.example.com/authorize", TokenURL: "https://login.example.com/token", JWKSURL: "https://login.example.com/keys"},
		ClientID:  "web",
		VerifyAccessToken: func(ctx context.Context, raw string) (identity.Principal, error) {
			return identity.Principal{}, identity.ErrUnauthenticated
		},
		Secret: make([]byte, 32),
		Store:  storetest.NewSQLite(t),
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://usher.example.com/auth/login", nil))
	if rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "https://login.example.com/authorize?") {
		t.Fatalf("login: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	lc := (&http.Response{Header: rec.Header()}).Cookies()
	if len(lc) != 1 || lc[0].Name != "__Host-usher_login" {
		t.Fatalf("login cookies %v", lc)
	}
	checkCookie(t, lc[0], true)

	rec = httptest.NewRecorder()
	p := identity.Principal{Issuer: "https://login.example.com", Tenant: "t", ObjectID: "o", Name: "Frank"}
	if _, err := s.startSession(rec, httptest.NewRequest(http.MethodGet, "/", nil), p, time.Now()); err != nil {
		t.Fatal(err)
	}
	sc := (&http.Response{Header: rec.Header()}).Cookies()
	if len(sc) != 1 || sc[0].Name != "__Host-usher_session" {
		t.Fatalf("session cookies %v", sc)
	}
	checkCookie(t, sc[0], true)

	protected := s.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := identity.FromContext(r.Context())
		w.Write([]byte(p.ID()))
	}), func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	})
	for _, tt := range []struct {
		name   string
		cookie *http.Cookie
		status int
	}{
		{"the __Host- cookie", sc[0], http.StatusOK},
		{"the same value without the prefix", &http.Cookie{Name: "usher_session", Value: sc[0].Value}, http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodPost, "https://usher.example.com/api/x", nil)
		req.Header.Set("Origin", "https://usher.example.com")
		req.AddCookie(tt.cookie)
		rec := httptest.NewRecorder()
		protected.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s: %d, want %d", tt.name, rec.Code, tt.status)
		}
		if tt.status == http.StatusOK && rec.Body.String() != p.ID() {
			t.Errorf("%s: principal %q", tt.name, rec.Body.String())
		}
	}
}

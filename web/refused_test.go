package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

// Where a sign-in for an OAuth authorization request goes back to, and
// where it goes when refused.
const (
	pendingReturn  = "/oauth/authorize/continue?id=0123456789abcdef"
	pendingRefused = pendingReturn + "&signin=refused"
)

// TestTenantRefused checks a sign-in the API's verifier refuses
// (identity.ErrForbidden: a tenant not on the allow-list): a person who
// signed in to the Sessions UI is shown why, without a "Try again" that
// would only refuse again; a sign-in of an OAuth authorization request
// goes to where its refusal is told to the client.
func TestTenantRefused(t *testing.T) {
	e := newEnvWith(t, storetest.NewSQLite(t), func(o *Options) {
		v, err := identity.New(t.Context(), &identity.Options{
			Issuer:         o.Issuer,
			Audiences:      []string{devoidc.DefaultAudience},
			RequiredScopes: []string{devoidc.DefaultScope},
			Tenants:        []string{"another-tenant"},
			JWKSURL:        o.Issuer + "/jwks",
			Now:            o.Now,
			Logger:         quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		o.VerifyAccessToken = v.Verify
	})

	b := e.browser(t)
	login := b.get(e.url + "/auth/login?" + url.Values{"return": {"/sessions"}}.Encode())
	r := b.get(b.authorize(login.location(), "mallory"))
	noSession(t, r)
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "This account may not use Usher") || strings.Contains(r.body, "Try again") {
		t.Errorf("web sign-in refused: %d %s", r.status, r.body)
	}

	b = e.browser(t)
	login = b.get(e.sessions.LoginURL(pendingReturn, pendingRefused))
	r = b.get(b.authorize(login.location(), "mallory"))
	noSession(t, r)
	if r.status != http.StatusSeeOther || r.location() != pendingRefused {
		t.Errorf("OAuth sign-in refused: %d to %q, want 303 to %q", r.status, r.location(), pendingRefused)
	}
}

// TestTooManyGroupsRefused: an account whose token leaves its groups out
// (identity.ErrTooManyGroups, Entra's groups overage) is told that its
// groups cannot be checked and that it is the administrator's to fix,
// without a Try again; an OAuth client's sign-in is refused to the client.
func TestTooManyGroupsRefused(t *testing.T) {
	e := newEnvWith(t, storetest.NewSQLite(t), func(o *Options) {
		verify := o.VerifyAccessToken
		o.VerifyAccessToken = func(ctx context.Context, raw string) (identity.Principal, error) {
			p, err := verify(ctx, raw)
			if err == nil && p.Name == "carol" {
				return identity.Principal{}, fmt.Errorf("%w: %s", identity.ErrTooManyGroups, identity.GroupOverageRemedy)
			}
			return p, err
		}
	})
	b := e.browser(t)
	login := b.get(e.url + "/auth/login?" + url.Values{"return": {"/sessions"}}.Encode())
	r := b.get(b.authorize(login.location(), "carol"))
	noSession(t, r)
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "cannot check this account") || strings.Contains(r.body, "Try again") {
		t.Errorf("web sign-in with too many groups: %d %s", r.status, r.body)
	}
	b = e.browser(t)
	login = b.get(e.sessions.LoginURL(pendingReturn, pendingRefused))
	r = b.get(b.authorize(login.location(), "carol"))
	if r.status != http.StatusSeeOther || r.location() != pendingRefused {
		t.Errorf("OAuth sign-in with too many groups: %d to %q, want 303 to %q", r.status, r.location(), pendingRefused)
	}
}

// TestIssuerErrors checks what the callback answers to each kind of the
// issuer's error (RFC 6749 §4.1.2.1): access_denied (Entra: AADSTS50105,
// not assigned to the application) refuses the account, and an OAuth
// authorization request's sign-in goes to where that is told to its
// client; an issuer that is down is worth another try; any other error is
// the issuer refusing the sign-in, which trying again does not change. The
// issuer's description is shown, as text.
func TestIssuerErrors(t *testing.T) {
	e := newEnv(t)
	const desc = "AADSTS50105: Your administrator has configured the application Usher to block users <script>alert(1)</script>\r\nTrace ID: 1f2e"
	for _, tc := range []struct {
		name, code  string
		pending     bool
		status      int
		title, text string
		retry       bool
		location    string
	}{
		{name: "access_denied", code: "access_denied", status: http.StatusForbidden,
			title: "This account may not use Usher", text: "refused this account"},
		{name: "access_denied, OAuth", code: "access_denied", pending: true, status: http.StatusSeeOther, location: pendingRefused},
		{name: "unavailable", code: "temporarily_unavailable", status: http.StatusBadGateway,
			title: "Sign-in did not complete", text: "not available just now", retry: true},
		{name: "server_error, OAuth", code: "server_error", pending: true, status: http.StatusBadGateway,
			title: "Sign-in did not complete", text: "not available just now", retry: true},
		{name: "invalid_request", code: "invalid_request", status: http.StatusBadRequest,
			title: "Sign-in did not complete", text: "refused the sign-in (invalid_request)"},
		{name: "invalid_request, OAuth", code: "invalid_request", pending: true, status: http.StatusBadRequest,
			title: "Sign-in did not complete", text: "refused the sign-in (invalid_request)"},
		{name: "a code that is no code", code: "<b>\x01", status: http.StatusBadRequest,
			title: "Sign-in did not complete", text: "refused the sign-in (an unknown error)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := e.browser(t)
			u := e.url + "/auth/login?return=%2Fsessions"
			if tc.pending {
				u = e.sessions.LoginURL(pendingReturn, pendingRefused)
			}
			st := mustURL(t, b.get(u).location()).Query().Get("state")
			r := b.get(e.url + "/auth/callback?" + url.Values{"error": {tc.code}, "error_description": {desc}, "state": {st}}.Encode())
			noSession(t, r)
			if r.status != tc.status || r.location() != tc.location {
				t.Fatalf("callback: %d to %q, want %d to %q: %s", r.status, r.location(), tc.status, tc.location, r.body)
			}
			if tc.location != "" {
				return
			}
			if !strings.Contains(r.body, "<h1>"+tc.title+"</h1>") || !strings.Contains(r.body, tc.text) {
				t.Errorf("page, want %q and %q: %s", tc.title, tc.text, r.body)
			}
			if strings.Contains(r.body, "Try again") != tc.retry {
				t.Errorf("page offers Try again: %v, want %v", !tc.retry, tc.retry)
			}
			want := "AADSTS50105: Your administrator has configured the application Usher to block users &lt;script&gt;alert(1)&lt;/script&gt; Trace ID: 1f2e"
			if !strings.Contains(r.body, want) || strings.Contains(r.body, "<script>") || strings.Contains(r.body, "<b>") {
				t.Errorf("page, want the issuer's description as one line of text: %s", r.body)
			}
		})
	}
}

// TestIssuerText checks what a page shows of an issuer's description.
func TestIssuerText(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"AADSTS50105: a\r\n\tb  c": "AADSTS50105: a b c",
		"a\x00b\u202ec":            "a b c",
		strings.Repeat("é", 300):   strings.Repeat("é", maxIssuerText/2) + "…",
	} {
		if got := issuerText(in); got != want {
			t.Errorf("issuerText(%q) = %q, want %q", in, got, want)
		}
	}
}

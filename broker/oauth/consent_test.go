package oauth_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// consentView is a view every test starts from.
func consentView() oauth.ConsentView {
	return oauth.ConsentView{
		ClientName:     "MCP Inspector",
		ClientID:       "usher-dcr-abc",
		ClientKind:     oauth.ClientKindRegistered,
		RegisteredAt:   time.Date(2026, 11, 30, 9, 5, 0, 0, time.UTC),
		RegisteredFrom: "192.0.2.7",
		RedirectURI:    "http://localhost:6274/oauth/callback",
		Scopes:         []string{"mcp:invoke"},
		Resource:       "https://usher.example/mcp",
		User:           "ada@example.com",
		Action:         "/oauth/authorize/consent",
		CSRFToken:      "csrf-token-value",
		RequestID:      "req-123",
	}
}

// render renders v over a real HTTP round trip and returns the response
// and its body.
func render(t *testing.T, v oauth.ConsentView) (*http.Response, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := oauth.RenderConsent(w, v); err != nil {
			t.Errorf("RenderConsent: %v", err)
		}
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestRenderConsent(t *testing.T) {
	t.Parallel()
	resp, body := render(t, consentView())
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action 'self' http://localhost:6274; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"Cache-Control":           "no-store",
		"Referrer-Policy":         "same-origin",
		"X-Content-Type-Options":  "nosniff",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	for _, want := range []string{
		"<bdi>MCP Inspector</bdi> wants to use Usher as you",
		"Signed in as <bdi>ada@example.com</bdi>",
		"Registered itself on 30 November 2026 at 09:05 UTC from 192.0.2.7; Usher has not verified who made it.",
		"<code><bdi>localhost:6274</bdi></code> (an application on this computer)",
		"<code>mcp:invoke</code>: Use Usher&#39;s MCP tools as you",
		"https://usher.example/mcp",
		`<form method="post" action="/oauth/authorize/consent">`,
		`<input type="hidden" name="csrf_token" value="csrf-token-value">`,
		`<input type="hidden" name="request" value="req-123">`,
		`name="decision" value="approve"`,
		`name="decision" value="deny"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script") {
		t.Error("the page has a script")
	}
}

func TestRenderConsentSources(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*oauth.ConsentView)
		want   []string
	}{
		{"metadata document", func(v *oauth.ConsentView) {
			v.ClientKind = oauth.ClientKindMetadataDocument
			v.ClientID = "https://client.example/oauth/client.json"
			v.RedirectURI = "https://client.example/cb"
		}, []string{"Described by its metadata document at <code><bdi>https://client.example/oauth/client.json</bdi></code>", "<code><bdi>client.example</bdi></code>"}},
		{"configured", func(v *oauth.ConsentView) { v.ClientKind = oauth.ClientKindConfigured },
			[]string{"Configured by Usher&#39;s operators."}},
		{"registered, no date or address", func(v *oauth.ConsentView) { v.RegisteredAt = time.Time{}; v.RegisteredFrom = "" },
			[]string{"Registered itself; Usher has not verified who made it."}},
		{"no name", func(v *oauth.ConsentView) { v.ClientName = "" },
			[]string{"<bdi>An unnamed application (usher-dcr-abc)</bdi>"}},
		{"no name, no id", func(v *oauth.ConsentView) { v.ClientName = ""; v.ClientID = "" },
			[]string{"<bdi>An unnamed application</bdi>"}},
		{"private-use redirect", func(v *oauth.ConsentView) { v.RedirectURI = "com.example.app:/cb" },
			[]string{"<code><bdi>com.example.app:</bdi></code> (an application on this device)"}},
		{"IPv6 loopback redirect", func(v *oauth.ConsentView) { v.RedirectURI = "http://[::1]:5000/cb" },
			[]string{"<code><bdi>[::1]:5000</bdi></code> (an application on this computer)"}},
		{"no scopes", func(v *oauth.ConsentView) { v.Scopes = nil },
			[]string{"Nothing beyond signing you in."}},
		{"unknown scope", func(v *oauth.ConsentView) { v.Scopes = []string{"other"} },
			[]string{"<code>other</code></p>"}},
		{"no request id, no user", func(v *oauth.ConsentView) { v.RequestID = ""; v.User = "" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := consentView()
			tt.modify(&v)
			_, body := render(t, v)
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("the page lacks %q:\n%s", want, body)
				}
			}
			if v.RequestID == "" && strings.Contains(body, `name="request"`) {
				t.Error("a request field without a request id")
			}
			if v.User == "" && strings.Contains(body, "Signed in as") {
				t.Error("a greeting without a user")
			}
		})
	}
}

func TestRenderConsentHostile(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("W", 5000)
	tests := []struct {
		name     string
		modify   func(*oauth.ConsentView)
		absent   []string
		contains []string
	}{
		{"script in the name", func(v *oauth.ConsentView) { v.ClientName = `<script>alert(1)</script>` },
			[]string{"<script>"}, []string{"&lt;script&gt;alert(1)&lt;/script&gt;"}},
		{"attribute breakout in the name", func(v *oauth.ConsentView) { v.ClientName = `"><img src=x onerror=alert(1)>` },
			[]string{"<img"}, []string{"&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"}},
		{"RTL override in the name", func(v *oauth.ConsentView) { v.ClientName = "Usher Admin\u202e\u2066gpj.exe" },
			[]string{"\u202e", "\u2066"}, []string{"<bdi>Usher Admingpj.exe</bdi>"}},
		{"zero-width and controls in the name", func(v *oauth.ConsentView) { v.ClientName = "Cl\u200baude\x00\x1b[31m\u0085" },
			[]string{"\u200b", "\x00", "\x1b", "\u0085"}, []string{"<bdi>Claude[31m</bdi>"}},
		{"invalid UTF-8 in the name", func(v *oauth.ConsentView) { v.ClientName = "a\xffb" },
			[]string{"\xff", "\ufffd"}, []string{"<bdi>ab</bdi>"}},
		{"very long name", func(v *oauth.ConsentView) { v.ClientName = long },
			[]string{strings.Repeat("W", 60)}, []string{"<bdi>" + strings.Repeat("W", 59) + "…</bdi>"}},
		{"very long metadata URL", func(v *oauth.ConsentView) {
			v.ClientKind = oauth.ClientKindMetadataDocument
			v.ClientID = "https://client.example/" + long
		}, []string{strings.Repeat("W", 120)}, []string{"…</bdi></code>"}},
		{"script in the metadata URL", func(v *oauth.ConsentView) {
			v.ClientKind = oauth.ClientKindMetadataDocument
			v.ClientID = `https://client.example/"><script>alert(1)</script>`
		}, []string{"<script>"}, []string{"&lt;script&gt;"}},
		{"script in the registering address", func(v *oauth.ConsentView) { v.RegisteredFrom = "<script>x</script>" },
			[]string{"<script>"}, []string{"&lt;script&gt;"}},
		{"script in the resource", func(v *oauth.ConsentView) { v.Resource = "https://usher.example/<script>" },
			[]string{"<script>"}, []string{"&lt;script&gt;"}},
		{"script in a scope", func(v *oauth.ConsentView) { v.Scopes = []string{"<script>"} },
			[]string{"<script>"}, []string{"&lt;script&gt;"}},
		{"script in the redirect host", func(v *oauth.ConsentView) { v.RedirectURI = "https://<script>/" },
			[]string{"<script>"}, nil},
		{"javascript redirect", func(v *oauth.ConsentView) { v.RedirectURI = "javascript:alert(1)" },
			[]string{"alert(1)"}, []string{"<code><bdi>javascript:</bdi></code> (an application on this device)"}},
		{"unparsable redirect", func(v *oauth.ConsentView) { v.RedirectURI = "%zz" },
			nil, []string{"an invalid address"}},
		{"CSRF token breakout", func(v *oauth.ConsentView) { v.CSRFToken = `"><script>x</script>` },
			[]string{"<script>"}, []string{`value="&#34;&gt;&lt;script&gt;x&lt;/script&gt;"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := consentView()
			tt.modify(&v)
			_, body := render(t, v)
			for _, s := range tt.absent {
				if strings.Contains(body, s) {
					t.Errorf("the page has %q:\n%s", s, body)
				}
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("the page lacks %q:\n%s", s, body)
				}
			}
		})
	}
}

func TestRenderConsentRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		modify func(*oauth.ConsentView)
	}{
		{"no action", func(v *oauth.ConsentView) { v.Action = "" }},
		{"absolute action", func(v *oauth.ConsentView) { v.Action = "https://evil.example/steal" }},
		{"scheme-relative action", func(v *oauth.ConsentView) { v.Action = "//evil.example/steal" }},
		{"backslash action", func(v *oauth.ConsentView) { v.Action = "/\\evil.example/steal" }},
		{"javascript action", func(v *oauth.ConsentView) { v.Action = "javascript:alert(1)" }},
		{"no CSRF token", func(v *oauth.ConsentView) { v.CSRFToken = "" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := consentView()
			tt.modify(&v)
			rec := httptest.NewRecorder()
			if err := oauth.RenderConsent(rec, v); err == nil {
				t.Fatal("rendered")
			}
			if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
				t.Errorf("wrote %v %q", rec.Header(), rec.Body)
			}
		})
	}
}

// TestRedirectSource checks the form-action source of a redirect URI: the
// origin or the private-use scheme, and nothing a hostile URI could use to
// widen or end the policy.
func TestRedirectSource(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]string{
		"http://127.0.0.1:33418/callback":          "http://127.0.0.1:33418",
		"https://client.example.com/cb?x=1":        "https://client.example.com",
		"http://[::1]:8080/cb":                     "http://[::1]:8080",
		"com.example.app:/callback":                "com.example.app:",
		"https://client.example.com; script-src *": "",
		"https://a.example.com,b.example.com/":     "",
		"https://a.example.com%20*/":               "",
		"":                                         "",
		"/relative":                                "",
	} {
		if got := oauth.RedirectSourceForTest(uri); got != want {
			t.Errorf("redirect source of %q = %q, want %q", uri, got, want)
		}
	}
}

// TestConsentBoundToBrowserSession checks that a consent form is good only
// in the browser session it was shown in: the same person posting it from
// another session — another browser, or after signing in again — is
// refused, and nothing is stored; and that a sign-in without a session is
// refused rather than given a form bound to nothing.
func TestConsentBoundToBrowserSession(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		_, challenge := pkce()
		q := e.authQuery(c, challenge, nil)
		inSession := func(req *http.Request, session string) *http.Request {
			req.AddCookie(&http.Cookie{Name: "test_session", Value: session})
			return req
		}
		req, _ := http.NewRequest(http.MethodGet, e.issuer+oauth.PathAuthorize+"?"+q.Encode(), nil)
		resp, page := e.do(inSession(req, "first browser"), "alice")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("authorize: %d %s", resp.StatusCode, page)
		}
		csrf, request := consentFields(t, page)
		post := func(session string) *http.Response {
			form := url.Values{"csrf_token": {csrf}, "request": {request}, "decision": {oauth.DecisionApprove}}
			req, _ := http.NewRequest(http.MethodPost, e.issuer+oauth.PathAuthorize, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", e.issuer)
			resp, _ := e.do(inSession(req, session), "alice")
			return resp
		}
		if resp := post("second browser"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Fatalf("the form posted from another session of the same person: %d to %q, want 403", resp.StatusCode, resp.Header.Get("Location"))
		}
		if _, err := st.GetConsent(t.Context(), principal("alice").ID(), c.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused consent form stored a consent (%v)", err)
		}
		if rq := redirectQuery(t, post("first browser"), c.RedirectURI); rq.Get("code") == "" {
			t.Fatalf("the form posted from its own session: %v", rq)
		}

		// A SignedIn that names nobody's session.
		noSession := newEnv(t, st, func(o *oauth.ServerOptions) {
			o.SignedIn = func(r *http.Request) (identity.Principal, string, bool, error) {
				p, _, ok, err := signedIn(r)
				return p, "", ok, err
			}
		})
		other := noSession.register(nil)
		resp, body := noSession.get(oauth.PathAuthorize+"?"+noSession.authQuery(other, challenge, nil).Encode(), "alice")
		if resp.StatusCode != http.StatusInternalServerError || strings.Contains(body, "csrf_token") {
			t.Errorf("signed in without a session: %d %s, want 500 and no form", resp.StatusCode, body)
		}
	})
}

package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// Refused authorization requests: shown to the user when the client or
// its redirect URI is in question, else redirected with error, state and
// iss.
func TestAuthorizeRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(func(md map[string]any) {
			md["redirect_uris"] = []string{"https://app.example.com/cb", "http://127.0.0.1/native"}
		})
		c.RedirectURI = "https://app.example.com/cb"
		revoked := e.register(func(md map[string]any) { md["redirect_uris"] = []string{"https://app.example.com/cb"} })
		revoked.RedirectURI = "https://app.example.com/cb"
		if err := st.RevokeOAuthClient(context.Background(), revoked.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		_, challenge := pkce()
		for _, tc := range []struct {
			name   string
			client client
			edit   func(url.Values)
			code   string // the error, redirected or shown
			shown  bool   // shown to the user, not redirected
		}{
			{"redirect URI with a trailing slash", c, func(q url.Values) { q.Set("redirect_uri", "https://app.example.com/cb/") }, oauth.CodeInvalidRequest, true},
			{"redirect URI in another case", c, func(q url.Values) { q.Set("redirect_uri", "https://APP.example.com/cb") }, oauth.CodeInvalidRequest, true},
			{"redirect URI with an extra query", c, func(q url.Values) { q.Set("redirect_uri", "https://app.example.com/cb?x=1") }, oauth.CodeInvalidRequest, true},
			{"unknown client", client{ID: "usher-dcr-nobody", RedirectURI: c.RedirectURI}, nil, oauth.CodeInvalidRequest, true},
			{"revoked client", revoked, nil, oauth.CodeUnauthorizedClient, true},
			{"no client_id", c, func(q url.Values) { q.Del("client_id") }, oauth.CodeInvalidRequest, true},
			{"PKCE missing", c, func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, oauth.CodeInvalidRequest, false},
			{"PKCE plain", c, func(q url.Values) { q.Set("code_challenge_method", "plain") }, oauth.CodeInvalidRequest, false},
			{"another resource", c, func(q url.Values) { q.Set("resource", "https://elsewhere.example.com/mcp") }, oauth.CodeInvalidTarget, false},
			{"no resource", c, func(q url.Values) { q.Del("resource") }, oauth.CodeInvalidTarget, false},
			{"another scope", c, func(q url.Values) { q.Set("scope", "admin") }, oauth.CodeInvalidScope, false},
			{"token response type", c, func(q url.Values) { q.Set("response_type", "token") }, oauth.CodeUnsupportedResponseType, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := oauth.PathAuthorize + "?" + e.authQuery(tc.client, challenge, tc.edit).Encode()
				resp, body := e.get(path, "alice")
				if tc.shown {
					// A program gets RFC 6749 error JSON, a browser a page
					// saying the same; neither is redirected.
					checkOAuthError(t, resp, body, http.StatusBadRequest, tc.code)
					resp, body = e.getAccept(path, "alice", "text/html,application/xhtml+xml,*/*;q=0.8")
					if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" ||
						!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("X-Frame-Options") != "DENY" ||
						!strings.Contains(body, "could not authorize") || !strings.Contains(body, tc.code) {
						t.Errorf("to a browser: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
					}
					return
				}
				rq := redirectQuery(t, resp, c.RedirectURI)
				if rq.Get("error") != tc.code || rq.Get("state") != "xyz-state" || rq.Get("iss") != e.issuer || rq.Has("code") {
					t.Fatalf("redirect query %v, want error %s with state and iss", rq, tc.code)
				}
			})
		}

		// A native client's loopback redirect may take any port; another
		// path may not.
		native := c
		native.RedirectURI = "http://127.0.0.1:51234/native"
		resp, _ := e.get(oauth.PathAuthorize+"?"+e.authQuery(native, challenge, nil).Encode(), "alice")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("loopback redirect on another port: %d", resp.StatusCode)
		}
		native.RedirectURI = "http://127.0.0.1:51234/other"
		if resp, _ := e.get(oauth.PathAuthorize+"?"+e.authQuery(native, challenge, nil).Encode(), "alice"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("loopback redirect to another path: %d", resp.StatusCode)
		}
	})
}

// checkOAuthError checks that resp is an RFC 6749 §5.2 error answer: the
// status, JSON with the error code and a description, not cached, not
// redirected.
func checkOAuthError(t *testing.T, resp *http.Response, body string, status int, code string) {
	t.Helper()
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	err := json.Unmarshal([]byte(body), &oe)
	if err != nil || resp.StatusCode != status || oe.Error != code || oe.Description == "" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Location") != "" {
		t.Errorf("answer %d %q %s, want %d with OAuth error JSON %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, status, code)
	}
}

// The consent form: same-origin only, with the CSRF token of its request
// and the user it was shown to; deny redirects access_denied.
func TestConsentRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		_, challenge := pkce()
		csrf, request := e.consentPage(e.authQuery(c, challenge, nil), "alice")
		_, otherRequest := e.consentPage(e.authQuery(c, challenge, func(q url.Values) { q.Set("state", "other") }), "alice")
		post := func(form url.Values, user string, headers ...string) *http.Response {
			resp, _ := e.postForm(oauth.PathAuthorize, form, user, headers...)
			return resp
		}
		form := func(csrf, request string) url.Values {
			return url.Values{"csrf_token": {csrf}, "request": {request}, "decision": {"approve"}}
		}
		for _, tc := range []struct {
			name    string
			form    url.Values
			user    string
			headers []string
		}{
			{"cross-site origin", form(csrf, request), "alice", []string{"Origin", "https://evil.example.com"}},
			{"cross-site fetch", form(csrf, request), "alice", []string{"Origin", e.issuer, "Sec-Fetch-Site", "cross-site"}},
			{"no CSRF token", form("", request), "alice", []string{"Origin", e.issuer}},
			{"wrong CSRF token", form(oauth.NewSecret(), request), "alice", []string{"Origin", e.issuer}},
			{"CSRF token of another request", form(csrf, otherRequest), "alice", []string{"Origin", e.issuer}},
			{"another user", form(csrf, request), "mallory", []string{"Origin", e.issuer}},
			{"signed out", form(csrf, request), "", []string{"Origin", e.issuer}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp := post(tc.form, tc.user, tc.headers...)
				if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
					t.Fatalf("answer %d to %q, want 403", resp.StatusCode, resp.Header.Get("Location"))
				}
			})
		}
		if _, err := st.GetConsent(context.Background(), principal("alice").ID(), c.ID); err == nil {
			t.Fatal("a refused consent form stored a consent")
		}
		rq := redirectQuery(t, e.approve(csrf, request, "alice", oauth.DecisionDeny), c.RedirectURI)
		if rq.Get("error") != oauth.CodeAccessDenied || rq.Get("state") != "xyz-state" || rq.Has("code") {
			t.Fatalf("deny: %v", rq)
		}
		// A forged sign-in return.
		if resp, _ := e.get(oauth.PathAuthorizeContinue+"?r="+request[:len(request)-2]+"xx", "alice"); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("forged continue: %d", resp.StatusCode)
		}
		// The client revoked while its consent page was open.
		gone := e.register(nil)
		csrf2, request2 := e.consentPage(e.authQuery(gone, challenge, nil), "alice")
		if err := st.RevokeOAuthClient(context.Background(), gone.ID, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if resp := e.approve(csrf2, request2, "alice", oauth.DecisionApprove); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Fatalf("revoked while consenting: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		// An expired pending request.
		e.clock.Advance(11 * time.Minute)
		if resp := e.approve(csrf, request, "alice", oauth.DecisionApprove); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("expired request: %d", resp.StatusCode)
		}
	})
}

// Refused token requests.
func TestTokenRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		other := e.register(nil)

		t.Run("wrong verifier", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			wrong, _ := pkce()
			if tok := e.redeem(c, code, wrong); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
			// The first presentation used the code up, issuing nothing: the
			// right verifier after it is refused, as no replay of tokens.
			if tok := e.redeem(c, code, verifier); tok.Error != oauth.CodeInvalidGrant || !strings.Contains(tok.Description, "already presented, and refused") {
				t.Fatalf("the right verifier after a wrong one: %+v", tok)
			}
			if slices.Contains(e.auditKinds(), "oauth_code_replayed") {
				t.Error("a code whose first presentation was refused was recorded replayed")
			}
		})
		t.Run("no verifier", func(t *testing.T) {
			code, _ := e.code(c, "alice", nil)
			if tok := e.redeem(c, code, ""); tok.Error != oauth.CodeInvalidRequest {
				t.Fatalf("%+v", tok)
			}
		})
		t.Run("malformed verifier", func(t *testing.T) {
			// 42 characters: one short of RFC 7636's 43, though its S256
			// is the code's challenge.
			short := strings.Repeat("v", 42)
			sum := sha256.Sum256([]byte(short))
			code, _ := e.code(c, "alice", func(q url.Values) { q.Set("code_challenge", base64.RawURLEncoding.EncodeToString(sum[:])) })
			tok := e.redeem(c, code, short)
			if tok.Status != http.StatusBadRequest || tok.Error != oauth.CodeInvalidRequest ||
				tok.Description != "code_verifier must be 43 to 128 characters of A-Z, a-z, 0-9 and '-', '.', '_', '~' (RFC 7636)." {
				t.Fatalf("%+v", tok)
			}
			for _, v := range []string{strings.Repeat("v", 129), strings.Repeat("v", 42) + "+", strings.Repeat("v", 42) + "é"} {
				if tok := e.redeem(c, code, v); tok.Error != oauth.CodeInvalidRequest {
					t.Errorf("verifier %q: %+v", v, tok)
				}
			}
			// A malformed request uses nothing up: the code is still
			// unpresented, and a well-formed wrong verifier is what is
			// refused as not matching.
			if tok := e.redeem(c, code, strings.Repeat("v", 43)); tok.Error != oauth.CodeInvalidGrant || !strings.Contains(tok.Description, "does not match") {
				t.Fatalf("a well-formed wrong verifier after: %+v", tok)
			}
		})
		t.Run("code replay revokes the family", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			first := e.redeem(c, code, verifier)
			if first.Status != http.StatusOK {
				t.Fatalf("first: %+v", first)
			}
			if again := e.redeem(c, code, verifier); again.Error != oauth.CodeInvalidGrant {
				t.Fatalf("replay: %+v", again)
			}
			if tok := e.refresh(c, first.RefreshToken); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("the replayed code's refresh token still works: %+v", tok)
			}
			if !slices.Contains(e.auditKinds(), "oauth_code_replayed") {
				t.Error("no oauth_code_replayed record")
			}
		})
		t.Run("expired code", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			e.clock.Advance(61 * time.Second)
			if tok := e.redeem(c, code, verifier); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
		})
		t.Run("another redirect URI", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			tok := e.token(c, url.Values{"grant_type": {"authorization_code"}, "code": {code},
				"redirect_uri": {c.RedirectURI + "/"}, "code_verifier": {verifier}})
			if tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
		})
		t.Run("another client's code", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			if tok := e.redeem(other, code, verifier); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
		})
		t.Run("a token for another resource", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			tok := e.token(c, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.RedirectURI},
				"code_verifier": {verifier}, "resource": {"https://elsewhere.example.com/mcp"}})
			if tok.Error != oauth.CodeInvalidTarget {
				t.Fatalf("%+v", tok)
			}
			code, verifier = e.code(c, "alice", nil)
			good := e.redeem(c, code, verifier)
			tok = e.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {good.RefreshToken},
				"resource": {"https://elsewhere.example.com/mcp"}})
			if tok.Error != oauth.CodeInvalidTarget {
				t.Fatalf("refresh for another resource: %+v", tok)
			}
		})
		t.Run("another client's refresh token", func(t *testing.T) {
			code, verifier := e.code(c, "alice", nil)
			good := e.redeem(c, code, verifier)
			if tok := e.refresh(other, good.RefreshToken); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
			if tok := e.refresh(c, good.RefreshToken); tok.Status != http.StatusOK {
				t.Fatalf("the owner's refresh after another client's attempt: %+v", tok)
			}
		})
		t.Run("revoked consent", func(t *testing.T) {
			code, verifier := e.code(c, "carol", nil)
			good := e.redeem(c, code, verifier)
			if err := st.RevokeConsent(context.Background(), principal("carol").ID(), c.ID, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			if tok := e.refresh(c, good.RefreshToken); tok.Error != oauth.CodeInvalidGrant {
				t.Fatalf("%+v", tok)
			}
		})
		t.Run("revoked client", func(t *testing.T) {
			gone := e.register(nil)
			code, verifier := e.code(gone, "alice", nil)
			if err := st.RevokeOAuthClient(context.Background(), gone.ID, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			if tok := e.redeem(gone, code, verifier); tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient {
				t.Fatalf("%+v", tok)
			}
		})
		for _, tc := range []struct {
			name   string
			client client
			form   url.Values
			status int
			code   string
		}{
			{"unsupported grant", c, url.Values{"grant_type": {"password"}}, 400, oauth.CodeUnsupportedGrantType},
			{"token exchange (not in this slice)", c, url.Values{"grant_type": {oauth.GrantTokenExchange}}, 400, oauth.CodeUnsupportedGrantType},
			{"no grant type", c, url.Values{}, 400, oauth.CodeInvalidRequest},
			{"unknown client", client{ID: "usher-dcr-nobody"}, url.Values{"grant_type": {"refresh_token"}}, 401, oauth.CodeInvalidClient},
			{"no client", client{}, url.Values{"grant_type": {"refresh_token"}}, 401, oauth.CodeInvalidClient},
			{"client secret in the body", c, url.Values{"grant_type": {"refresh_token"}, "client_secret": {"x"}}, 401, oauth.CodeInvalidClient},
			{"unknown refresh token", c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {oauth.NewSecret()}}, 400, oauth.CodeInvalidGrant},
			{"unknown code", c, url.Values{"grant_type": {"authorization_code"}, "code": {"x"}, "redirect_uri": {c.RedirectURI}, "code_verifier": {strings.Repeat("a", 43)}}, 400, oauth.CodeInvalidGrant},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tok := e.token(tc.client, tc.form)
				if tok.Status != tc.status || tok.Error != tc.code || tok.header.Get("Cache-Control") != "no-store" {
					t.Fatalf("%+v, want %d %s", tok, tc.status, tc.code)
				}
			})
		}
		t.Run("JSON body", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, e.issuer+oauth.PathToken, strings.NewReader(`{"grant_type":"refresh_token"}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, _ := e.do(req, ""); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%d", resp.StatusCode)
			}
		})
		t.Run("GET", func(t *testing.T) {
			if resp, _ := e.get(oauth.PathToken, ""); resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("%d", resp.StatusCode)
			}
		})
		t.Run("repeated parameter", func(t *testing.T) {
			tok := e.token(c, url.Values{"grant_type": {"refresh_token", "refresh_token"}})
			if tok.Error != oauth.CodeInvalidRequest {
				t.Fatalf("%+v", tok)
			}
		})
	})
}

// Dynamic Client Registration: the rate limit per address, the refusals,
// and off.
func TestRegister(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, func(o *oauth.ServerOptions) { o.RegistrationsPerHour = 3 })
		for range 3 {
			e.register(nil)
		}
		resp, body := e.registerRaw(map[string]any{"redirect_uris": []string{"https://app.example.com/cb"}})
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "error") {
			t.Fatalf("flood: %d %s", resp.StatusCode, body)
		}
		e.clock.Advance(time.Hour + time.Second)
		e.register(nil)

		resp, body = e.registerRaw(map[string]any{"redirect_uris": []string{"javascript:alert(1)"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, oauth.CodeInvalidRedirectURI) {
			t.Fatalf("bad redirect: %d %s", resp.StatusCode, body)
		}
		resp, body = e.registerRaw(map[string]any{"redirect_uris": []string{"https://app.example.com/cb"}, "grant_types": []string{"client_credentials"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, oauth.CodeInvalidClientMetadata) {
			t.Fatalf("bad grant: %d %s", resp.StatusCode, body)
		}

		off := newEnv(t, st, func(o *oauth.ServerOptions) { o.Registration = false })
		resp, body = off.registerRaw(map[string]any{"redirect_uris": []string{"https://app.example.com/cb"}})
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"error"`) {
			t.Fatalf("off: %d %s", resp.StatusCode, body)
		}
		if m := off.metadata(); m.RegistrationEndpoint != "" {
			t.Errorf("registration off, but the metadata names %q", m.RegistrationEndpoint)
		}
	})
}

// Revocation (RFC 7009): a refresh token's family is revoked; anything
// else is 200 all the same.
func TestRevoke(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		other := e.register(nil)
		code, verifier := e.code(c, "alice", nil)
		tok := e.redeem(c, code, verifier)
		next := e.refresh(c, tok.RefreshToken)

		revoke := func(cl client, token string) int {
			resp, _ := e.postForm(oauth.PathRevoke, url.Values{"client_id": {cl.ID}, "token": {token}, "token_type_hint": {"access_token"}}, "")
			return resp.StatusCode
		}
		if got := revoke(other, next.RefreshToken); got != http.StatusOK {
			t.Fatalf("another client's token: %d", got)
		}
		if r := e.refresh(c, next.RefreshToken); r.Status != http.StatusOK {
			t.Fatalf("another client revoked the token: %+v", r)
		} else {
			next = r
		}
		for _, token := range []string{tok.AccessToken, "garbage", next.RefreshToken} {
			if got := revoke(c, token); got != http.StatusOK {
				t.Fatalf("revoke: %d", got)
			}
		}
		if r := e.refresh(c, next.RefreshToken); r.Error != oauth.CodeInvalidGrant {
			t.Fatalf("a revoked token still refreshes: %+v", r)
		}
		if !slices.Contains(e.auditKinds(), "oauth_token_revoked") {
			t.Error("no oauth_token_revoked record")
		}
		resp, _ := e.postForm(oauth.PathRevoke, url.Values{"client_id": {"usher-dcr-nobody"}, "token": {"x"}}, "")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unknown client: %d", resp.StatusCode)
		}
	})
}

// The handler serves the metadata, and the CORS preflight of the token
// endpoint.
func TestHandlerPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	resp, body := e.get(oauth.PathMetadata, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"issuer": "`+e.issuer+`"`) {
		t.Fatalf("metadata: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodOptions, e.issuer+oauth.PathToken, nil)
	resp, _ = e.do(req, "")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, body := e.get("/oauth/nothing", ""); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Fatalf("unknown path: %d %s", resp.StatusCode, body)
	}
}

// The server's metadata announces what its endpoints do.
func TestServerMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	m := e.metadata()
	if slices.Contains(m.GrantTypesSupported, oauth.GrantTokenExchange) {
		t.Errorf("the metadata announces what the server does not do: %+v", m)
	}
	for _, l := range [][]string{m.TokenEndpointAuthMethodsSupported, m.RevocationEndpointAuthMethodsSupported} {
		if !slices.Equal(l, []string{oauth.AuthNone, oauth.AuthClientSecretBasic, oauth.AuthPrivateKeyJWT}) {
			t.Errorf("authentication methods %v, want none, client_secret_basic and private_key_jwt", l)
		}
	}
	for _, l := range [][]string{m.TokenEndpointAuthSigningAlgs, m.RevocationEndpointAuthSigningAlgs} {
		if !slices.Equal(l, []string{"RS256", "ES256"}) {
			t.Errorf("signing algorithms %v, want RS256 and ES256", l)
		}
	}
	if m.RegistrationEndpoint != e.issuer+oauth.PathRegister || m.ClientIDMetadataDocumentSupported {
		t.Errorf("registration %q, CIMD %v (no Fetcher)", m.RegistrationEndpoint, m.ClientIDMetadataDocumentSupported)
	}
}

// An issuer with a path: the endpoints are under it, the metadata at the
// path-inserted well-known place.
func TestIssuerWithPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	var opts oauth.ServerOptions
	newEnv(t, e.st, func(o *oauth.ServerOptions) { opts = *o })
	opts.Issuer = "https://usher.example.com/tenant"
	opts.Resources = []string{"https://usher.example.com/tenant/mcp"}
	s, err := oauth.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for path, want := range map[string]int{
		oauth.PathMetadata + "/tenant":            http.StatusOK,
		"/tenant" + oauth.PathToken:               http.StatusMethodNotAllowed,
		"/tenant" + oauth.PathAuthorize:           http.StatusBadRequest,
		"/tenant" + oauth.PathRegister:            http.StatusMethodNotAllowed,
		oauth.PathOpenIDConfiguration + "/tenant": http.StatusNotFound,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
		}
	}
}

// NewServer refuses incomplete or unsafe options.
func TestNewServerRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	var base oauth.ServerOptions
	newEnv(t, e.st, func(o *oauth.ServerOptions) { base = *o })
	for name, edit := range map[string]func(*oauth.ServerOptions){
		"no issuer":           func(o *oauth.ServerOptions) { o.Issuer = "" },
		"http issuer":         func(o *oauth.ServerOptions) { o.Issuer = "http://usher.example.com" },
		"no resources":        func(o *oauth.ServerOptions) { o.Resources = nil },
		"a resource fragment": func(o *oauth.ServerOptions) { o.Resources = []string{"https://usher.example.com/mcp#x"} },
		"no store":            func(o *oauth.ServerOptions) { o.Store = nil },
		"no broker":           func(o *oauth.ServerOptions) { o.Broker = nil },
		"no audit":            func(o *oauth.ServerOptions) { o.Audit = nil },
		"no SignedIn":         func(o *oauth.ServerOptions) { o.SignedIn = nil },
		"no LoginURL":         func(o *oauth.ServerOptions) { o.LoginURL = nil },
		"short secret":        func(o *oauth.ServerOptions) { o.Secret = []byte("short") },
		"long code lifetime":  func(o *oauth.ServerOptions) { o.CodeLifetime = 2 * time.Minute },
		"absolute < idle":     func(o *oauth.ServerOptions) { o.RefreshAbsolute = time.Hour; o.RefreshIdle = 2 * time.Hour },
		"negative rate":       func(o *oauth.ServerOptions) { o.RegistrationsPerHour = -1 },
	} {
		o := base
		edit(&o)
		if _, err := oauth.NewServer(&o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := oauth.NewServer(nil); err == nil {
		t.Error("nil options accepted")
	}
}

// TestOversizedBodiesInOAuthForm checks that the bodies Usher's router
// refuses before any endpoint runs (httpx.ReadBodyFor, over
// server.max_body_bytes) are answered at the OAuth endpoints as OAuth
// clients read them — invalid_client_metadata at the registration
// endpoint, invalid_request at the others — and elsewhere in the API's
// shape.
func TestOversizedBodiesInOAuthForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	const limit = 64 << 10
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux := http.NewServeMux()
	mux.Handle("/oauth/", e.server.Handler())
	mux.Handle("/api/", api)
	srv := httptest.NewServer(httpx.ReadBodyFor(limit, time.Minute, e.server.RefuseBody(nil), mux))
	t.Cleanup(srv.Close)
	huge := strings.Repeat("a", limit+1)
	for _, tc := range []struct {
		path, contentType string
		status            int
		code              string
	}{
		{oauth.PathRegister, "application/json", http.StatusBadRequest, oauth.CodeInvalidClientMetadata},
		{oauth.PathToken, "application/x-www-form-urlencoded", http.StatusBadRequest, oauth.CodeInvalidRequest},
		{oauth.PathRevoke, "application/x-www-form-urlencoded", http.StatusBadRequest, oauth.CodeInvalidRequest},
		{oauth.PathAuthorize, "application/x-www-form-urlencoded", http.StatusBadRequest, oauth.CodeInvalidRequest},
	} {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(`{"x":"` + huge + `"}`)
			if chunked {
				body = io.MultiReader(body) // no length: read until the limit
			}
			resp, err := http.Post(srv.URL+tc.path, tc.contentType, body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkOAuthError(t, resp, string(b), tc.status, tc.code)
		}
	}
	resp, err := http.Post(srv.URL+"/api/x", "application/json", strings.NewReader(huge))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"body_too_large"`) {
		t.Errorf("elsewhere: %d %s, want the API's 413 body_too_large", resp.StatusCode, b)
	}
}

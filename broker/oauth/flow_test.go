package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The whole flow: register → authorize (sent to sign in, back) → consent →
// code → token → the access token verifies for the resource → refresh →
// the rotated token's reuse is detected and revokes the family.
func TestFlow(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		verifier, challenge := pkce()
		q := e.authQuery(c, challenge, nil)

		// Not signed in: to the sign-in, coming back to a short local path.
		resp, _ := e.get(oauth.PathAuthorize+"?"+q.Encode(), "")
		login, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || err != nil || login.Path != "/login" {
			t.Fatalf("not signed in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		returnTo := login.Query().Get("return_to")
		if !strings.HasPrefix(returnTo, oauth.PathAuthorizeContinue+"?id=") || len(returnTo) > 64 {
			t.Fatalf("return_to = %q", returnTo)
		}

		// Signed in, back: the consent page. The request continues once,
		// in the browser that started it.
		other := *e
		other.http = &http.Client{CheckRedirect: e.http.CheckRedirect}
		if resp, _ := other.get(returnTo, "alice"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("continue in another browser: %d, want 400", resp.StatusCode)
		}
		resp, page := e.get(returnTo, "alice")
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Test Client") {
			t.Fatalf("continue: %d %s", resp.StatusCode, page)
		}
		if resp, _ := e.get(returnTo, "alice"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("continue again: %d, want 400", resp.StatusCode)
		}
		csrf, request := consentFields(t, page)
		rq := redirectQuery(t, e.approve(csrf, request, "alice", oauth.DecisionApprove), c.RedirectURI)
		if rq.Get("state") != "xyz-state" || rq.Get("iss") != e.issuer || rq.Get("code") == "" {
			t.Fatalf("redirect query %v: want code, state and iss", rq)
		}

		tok := e.redeem(c, rq.Get("code"), verifier)
		if tok.Status != http.StatusOK || tok.TokenType != "Bearer" || tok.RefreshToken == "" || tok.Scope != "mcp:invoke" || tok.ExpiresIn <= 0 {
			t.Fatalf("token: %+v", tok)
		}
		if tok.header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q", tok.header.Get("Cache-Control"))
		}
		v, err := broker.NewVerifier(e.keys, &broker.VerifierOptions{Issuer: e.issuer, Audience: e.resource, Now: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		claims, err := v.Verify(context.Background(), tok.AccessToken)
		if err != nil {
			t.Fatalf("the access token does not verify: %v", err)
		}
		p := principal("alice")
		if claims.Subject != p.ID() || claims.ClientID != c.ID || claims.Tenant != p.Tenant || !slices.Equal(claims.Groups, p.Groups) {
			t.Errorf("claims %+v, want subject %s, client %s, tenant and groups", claims, p.ID(), c.ID)
		}
		if other, _ := broker.NewVerifier(e.keys, &broker.VerifierOptions{Issuer: e.issuer, Audience: e.issuer + "/other"}); other != nil {
			if _, err := other.Verify(context.Background(), tok.AccessToken); err == nil {
				t.Error("the access token verifies for another resource")
			}
		}

		next := e.refresh(c, tok.RefreshToken)
		if next.Status != http.StatusOK || next.AccessToken == "" || next.RefreshToken == "" || next.RefreshToken == tok.RefreshToken {
			t.Fatalf("refresh: %+v", next)
		}
		if _, err := v.Verify(context.Background(), next.AccessToken); err != nil {
			t.Fatalf("the refreshed access token does not verify: %v", err)
		}
		// Reuse of the rotated token: refused, and the family revoked, so
		// its successor stops working too.
		if again := e.refresh(c, tok.RefreshToken); again.Status != http.StatusBadRequest || again.Error != oauth.CodeInvalidGrant {
			t.Fatalf("reuse: %+v", again)
		}
		if after := e.refresh(c, next.RefreshToken); after.Error != oauth.CodeInvalidGrant {
			t.Fatalf("the successor of a reused token still works: %+v", after)
		}

		// The consent is remembered: the next request gets a code at once.
		verifier2, challenge2 := pkce()
		resp, _ = e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge2, nil).Encode(), "alice")
		rq = redirectQuery(t, resp, c.RedirectURI)
		if tok := e.redeem(c, rq.Get("code"), verifier2); tok.Status != http.StatusOK {
			t.Fatalf("second code: %+v", tok)
		}

		kinds := e.auditKinds()
		for _, want := range []string{"oauth_client_registered", "oauth_consent_given", "oauth_token_issued", "oauth_refresh_reused"} {
			if !slices.Contains(kinds, want) {
				t.Errorf("audit kinds %v lack %s", kinds, want)
			}
		}
		assertNoSecretsAudited(t, st, tok.AccessToken, tok.RefreshToken, next.RefreshToken, rq.Get("code"))
	})
}

// assertNoSecretsAudited fails when an audit record holds one of secrets.
func assertNoSecretsAudited(t *testing.T, st store.Store, secrets ...string) {
	t.Helper()
	recs, err := st.AuditRecords(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		all := strings.Join([]string{r.Principal, r.ClientID, r.TokenJTI, string(r.Details)}, " ")
		for _, s := range secrets {
			if s != "" && strings.Contains(all, s) {
				t.Errorf("audit record %d (%s) holds a secret", r.Seq, r.Kind)
			}
		}
	}
}

// A client whose client_id is the URL of its metadata document: fetched,
// stored, shown on the consent page, and issued tokens.
func TestMetadataDocumentClient(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		id, f := docServer(t, func(id string) map[string]any {
			return map[string]any{
				"client_id": id, "client_name": "Document Client",
				"redirect_uris": []string{"http://127.0.0.1:4000/cb"},
				"grant_types":   []string{"authorization_code", "refresh_token"},
			}
		})
		e := newEnv(t, st, func(o *oauth.ServerOptions) { o.Clients = f })
		c := client{ID: id, RedirectURI: "http://127.0.0.1:4000/cb"}
		_, challenge := pkce()
		resp, page := e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge, nil).Encode(), "bob")
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Document Client") || !strings.Contains(page, "metadata document") {
			t.Fatalf("consent page: %d %s", resp.StatusCode, page)
		}
		stored, err := st.GetOAuthClient(context.Background(), id)
		if err != nil || stored.Kind != store.OAuthClientMetadataDocument || stored.Name != "Document Client" {
			t.Fatalf("stored client %+v, %v", stored, err)
		}
		code, verifier := e.code(c, "bob", nil)
		if tok := e.redeem(c, code, verifier); tok.Status != http.StatusOK || tok.RefreshToken == "" {
			t.Fatalf("token: %+v", tok)
		}

		// Without a Fetcher, such a client_id is unknown.
		off := newEnv(t, st, nil)
		resp, _ = off.get(oauth.PathAuthorize+"?"+off.authQuery(client{ID: "https://example.com:1/other.json", RedirectURI: c.RedirectURI}, challenge, nil).Encode(), "bob")
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Fatalf("without CIMD: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
}

// A confidential client authenticates with client_secret_basic.
func TestConfidentialClient(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(func(md map[string]any) {
			md["token_endpoint_auth_method"] = "client_secret_basic"
			md["redirect_uris"] = []string{"https://app.example.com/callback"}
		})
		if c.Secret == "" {
			t.Fatal("no secret for a client_secret_basic client")
		}
		code, verifier := e.code(c, "alice", nil)
		wrong := c
		wrong.Secret = oauth.NewSecret()
		if tok := e.redeem(wrong, code, verifier); tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient || tok.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("wrong secret: %+v", tok)
		}
		// The code was not touched by the failed authentication.
		if tok := e.redeem(c, code, verifier); tok.Status != http.StatusOK {
			t.Fatalf("token: %+v", tok)
		}
		public := c
		public.Secret = ""
		if tok := e.refresh(public, "x"); tok.Status != http.StatusUnauthorized {
			t.Fatalf("a confidential client without its secret: %+v", tok)
		}
	})
}

// Of concurrent refreshes of one token, exactly one succeeds, and the
// family is revoked for the rest (reuse detection); of concurrent
// redemptions of one code, at most one succeeds, and its tokens are
// revoked by the others (a replay).
func TestConcurrentRedemptions(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		const n = 4
		race := func(f func() tokenAnswer) (ok []tokenAnswer) {
			answers := make(chan tokenAnswer, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() { answers <- f() })
			}
			wg.Wait()
			close(answers)
			for a := range answers {
				if a.Status == http.StatusOK {
					ok = append(ok, a)
				} else if a.Error != oauth.CodeInvalidGrant {
					t.Errorf("a losing attempt: %+v", a)
				}
			}
			return ok
		}
		// A code presented twice at once is a replay: at most one
		// presentation wins, and the replays revoke what it issued.
		code, verifier := e.code(c, "alice", nil)
		won := race(func() tokenAnswer { return e.redeem(c, code, verifier) })
		if len(won) > 1 {
			t.Fatalf("%d of %d redemptions of one code succeeded", len(won), n)
		}
		if len(won) == 1 {
			if a := e.refresh(c, won[0].RefreshToken); a.Error != oauth.CodeInvalidGrant {
				t.Fatalf("the refresh token of a replayed code works: %+v", a)
			}
		}

		code, verifier = e.code(c, "alice", nil)
		won = []tokenAnswer{e.redeem(c, code, verifier)}
		refreshed := race(func() tokenAnswer { return e.refresh(c, won[0].RefreshToken) })
		if len(refreshed) != 1 {
			t.Fatalf("%d of %d refreshes of one token succeeded", len(refreshed), n)
		}
		if a := e.refresh(c, refreshed[0].RefreshToken); a.Error != oauth.CodeInvalidGrant {
			t.Fatalf("the winner's token survived the reuse: %+v", a)
		}
	})
}

// TestLargeRequestWaitsForSignIn checks that an authorization request
// with the longest state the endpoint takes, every character escaped,
// waits for the sign-in in its cookie behind a short continue path, and
// that one too large for a cookie is refused to the client rather than
// lost in the sign-in.
func TestLargeRequestWaitsForSignIn(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	e := newEnv(t, st, nil)
	long := "http://127.0.0.1:41234/" + strings.Repeat("callback/", 20)
	c := e.register(func(md map[string]any) { md["redirect_uris"] = []string{long} })
	_, challenge := pkce()
	q := e.authQuery(c, challenge, func(q url.Values) { q.Set("state", strings.Repeat("/+=", 1000/3)) })
	resp, _ := e.get(oauth.PathAuthorize+"?"+q.Encode(), "")
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("authorize signed out: %d", resp.StatusCode)
	}
	ret := loc.Query().Get("return_to")
	if !strings.HasPrefix(ret, oauth.PathAuthorizeContinue+"?id=") || len(ret) > 64 {
		t.Fatalf("sent to sign in with return %q (Location %q)", ret, resp.Header.Get("Location"))
	}
	if resp, page := e.get(ret, "alice"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Test Client") {
		t.Fatalf("continue: %d", resp.StatusCode)
	}

	// A redirect URI as long as a registration takes, and the longest
	// state: more than a cookie holds.
	huge := "http://127.0.0.1:41234/" + strings.Repeat("x", 1900)
	c2 := e.register(func(md map[string]any) { md["redirect_uris"] = []string{huge} })
	q2 := e.authQuery(c2, challenge, func(q url.Values) { q.Set("state", strings.Repeat("%", 1000)) })
	resp, _ = e.get(oauth.PathAuthorize+"?"+q2.Encode(), "")
	rq := redirectQuery(t, resp, huge)
	if rq.Get("error") != oauth.CodeInvalidRequest || rq.Get("state") != q2.Get("state") {
		t.Errorf("a request too large to wait: %v, want invalid_request to the client with its state", rq)
	}
}

// TestConsentAnsweredOnce checks that a consent form is answered once,
// whichever way: posted again (a double click, a replay of a captured
// form, Approve after Deny, Deny after Approve) it is refused, and no code
// and no second consent come of it.
func TestConsentAnsweredOnce(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		for _, tc := range []struct{ first, second string }{
			{oauth.DecisionApprove, oauth.DecisionApprove},
			{oauth.DecisionDeny, oauth.DecisionApprove},
			{oauth.DecisionApprove, oauth.DecisionDeny},
			{oauth.DecisionDeny, oauth.DecisionDeny},
		} {
			t.Run(tc.first+" then "+tc.second, func(t *testing.T) {
				// Bob, with no remembered consent, answers each form.
				if err := st.RevokeConsent(t.Context(), principal("bob").ID(), c.ID, time.Now()); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
					t.Fatal(err)
				}
				_, challenge := pkce()
				csrf, request := e.consentPage(e.authQuery(c, challenge, nil), "bob")
				consents := strings.Count(strings.Join(e.auditKinds(), " "), "oauth_consent_given")
				first := redirectQuery(t, e.approve(csrf, request, "bob", tc.first), c.RedirectURI)
				if (tc.first == oauth.DecisionApprove) != first.Has("code") {
					t.Fatalf("first answer, %s: %v", tc.first, first)
				}
				resp := e.approve(csrf, request, "bob", tc.second)
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
					t.Errorf("the form posted again with %s: %d to %q, want 400 and no redirect", tc.second, resp.StatusCode, resp.Header.Get("Location"))
				}
				want := consents
				if tc.first == oauth.DecisionApprove {
					want++
				}
				if got := strings.Count(strings.Join(e.auditKinds(), " "), "oauth_consent_given"); got != want {
					t.Errorf("audit kinds %v: %d oauth_consent_given, want %d", e.auditKinds(), got, want)
				}
				if tc.first == oauth.DecisionDeny {
					if cs, err := st.GetConsent(t.Context(), principal("bob").ID(), c.ID); err == nil && cs.RevokedAt.IsZero() {
						t.Errorf("a consent stands after Deny: %+v", cs)
					}
				}
			})
		}
	})
}

// TestRefusedSignIn checks that an authorization request whose sign-in is
// refused — the identity provider's access_denied, a tenant not on the
// allow-list — is refused to its client with access_denied and its state
// (RFC 6749 §4.1.2.1), which would otherwise wait for an answer, and that
// the request is spent.
func TestRefusedSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storetest.NewSQLite(t), nil)
	c := e.register(nil)
	_, challenge := pkce()
	resp, _ := e.get(oauth.PathAuthorize+"?"+e.authQuery(c, challenge, nil).Encode(), "")
	login, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("authorize signed out: %d", resp.StatusCode)
	}
	returnTo, refusedTo := login.Query().Get("return_to"), login.Query().Get("refused_to")
	if want := returnTo + "&" + oauth.ParamSignIn + "=" + oauth.SignInRefused; refusedTo != want {
		t.Fatalf("refused_to = %q, want %q", refusedTo, want)
	}

	// Another browser, without the request's cookie, learns nothing.
	other := *e
	other.http = &http.Client{CheckRedirect: e.http.CheckRedirect}
	if resp, _ := other.get(refusedTo, ""); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("refused in another browser: %d to %q, want 400", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = e.get(refusedTo, "")
	rq := redirectQuery(t, resp, c.RedirectURI)
	if rq.Get("error") != oauth.CodeAccessDenied || rq.Get("state") != "xyz-state" || rq.Get("iss") != e.issuer ||
		rq.Get("error_description") == "" || rq.Has("code") {
		t.Fatalf("refused sign-in: %v, want access_denied with state, iss and a description", rq)
	}
	if resp, _ := e.get(returnTo, "alice"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the request continued after its refusal: %d, want 400", resp.StatusCode)
	}
}

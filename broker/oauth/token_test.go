package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestTokenRefusesUnfitGrant checks that a code or refresh grant for a
// person in more groups than an access token carries is refused with
// invalid_grant, not a server error, and issues nothing: the code is used
// up as by any refused redemption, the refresh token is left as it was.
func TestTokenRefusesUnfitGrant(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e := newEnv(t, st, nil)
		c := e.register(nil)
		issued := func() int {
			n := 0
			for _, k := range e.auditKinds() {
				if k == "oauth_token_issued" {
					n++
				}
			}
			return n
		}
		unfit := func(what string, tok tokenAnswer) {
			t.Helper()
			if tok.Status != http.StatusBadRequest || tok.Error != oauth.CodeInvalidGrant || !strings.Contains(tok.Description, "groups") ||
				tok.AccessToken != "" || tok.RefreshToken != "" {
				t.Errorf("%s for a person in too many groups: %+v, want 400 invalid_grant about the groups", what, tok)
			}
		}

		// The authorization endpoint refuses such a person at once
		// (TestAuthorizeRefusesUnfitPerson); a code of theirs stored
		// before their groups grew is refused at the token endpoint.
		p := principal(crowdUser)
		sub, _ := json.Marshal(map[string]any{"tenant": p.Tenant, "groups": p.Groups})
		code := oauth.NewSecret()
		verifier, challenge := pkce()
		if err := st.CreateAuthorizationCode(ctx, store.AuthorizationCode{
			CodeHash: oauth.HashSecret(code), ClientID: c.ID, Principal: p.ID(), Subject: sub,
			RedirectURI: c.RedirectURI, CodeChallenge: challenge,
			Resource: e.resource, Scope: "mcp:invoke", CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Minute),
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutConsent(ctx, store.Consent{Principal: p.ID(), ClientID: c.ID, Scope: "mcp:invoke", Resource: e.resource}); err != nil {
			t.Fatal(err)
		}
		unfit("the code grant", e.redeem(c, code, verifier))
		if tok := e.redeem(c, code, verifier); tok.Error != oauth.CodeInvalidGrant || tok.AccessToken != "" {
			t.Errorf("the refused code again: %+v, want invalid_grant", tok)
		}

		// A refresh token of such a person (issued before their groups
		// grew, say).
		now := e.clock.Now()
		raw := oauth.NewSecret()
		if err := st.IssueRefreshToken(ctx, store.RefreshToken{
			TokenHash: oauth.HashSecret(raw), FamilyID: "crowd-family", ClientID: c.ID, Principal: p.ID(), Subject: sub,
			Resource: e.resource, Scope: "mcp:invoke", CreatedAt: now, ExpiresAt: now.Add(time.Hour), FamilyExpiresAt: now.Add(2 * time.Hour),
		}); err != nil {
			t.Fatal(err)
		}
		unfit("the refresh grant", e.refresh(c, raw))
		if rt, err := st.GetRefreshToken(ctx, oauth.HashSecret(raw)); err != nil || !rt.UsedAt.IsZero() || !rt.RevokedAt.IsZero() {
			t.Errorf("the refused refresh token: %+v, %v; want it unused and not revoked", rt, err)
		}
		if n := issued(); n != 0 {
			t.Errorf("%d oauth_token_issued records, want none", n)
		}

		// Anyone else is served as before.
		code, verifier = e.code(c, "alice", nil)
		if tok := e.redeem(c, code, verifier); tok.Status != http.StatusOK {
			t.Fatalf("alice's code: %+v", tok)
		}
	})
}

// TestUnsupportedGrantType checks that an unsupported grant type is
// answered with the grant types the server supports: the token exchange
// only when it is on.
func TestUnsupportedGrantType(t *testing.T) {
	t.Parallel()
	refuse := func(o *oauth.ServerOptions) { o.VerifySubjectToken = refuseSubjectTokens }
	for _, tc := range []struct {
		name string
		edit func(*oauth.ServerOptions)
		want string
	}{
		{"exchange off", refuse, "The grant types are authorization_code, refresh_token."},
		{"exchange on", func(o *oauth.ServerOptions) { refuse(o); o.ExchangeClients = []string{"ci-bot"} },
			"The grant types are authorization_code, refresh_token, " + oauth.GrantTokenExchange + "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, storetest.NewSQLite(t), tc.edit)
			c := e.register(nil)
			tok := e.token(c, url.Values{"grant_type": {"password"}})
			if tok.Status != http.StatusBadRequest || tok.Error != oauth.CodeUnsupportedGrantType || tok.Description != tc.want {
				t.Errorf("%+v, want 400 unsupported_grant_type %q", tok, tc.want)
			}
			if got := e.metadata().GrantTypesSupported; !slices.Equal(got, strings.Split(strings.TrimSuffix(strings.TrimPrefix(tc.want, "The grant types are "), "."), ", ")) {
				t.Errorf("the metadata's grant_types_supported %v differ from %q", got, tc.want)
			}
		})
	}
}

// refuseSubjectTokens is a subject token verifier that accepts none.
func refuseSubjectTokens(context.Context, string) (identity.Principal, error) {
	return identity.Principal{}, errors.New("no subject token is accepted here")
}

// TestAuthorizeRefusesUnfitPerson checks that a person in more groups
// than an access token carries is told so at the authorization endpoint,
// before any consent, in an access_denied redirect, and that nothing is
// stored for them.
func TestAuthorizeRefusesUnfitPerson(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		_, challenge := pkce()
		q := e.authQuery(c, challenge, nil)
		resp, _ := e.get(oauth.PathAuthorize+"?"+q.Encode(), crowdUser)
		rq := redirectQuery(t, resp, q.Get("redirect_uri"))
		if rq.Get("error") != oauth.CodeAccessDenied || !strings.Contains(rq.Get("error_description"), "groups") ||
			rq.Get("code") != "" || rq.Get("state") != q.Get("state") {
			t.Errorf("authorization for a person in too many groups redirected with %v, want access_denied about the groups, the state, no code", rq)
		}
		if _, err := st.GetConsent(context.Background(), principal(crowdUser).ID(), c.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a consent was stored for the refused person: %v", err)
		}
		// Everyone else still signs in.
		if code, _ := e.code(c, "alice", nil); code == "" {
			t.Error("alice got no code")
		}
	})
}

// refreshTokensFail is a store whose reads of refresh tokens fail with err.
type refreshTokensFail struct {
	store.Store
	err error
}

func (s refreshTokensFail) GetRefreshToken(context.Context, string) (store.RefreshToken, error) {
	return store.RefreshToken{}, s.err
}

// TestTokenWhenTheDatabaseIsOutOfReach checks the token endpoint's answer
// when the store fails: the database out of reach (store.ErrUnavailable) is
// 503 temporarily_unavailable with a Retry-After, so that a client tries
// again rather than giving up its grant; any other failure is 500
// server_error. Neither tells the store's error, and the refresh token
// still works once the store does.
func TestTokenWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	e := newEnv(t, st, nil)
	c := e.register(nil)
	code, verifier := e.code(c, "alice", nil)
	tokens := e.redeem(c, code, verifier)
	if tokens.Status != http.StatusOK {
		t.Fatalf("redeem: %+v", tokens)
	}
	for _, tt := range []struct {
		err         error
		status      int
		code, after string
	}{
		{fmt.Errorf("read: %w", store.ErrUnavailable), http.StatusServiceUnavailable, "temporarily_unavailable", "1"},
		{errors.New("read: disk on fire"), http.StatusInternalServerError, "server_error", ""},
	} {
		failing := newEnv(t, st, func(o *oauth.ServerOptions) { o.Store = refreshTokensFail{st, tt.err} })
		got := failing.refresh(c, tokens.RefreshToken)
		if got.Status != tt.status || got.Error != tt.code || got.header.Get("Retry-After") != tt.after {
			t.Errorf("refresh when reading it fails with %q: %d %q, Retry-After %q; want %d %q, %q",
				tt.err, got.Status, got.Error, got.header.Get("Retry-After"), tt.status, tt.code, tt.after)
		}
		if strings.Contains(got.Description, "fire") || strings.Contains(got.Description, "store:") {
			t.Errorf("the answer tells the store's error: %q", got.Description)
		}
	}
	if got := e.refresh(c, tokens.RefreshToken); got.Status != http.StatusOK {
		t.Errorf("refresh once the store works: %+v, want 200", got)
	}
}

// authorizeReadsFail is a store whose reads of consents, or of clients,
// fail with err.
type authorizeReadsFail struct {
	store.Store
	consent, client error
}

func (s authorizeReadsFail) GetConsent(ctx context.Context, principal, clientID string) (store.Consent, error) {
	if s.consent != nil {
		return store.Consent{}, s.consent
	}
	return s.Store.GetConsent(ctx, principal, clientID)
}

func (s authorizeReadsFail) GetOAuthClient(ctx context.Context, id string) (store.OAuthClient, error) {
	if s.client != nil {
		return store.OAuthClient{}, s.client
	}
	return s.Store.GetOAuthClient(ctx, id)
}

// TestAuthorizeWhenTheDatabaseIsOutOfReach checks the authorization
// endpoint's answer when the store fails: the database out of reach is
// temporarily_unavailable — sent to the client's redirect URI with the
// state and iss when the request may be, else answered 503 with a
// Retry-After —, any other failure server_error; neither tells the
// store's error, and the same request succeeds once the store works.
func TestAuthorizeWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	e := newEnv(t, st, nil)
	c := e.register(nil)
	e.code(c, "alice", nil) // alice consents: the next request reads her consent
	for _, tt := range []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("read: %w", store.ErrUnavailable), "temporarily_unavailable", http.StatusServiceUnavailable},
		{errors.New("read: disk on fire"), "server_error", http.StatusInternalServerError},
	} {
		_, challenge := pkce()
		failing := newEnv(t, st, func(o *oauth.ServerOptions) { o.Store = authorizeReadsFail{Store: st, consent: tt.err} })
		resp, _ := failing.get(oauth.PathAuthorize+"?"+failing.authQuery(c, challenge, nil).Encode(), "alice")
		rq := redirectQuery(t, resp, c.RedirectURI)
		if rq.Get("error") != tt.code || rq.Get("state") != "xyz-state" || rq.Get("iss") != failing.issuer || rq.Get("code") != "" {
			t.Errorf("the consent's read failing with %q: redirected with %v, want error %s, the state and iss", tt.err, rq, tt.code)
		}
		if d := rq.Get("error_description"); strings.Contains(d, "fire") || strings.Contains(d, "store:") {
			t.Errorf("the redirect tells the store's error: %q", d)
		}

		failing = newEnv(t, st, func(o *oauth.ServerOptions) { o.Store = authorizeReadsFail{Store: st, client: tt.err} })
		resp, body := failing.get(oauth.PathAuthorize+"?"+failing.authQuery(c, challenge, nil).Encode(), "alice")
		after := map[bool]string{true: "1"}[tt.status == http.StatusServiceUnavailable]
		if resp.StatusCode != tt.status || !strings.Contains(body, tt.code) || resp.Header.Get("Retry-After") != after || resp.Header.Get("Location") != "" {
			t.Errorf("the client's read failing with %q: %d %s, Retry-After %q; want %d %s shown, not redirected, Retry-After %q",
				tt.err, resp.StatusCode, body, resp.Header.Get("Retry-After"), tt.status, tt.code, after)
		}
		if strings.Contains(body, "fire") {
			t.Errorf("the answer tells the store's error: %s", body)
		}
	}
	if code, _ := e.code(c, "alice", nil); code == "" {
		t.Error("no code once the store works")
	}
}

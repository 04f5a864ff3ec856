package oauth_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/store"
)

// A tenant taken off the API's allow-list (a replica restarted with the
// new configuration) gets no more access tokens: its people's refresh
// tokens and codes are refused invalid_grant, each refusal recorded
// auth_failed, and a refresh token so refused is not used up — it works
// again should the tenant come back.
func TestGrantsOfATenantNoLongerAllowed(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		code, verifier := e.code(c, "alice", nil)
		first := e.redeem(c, code, verifier)
		if first.Status != http.StatusOK {
			t.Fatalf("redeem: %+v", first)
		}
		pendingCode, pendingVerifier := e.code(c, "alice", nil)

		e.replace(func(o *oauth.ServerOptions) { o.Admits = admitting(t, "tenant-2") })
		const says = "This account, or its organisation, is no longer allowed on this server."
		if tok := e.refresh(c, first.RefreshToken); tok.Status != http.StatusBadRequest || tok.Error != oauth.CodeInvalidGrant ||
			tok.Description != says || tok.AccessToken != "" {
			t.Fatalf("refresh of a tenant taken off the allow-list: %+v", tok)
		}
		if tok := e.redeem(c, pendingCode, pendingVerifier); tok.Error != oauth.CodeInvalidGrant || tok.Description != says || tok.AccessToken != "" {
			t.Fatalf("code of a tenant taken off the allow-list: %+v", tok)
		}
		recs, err := st.AuditRecords(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var refused []map[string]any
		for _, r := range recs {
			if r.Kind != "auth_failed" {
				continue
			}
			var d map[string]any
			if err := json.Unmarshal(r.Details, &d); err != nil {
				t.Fatal(err)
			}
			if r.Principal != principal("alice").ID() || r.ClientID != c.ID {
				t.Errorf("auth_failed of %q by %q, want alice's by the client", r.Principal, r.ClientID)
			}
			delete(d, "family")
			refused = append(refused, d)
		}
		want := []map[string]any{
			{"endpoint": "token", "grant": "refresh_token", "reason": "principal_not_admitted"},
			{"endpoint": "token", "grant": "authorization_code", "reason": "principal_not_admitted"},
		}
		if len(refused) != len(want) || !maps.Equal(refused[0], want[0]) || !maps.Equal(refused[1], want[1]) {
			t.Errorf("auth_failed records %v, want %v", refused, want)
		}

		e.replace(nil) // the tenant is allowed again
		if tok := e.refresh(c, first.RefreshToken); tok.Status != http.StatusOK || tok.AccessToken == "" {
			t.Fatalf("refresh once the tenant is allowed again: %+v", tok)
		}
	})
}

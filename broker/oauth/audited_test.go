package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// auditRecords returns the records of kind in st's audit log.
func auditRecords(t *testing.T, st store.Store, kind audit.Kind) []store.AuditRecord {
	t.Helper()
	recs, err := st.AuditRecords(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditRecord
	for _, r := range recs {
		if r.Kind == string(kind) {
			out = append(out, r)
		}
	}
	return out
}

// TestClientAssertionReplayAudited checks that a replayed client
// assertion is refused and audited, once per replay, by its client and
// the jti's hash — never the assertion or the jti itself.
func TestClientAssertionReplayAudited(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newJWTEnv(t, st, nil)
		claims := e.goodClaims()
		jti := claims["jti"].(string)
		raw := assertion(t, jwt.SigningMethodRS256, testKeys().rsa, "rsa-1", claims)
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"nothing"}}
		if tok := e.jwtToken(raw, form); tok.Error != oauth.CodeInvalidGrant {
			t.Fatalf("first use: %+v, want authenticated (invalid_grant for the bogus token)", tok)
		}
		if got := auditRecords(t, st, audit.KindOAuthClientAssertionReplayed); len(got) != 0 {
			t.Fatalf("a first use is audited as a replay: %+v", got)
		}
		for range 2 {
			if tok := e.jwtToken(raw, form); tok.Status != http.StatusUnauthorized || tok.Error != oauth.CodeInvalidClient {
				t.Fatalf("replay: %+v, want 401 invalid_client", tok)
			}
		}
		got := auditRecords(t, st, audit.KindOAuthClientAssertionReplayed)
		if len(got) != 2 {
			t.Fatalf("%d oauth_client_assertion_replayed records, want one per replay (2)", len(got))
		}
		var details map[string]string
		if err := json.Unmarshal(got[0].Details, &details); err != nil || got[0].ClientID != jwtClient ||
			!reflect.DeepEqual(details, map[string]string{"jti_sha256": oauth.HashSecret(jti)}) {
			t.Errorf("the record: client %q, details %s (%v); want %s and the jti's SHA-256", got[0].ClientID, got[0].Details, err, jwtClient)
		}
		assertNoSecretsAudited(t, st, raw, jti)
	})
}

// TestConfiguredClientsAudited checks that the configured clients put at
// a start are audited when created or changed, with what changed and
// never a secret's hash, and not at a start that changes nothing.
func TestConfiguredClientsAudited(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		var opts oauth.ServerOptions
		newJWTEnv(t, st, func(o *oauth.ServerOptions) { opts = *o })
		start := func(clients []oauth.ConfiguredClient) {
			t.Helper()
			o := opts
			o.ConfiguredClients = clients
			srv, err := oauth.NewServer(&o)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.PutConfiguredClients(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		type change struct {
			Client, Change string
			Changed        []string
		}
		changes := func() []change {
			var out []change
			for _, r := range auditRecords(t, st, audit.KindOAuthClientConfigured) {
				var d struct {
					Change  string   `json:"change"`
					Changed []string `json:"changed"`
				}
				if err := json.Unmarshal(r.Details, &d); err != nil {
					t.Fatal(err)
				}
				out = append(out, change{r.ClientID, d.Change, d.Changed})
			}
			return out
		}
		created := []change{{jwtClient, "created", nil}, {basicClient, "created", nil}, {publicClient, "created", nil}}
		if got := changes(); !reflect.DeepEqual(got, created) {
			t.Fatalf("after the first start: %+v, want %+v", got, created)
		}

		// The next start, with the same configuration: nothing recorded.
		start(configuredClients(t))
		if got := changes(); !reflect.DeepEqual(got, created) {
			t.Errorf("after a start that changes nothing: %+v, want %+v", got, created)
		}

		// A new secret for the basic client, a new name and redirect URI
		// for the public one.
		clients := configuredClients(t)
		clients[1].SecretHash = oauth.HashSecret("another-secret-of-the-basic-client-0123")
		clients[2].Name, clients[2].RedirectURIs = "Desk 2", []string{"http://127.0.0.1/cb2"}
		start(clients)
		want := append(created, change{basicClient, "updated", []string{"secret"}}, change{publicClient, "updated", []string{"name", "redirect_uris"}})
		if got := changes(); !reflect.DeepEqual(got, want) {
			t.Errorf("after a start that changes two clients: %+v, want %+v", got, want)
		}
		start(clients)
		if got := changes(); len(got) != len(want) {
			t.Errorf("after a start that changes nothing again: %+v, want %+v", got, want)
		}
		assertNoSecretsAudited(t, st, oauth.HashSecret(basicSecret), clients[1].SecretHash)
		if rep, err := audit.Verify(context.Background(), st); err != nil || !rep.Intact() {
			t.Errorf("audit.Verify = %+v, %v; want intact", rep, err)
		}
	})
}

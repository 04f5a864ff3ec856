package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/oauth"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// appsAnswer is an answer of the apps handler.
type appsAnswer struct {
	status int
	header http.Header
	body   string
}

// errorCode is the API error's code, or "".
func (a appsAnswer) errorCode() string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(a.body), &e) != nil || e.Error.Message == "" {
		return ""
	}
	return e.Error.Code
}

// apps sends method path to the apps handler as user (none: ""), the
// principal in the context as the API's authentication puts it.
func (e *env) apps(method, path, user string) appsAnswer {
	e.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if user != "" {
		req = req.WithContext(identity.NewContext(req.Context(), principal(user)))
	}
	w := httptest.NewRecorder()
	e.server.AppsHandler().ServeHTTP(w, req)
	return appsAnswer{status: w.Code, header: w.Header(), body: w.Body.String()}
}

// listApps returns user's connected apps.
func (e *env) listApps(user string) []map[string]any {
	e.t.Helper()
	a := e.apps(http.MethodGet, oauth.PathApps, user)
	if a.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", oauth.PathApps, a.status, a.body)
	}
	var out struct {
		Apps []map[string]any `json:"apps"`
	}
	if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.Apps == nil {
		e.t.Fatalf("GET %s: %s (%v), want {\"apps\": [...]}", oauth.PathApps, a.body, err)
	}
	return out.Apps
}

// appPath is the path of the app clientID, its id one escaped segment.
func appPath(clientID string) string {
	return oauth.PathApps + "/" + url.PathEscape(clientID)
}

func TestAppsListAndRevoke(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		ctx := context.Background()
		if got := e.listApps("alice"); len(got) != 0 {
			t.Fatalf("before any consent: %v, want no apps", got)
		}

		first := e.register(func(md map[string]any) {
			md["client_name"] = "First Client"
			md["redirect_uris"] = []string{"http://127.0.0.1:33418/callback", "http://127.0.0.1:33418/other", "com.example.app:/cb"}
		})
		second := e.register(func(md map[string]any) {
			md["client_name"] = "Second Client"
			md["token_endpoint_auth_method"] = "client_secret_basic"
		})
		code, verifier := e.code(first, "alice", nil)
		firstTokens := e.redeem(first, code, verifier)
		if firstTokens.Status != http.StatusOK || firstTokens.RefreshToken == "" {
			t.Fatalf("redeem: %+v", firstTokens)
		}
		e.clock.Advance(time.Minute)
		code, verifier = e.code(second, "alice", nil)
		secondTokens := e.redeem(second, code, verifier)
		if secondTokens.Status != http.StatusOK {
			t.Fatalf("redeem: %+v", secondTokens)
		}
		e.code(first, "bob", nil) // Bob's consent is his own

		apps := e.listApps("alice")
		if len(apps) != 2 {
			t.Fatalf("Alice's apps = %v, want 2", apps)
		}
		if apps[0]["client_id"] != second.ID || apps[1]["client_id"] != first.ID {
			t.Errorf("order = %v, %v, want the newest use first", apps[0]["client_id"], apps[1]["client_id"])
		}
		a := apps[1]
		if a["name"] != "First Client" || a["kind"] != "registered" || a["scope"] != "mcp:invoke" || a["resource"] != e.resource {
			t.Errorf("the first app = %v", a)
		}
		if hosts, _ := json.Marshal(a["redirect_hosts"]); string(hosts) != `["127.0.0.1:33418","com.example.app:"]` {
			t.Errorf("redirect_hosts = %s", hosts)
		}
		for _, k := range []string{"registered_at", "consented_at", "last_used_at"} {
			if s, _ := a[k].(string); s == "" {
				t.Errorf("%s = %v, want a time", k, a[k])
			} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				t.Errorf("%s = %q: %v", k, s, err)
			}
		}
		var keys []string
		for k := range apps[0] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"client_id", "consented_at", "kind", "last_used_at", "name", "redirect_hosts", "registered_at", "resource", "scope"}; !slices.Equal(keys, want) {
			t.Errorf("an app's members = %v, want %v", keys, want)
		}
		if body := e.apps(http.MethodGet, oauth.PathApps, "alice").body; strings.Contains(body, second.Secret) ||
			strings.Contains(body, oauth.HashSecret(second.Secret)) || strings.Contains(body, "127.0.0.1\"") {
			t.Errorf("the list shows a secret or the registering address: %s", body)
		}

		// Bob cannot disconnect Alice's app he has not consented to.
		if r := e.apps(http.MethodDelete, appPath(second.ID), "bob"); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
			t.Errorf("Bob's DELETE of an app he did not connect: %d %s, want 404 not_found", r.status, r.body)
		}

		r := e.apps(http.MethodDelete, appPath(first.ID), "alice")
		if r.status != http.StatusNoContent || r.body != "" {
			t.Fatalf("DELETE: %d %s, want 204", r.status, r.body)
		}
		if got := e.listApps("alice"); len(got) != 1 || got[0]["client_id"] != second.ID {
			t.Errorf("after the revocation Alice's apps = %v, want the second only", got)
		}
		if got := e.listApps("bob"); len(got) != 1 || got[0]["client_id"] != first.ID {
			t.Errorf("after Alice's revocation Bob's apps = %v, want his own still", got)
		}
		if c, err := st.GetConsent(ctx, principal("alice").ID(), first.ID); err != nil || c.RevokedAt.IsZero() {
			t.Errorf("Alice's consent = %+v, %v, want revoked", c, err)
		}
		if got := e.refresh(first, firstTokens.RefreshToken); got.Status != http.StatusBadRequest || got.Error != "invalid_grant" {
			t.Errorf("refresh after the revocation: %+v, want invalid_grant", got)
		}
		if got := e.refresh(second, secondTokens.RefreshToken); got.Status != http.StatusOK {
			t.Errorf("the other app's refresh: %+v, want 200", got)
		}
		if r := e.apps(http.MethodDelete, appPath(first.ID), "alice"); r.status != http.StatusNotFound {
			t.Errorf("a second DELETE: %d %s, want 404", r.status, r.body)
		}

		recs, err := st.AuditRecords(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var revoked []store.AuditRecord
		for _, rec := range recs {
			if rec.Kind == "oauth_consent_revoked" {
				revoked = append(revoked, rec)
			}
		}
		if len(revoked) != 1 || revoked[0].Principal != principal("alice").ID() || revoked[0].ClientID != first.ID {
			t.Errorf("oauth_consent_revoked records = %+v, want one of Alice's revocation of the first client", revoked)
		}

		// Consenting again connects the app again, as the newest used.
		e.clock.Advance(time.Minute)
		e.code(first, "alice", nil)
		if got := e.listApps("alice"); len(got) != 2 || got[0]["client_id"] != first.ID {
			t.Errorf("after consenting again: %v, want the first app back, first", got)
		}
	})
}

func TestAppsMetadataDocumentClient(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		id, f := docServer(t, func(clientID string) map[string]any {
			return map[string]any{
				"client_id": clientID, "client_name": "Doc Client",
				"redirect_uris":              []string{"https://app.example.net/callback"},
				"token_endpoint_auth_method": "none",
			}
		})
		e := newEnv(t, st, func(o *oauth.ServerOptions) { o.Clients = f })
		c := client{ID: id, RedirectURI: "https://app.example.net/callback"}
		e.code(c, "alice", nil)
		apps := e.listApps("alice")
		if len(apps) != 1 || apps[0]["client_id"] != id || apps[0]["kind"] != "metadata_document" {
			t.Fatalf("apps = %v, want the document's client", apps)
		}
		if hosts, _ := json.Marshal(apps[0]["redirect_hosts"]); string(hosts) != `["app.example.net"]` {
			t.Errorf("redirect_hosts = %s", hosts)
		}
		// Its id is a URL: one path segment, its slashes escaped.
		path := appPath(id)
		if !strings.Contains(path, "%2F") {
			t.Fatalf("path %s does not escape the slashes", path)
		}
		if r := e.apps(http.MethodDelete, path, "alice"); r.status != http.StatusNoContent {
			t.Fatalf("DELETE %s: %d %s, want 204", path, r.status, r.body)
		}
		if got := e.listApps("alice"); len(got) != 0 {
			t.Errorf("after the revocation: %v, want none", got)
		}
	})
}

func TestAppsRefusals(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		c := e.register(nil)
		e.code(c, "alice", nil)
		long := strings.Repeat("a", 5000)
		tests := []struct {
			name, method, path, user string
			status                   int
			code                     string
		}{
			{"list unauthenticated", http.MethodGet, oauth.PathApps, "", http.StatusUnauthorized, "unauthenticated"},
			{"revoke unauthenticated", http.MethodDelete, appPath(c.ID), "", http.StatusUnauthorized, "unauthenticated"},
			{"POST the list", http.MethodPost, oauth.PathApps, "alice", http.StatusMethodNotAllowed, "method_not_allowed"},
			{"DELETE the list", http.MethodDelete, oauth.PathApps, "alice", http.StatusMethodNotAllowed, "method_not_allowed"},
			{"GET an app", http.MethodGet, appPath(c.ID), "alice", http.StatusMethodNotAllowed, "method_not_allowed"},
			{"PUT an app", http.MethodPut, appPath(c.ID), "alice", http.StatusMethodNotAllowed, "method_not_allowed"},
			{"unknown app", http.MethodDelete, appPath("no-such-client"), "alice", http.StatusNotFound, "not_found"},
			{"very long id", http.MethodDelete, appPath(long), "alice", http.StatusNotFound, "not_found"},
			{"encoded slashes", http.MethodDelete, appPath("https://evil.example/../" + c.ID), "alice", http.StatusNotFound, "not_found"},
			{"encoded NUL", http.MethodDelete, oauth.PathApps + "/a%00b", "alice", http.StatusNotFound, "not_found"},
			{"invalid UTF-8", http.MethodDelete, oauth.PathApps + "/%ff%fe", "alice", http.StatusNotFound, "not_found"},
			{"control character", http.MethodDelete, oauth.PathApps + "/a%0Ab", "alice", http.StatusNotFound, "not_found"},
			{"bidi override", http.MethodDelete, appPath(c.ID + "\u202e"), "alice", http.StatusNotFound, "not_found"},
			{"two segments", http.MethodDelete, oauth.PathApps + "/" + c.ID + "/x", "alice", http.StatusNotFound, "not_found"},
			{"empty id", http.MethodDelete, oauth.PathApps + "/", "alice", http.StatusNotFound, "not_found"},
		}
		for _, tt := range tests {
			r := e.apps(tt.method, tt.path, tt.user)
			if r.status != tt.status || r.errorCode() != tt.code {
				t.Errorf("%s: %s %.80s = %d %s, want %d %s", tt.name, tt.method, tt.path, r.status, r.body, tt.status, tt.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q, want application/json", tt.name, ct)
			}
		}
		if r := e.apps(http.MethodPost, oauth.PathApps, "alice"); r.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("405 of the list: Allow %q", r.header.Get("Allow"))
		}
		if r := e.apps(http.MethodGet, appPath(c.ID), "alice"); r.header.Get("Allow") != "DELETE" {
			t.Errorf("405 of an app: Allow %q", r.header.Get("Allow"))
		}
		// After every refusal the consent still stands.
		cons, err := st.GetConsent(context.Background(), principal("alice").ID(), c.ID)
		if err != nil || !cons.RevokedAt.IsZero() {
			t.Errorf("after the refusals the consent is %+v, %v, want standing", cons, err)
		}
	})
}

// failingAudit is a store whose audit appends fail.
type failingAudit struct{ store.Store }

func (failingAudit) AppendAudit(context.Context, func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	return store.AuditRecord{}, errors.New("audit down")
}

func TestAppsRevokeWithoutAuditIs500(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	e := newEnv(t, st, nil)
	c := e.register(nil)
	e.code(c, "alice", nil)
	down, err := audit.New(failingAudit{st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	broken := newEnv(t, st, func(o *oauth.ServerOptions) { o.Audit = down })
	r := broken.apps(http.MethodDelete, appPath(c.ID), "alice")
	if r.status != http.StatusInternalServerError || strings.Contains(r.body, "audit down") {
		t.Errorf("DELETE with the audit log down: %d %s, want a 500 telling nothing", r.status, r.body)
	}
}

// TestAppsConcurrentRevocations checks that a consent disconnected by
// several requests at once — from two replicas, as two tabs or a double
// click would — is revoked once and audited once: one request gets 204,
// the others 404, and the log has one consent-revoked record.
func TestAppsConcurrentRevocations(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, nil)
		replica := newEnv(t, st, nil) // another server on the same store
		c := e.register(nil)
		code, verifier := e.code(c, "alice", nil)
		if tok := e.redeem(c, code, verifier); tok.Status != http.StatusOK {
			t.Fatalf("redeem: %+v", tok)
		}
		const n = 8
		statuses := make([]int, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				srv := []*env{e, replica}[i%2]
				req := httptest.NewRequest(http.MethodDelete, appPath(c.ID), nil)
				req = req.WithContext(identity.NewContext(req.Context(), principal("alice")))
				w := httptest.NewRecorder()
				srv.server.AppsHandler().ServeHTTP(w, req)
				statuses[i] = w.Code
			})
		}
		close(start)
		wg.Wait()
		var ok, gone int
		for _, s := range statuses {
			switch s {
			case http.StatusNoContent:
				ok++
			case http.StatusNotFound:
				gone++
			}
		}
		if ok != 1 || gone != n-1 {
			t.Errorf("statuses %v: want one 204 and %d 404", statuses, n-1)
		}
		revoked := 0
		for _, k := range e.auditKinds() {
			if k == string(audit.KindOAuthConsentRevoked) {
				revoked++
			}
		}
		if revoked != 1 {
			t.Errorf("%d consent-revoked audit records, want 1 (%v)", revoked, e.auditKinds())
		}
	})
}

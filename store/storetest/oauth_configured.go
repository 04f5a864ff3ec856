package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

func testConfiguredClients(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	jwks := json.RawMessage(`{"jwks_uri":"https://ci.example/jwks.json"}`)
	in := store.OAuthClient{ID: "ci-bot", Name: "CI", RedirectURIs: []string{"https://ci.example/cb"},
		GrantTypes: []string{"authorization_code"}, AuthMethod: "private_key_jwt", Metadata: jwks, CreatedAt: now.Add(-time.Hour)}
	// Each change is recorded by audit's record, in its transaction: the
	// records' kinds say which change and what the client was before.
	audit := func(prev *store.OAuthClient) func(store.AuditHead) (store.AuditRecord, error) {
		kind := "created"
		if prev != nil {
			kind = "updated_from_" + strings.ReplaceAll(prev.Name, " ", "_")
		}
		return chained(store.AuditRecord{At: now, Kind: kind, ClientID: in.ID})
	}
	recordKinds := func() []string {
		recs, err := s.AuditRecords(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Kind)
		}
		return out
	}
	a, change, err := s.PutConfiguredClient(ctx, in, audit)
	if err != nil || change != store.ClientCreated {
		t.Fatalf("PutConfiguredClient = %v, %q; want it created", err, change)
	}
	want := in
	want.Kind, want.UpdatedAt = store.OAuthClientConfigured, in.CreatedAt
	if !reflect.DeepEqual(a, want) {
		t.Errorf("PutConfiguredClient created\n%+v, want\n%+v", a, want)
	}
	if got, err := s.GetOAuthClient(ctx, "ci-bot"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("GetOAuthClient = %+v, %v; want %+v", got, err, want)
	}
	// The same registration again, as an unchanged configuration's next
	// start puts it: nothing is written, nor recorded.
	same := in
	same.CreatedAt, same.UpdatedAt = now, now
	if got, change, err := s.PutConfiguredClient(ctx, same, audit); err != nil || change != store.ClientUnchanged || !reflect.DeepEqual(got, want) {
		t.Errorf("PutConfiguredClient unchanged = %+v, %q, %v; want %+v as stored, unchanged", got, change, err, want)
	}
	if got := recordKinds(); !reflect.DeepEqual(got, []string{"created"}) {
		t.Errorf("the records after a creation and an unchanged put: %q, want [created]", got)
	}

	// Putting it again, as the next start does, updates it in place; a
	// revocation, the creation time and the last use are kept.
	if _, err := s.PutConsent(ctx, store.Consent{Principal: "alice", ClientID: "ci-bot", UpdatedAt: now.Add(-30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchConsent(ctx, "alice", "ci-bot", now.Add(-20*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeOAuthClient(ctx, "ci-bot", now.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	up := store.OAuthClient{ID: "ci-bot", Kind: store.OAuthClientConfigured, Name: "CI 2", RedirectURIs: []string{"https://ci.example/cb2"},
		GrantTypes: []string{"authorization_code", "refresh_token"}, AuthMethod: "client_secret_basic", SecretHash: "5e3c",
		CreatedAt: now, UpdatedAt: now}
	b, change, err := s.PutConfiguredClient(ctx, up, audit)
	if err != nil || change != store.ClientUpdated {
		t.Fatalf("PutConfiguredClient again = %v, %q; want it updated", err, change)
	}
	if got := recordKinds(); !reflect.DeepEqual(got, []string{"created", "updated_from_CI"}) {
		t.Errorf("the records after an update: %q, want [created updated_from_CI]", got)
	}
	// An update whose record fails is not written.
	errRecord := errors.New("the record cannot be built")
	failing := func(*store.OAuthClient) func(store.AuditHead) (store.AuditRecord, error) {
		return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errRecord }
	}
	up3 := up
	up3.Name = "CI 3"
	if _, _, err := s.PutConfiguredClient(ctx, up3, failing); !errors.Is(err, errRecord) {
		t.Errorf("PutConfiguredClient with a failing record = %v, want its error", err)
	}
	want2 := up
	want2.CreatedAt, want2.LastUsedAt, want2.RevokedAt = in.CreatedAt, now.Add(-20*time.Minute), now.Add(-10*time.Minute)
	if !reflect.DeepEqual(b, want2) {
		t.Errorf("PutConfiguredClient updated to\n%+v, want\n%+v", b, want2)
	}
	if got, err := s.GetOAuthClient(ctx, "ci-bot"); err != nil || !reflect.DeepEqual(got, want2) {
		t.Errorf("after an update whose record failed, GetOAuthClient = %+v, %v; want %+v", got, err, want2)
	}

	// Another kind's id is refused and left alone.
	reg := mustOAuthClient(t, s, "dcr-x")
	if _, _, err := s.PutConfiguredClient(ctx, store.OAuthClient{ID: "dcr-x", AuthMethod: "none"}, audit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutConfiguredClient over a registered client = %v, want ErrConflict", err)
	}
	if got, _ := s.GetOAuthClient(ctx, "dcr-x"); !reflect.DeepEqual(got, reg) {
		t.Errorf("a refused PutConfiguredClient changed the registered client: %+v", got)
	}
	if _, err := s.PutMetadataClient(ctx, store.OAuthClient{ID: "ci-bot", AuthMethod: "none"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutMetadataClient over a configured client = %v, want ErrConflict", err)
	}
	for name, c := range map[string]store.OAuthClient{
		"a registered kind":   {ID: "x", Kind: store.OAuthClientRegistered, AuthMethod: "none"},
		"a registering addr":  {ID: "x", AuthMethod: "none", RegisteredBy: "192.0.2.1"},
		"a secret not hashed": {ID: "x", AuthMethod: "client_secret_basic"},
		"a secret for a jwt":  {ID: "x", AuthMethod: "private_key_jwt", SecretHash: "ab"},
		"no id":               {AuthMethod: "none"},
		"no auth method":      {ID: "x"},
	} {
		if _, _, err := s.PutConfiguredClient(ctx, c, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutConfiguredClient with %s = %v, want ErrInvalid", name, err)
		}
	}

	// Replicas starting together put the same clients: each is created,
	// and recorded, once.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	changes := make([]store.ClientChange, 8)
	for i := range errs {
		wg.Go(func() {
			_, changes[i], errs[i] = s.PutConfiguredClient(ctx, store.OAuthClient{ID: fmt.Sprintf("cfg-%d", i%2), Name: "Same",
				AuthMethod: "none", RedirectURIs: []string{"https://app.example/cb"}, GrantTypes: []string{"authorization_code"}}, audit)
		})
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err != nil:
			t.Errorf("concurrent PutConfiguredClient #%d: %v", i, err)
		case changes[i] == store.ClientCreated:
			created++
		case changes[i] != store.ClientUnchanged:
			t.Errorf("concurrent PutConfiguredClient #%d changed %q, want created or unchanged", i, changes[i])
		}
	}
	if created != 2 {
		t.Errorf("%d concurrent puts of 2 clients created one, want 2", created)
	}
	if got := recordKinds(); !reflect.DeepEqual(got, []string{"created", "updated_from_CI", "created", "created"}) {
		t.Errorf("the records after concurrent puts: %q, want one more creation of each", got)
	}
	list, err := s.ListOAuthClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]store.OAuthClientKind{}
	for _, c := range list {
		kinds[c.ID] = c.Kind
	}
	if wantKinds := map[string]store.OAuthClientKind{"ci-bot": store.OAuthClientConfigured, "dcr-x": store.OAuthClientRegistered,
		"cfg-0": store.OAuthClientConfigured, "cfg-1": store.OAuthClientConfigured}; !reflect.DeepEqual(kinds, wantKinds) {
		t.Errorf("ListOAuthClients kinds = %v, want %v", kinds, wantKinds)
	}
}

func testClientAssertions(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	mustOAuthClient(t, s, "c1")
	mustOAuthClient(t, s, "c2")
	exp := now.Add(2 * time.Minute)
	if err := s.UseClientAssertion(ctx, "c1", "jti-1", exp, now); err != nil {
		t.Fatalf("UseClientAssertion: %v", err)
	}
	if err := s.UseClientAssertion(ctx, "c1", "jti-1", exp, now.Add(time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("UseClientAssertion replayed = %v, want ErrConflict", err)
	}
	// A jti is the client's: another client's same jti is its own.
	if err := s.UseClientAssertion(ctx, "c2", "jti-1", exp, now); err != nil {
		t.Errorf("UseClientAssertion of another client's jti: %v", err)
	}
	if err := s.UseClientAssertion(ctx, "nope", "jti-1", exp, now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UseClientAssertion of an unknown client = %v, want ErrNotFound", err)
	}
	for name, call := range map[string]func() error{
		"no client":        func() error { return s.UseClientAssertion(ctx, "", "j", exp, now) },
		"no jti":           func() error { return s.UseClientAssertion(ctx, "c1", "", exp, now) },
		"no time":          func() error { return s.UseClientAssertion(ctx, "c1", "j", exp, time.Time{}) },
		"no expiry":        func() error { return s.UseClientAssertion(ctx, "c1", "j", time.Time{}, now) },
		"expired already":  func() error { return s.UseClientAssertion(ctx, "c1", "j", now, now) },
		"a NUL in the jti": func() error { return s.UseClientAssertion(ctx, "c1", "j\x00", exp, now) },
	} {
		if err := call(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("UseClientAssertion with %s = %v, want ErrInvalid", name, err)
		}
	}

	// Once expired, a jti is forgotten: the client's next use deletes it.
	if err := s.UseClientAssertion(ctx, "c1", "jti-1", exp.Add(time.Minute), exp); err != nil {
		t.Errorf("UseClientAssertion after the first expired: %v", err)
	}

	// Of concurrent uses of one jti, exactly one succeeds.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = s.UseClientAssertion(ctx, "c2", "jti-race", exp, now) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("concurrent UseClientAssertion #%d: %v", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d concurrent uses of one jti succeeded, want 1", won)
	}

	// The sweep deletes what expired.
	if err := s.UseClientAssertion(ctx, "c2", "jti-long", now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredClientAssertions(ctx, exp); err != nil || n != 2 {
		t.Errorf("DeleteExpiredClientAssertions = %d, %v; want 2 (c2's jti-1 and jti-race)", n, err)
	}
	if err := s.UseClientAssertion(ctx, "c2", "jti-race", now.Add(time.Hour), now); err != nil {
		t.Errorf("a jti the sweep deleted: %v", err)
	}
	if err := s.UseClientAssertion(ctx, "c2", "jti-long", now.Add(time.Hour), now); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a jti the sweep kept = %v, want ErrConflict", err)
	}

	// DeleteExpiredClientAssertions deletes every client's expired
	// assertions, and only those.
	if err := s.UseClientAssertion(ctx, "c1", "jti-c1", now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if err := s.UseClientAssertion(ctx, "c2", "jti-c2", now.Add(2*time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredClientAssertions(ctx, exp.Add(time.Minute)); err != nil || n != 3 {
		t.Errorf("DeleteExpiredClientAssertions = %d, %v; want 3 (c1's jti-1 and jti-c1, c2's jti-c2)", n, err)
	}
	if n, err := s.DeleteExpiredClientAssertions(ctx, exp.Add(time.Minute)); err != nil || n != 0 {
		t.Errorf("DeleteExpiredClientAssertions again = %d, %v; want 0", n, err)
	}
	if err := s.UseClientAssertion(ctx, "c1", "jti-c1", now.Add(2*time.Minute), now.Add(time.Second)); err != nil {
		t.Errorf("a jti DeleteExpiredClientAssertions deleted: %v", err)
	}
	if err := s.UseClientAssertion(ctx, "c2", "jti-long", now.Add(time.Hour), now.Add(time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a jti DeleteExpiredClientAssertions kept = %v, want ErrConflict", err)
	}
	if _, err := s.DeleteExpiredClientAssertions(ctx, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeleteExpiredClientAssertions at the zero time = %v, want ErrInvalid", err)
	}
}

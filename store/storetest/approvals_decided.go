package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testListDecidedApprovals: the history of decisions lists what is no
// longer pending, newest first by when it ended, to its requester and to
// the approver groups of its tenant, a page at a time.
func testListDecidedApprovals(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	at := func(d time.Duration) time.Time { return f.now.Add(d) }
	alice := testBinding()
	alice.Principal = "issuer|contoso|alice"
	bob := testBinding()
	bob.Principal = "issuer|contoso|bob"
	carol := testBinding()
	carol.Principal = "issuer|fabrikam|carol"
	dave := "issuer|contoso|dave"
	tenants := map[string]string{alice.Principal: "contoso", bob.Principal: "contoso", carol.Principal: "fabrikam"}
	bindings := map[string]store.ApprovalBinding{}
	mk := func(id string, b store.ApprovalBinding, expires time.Duration, approvers ...string) {
		t.Helper()
		b.ArgumentsHash = "args-" + id
		bindings[id] = b
		a := f.approval(id, b)
		a.Tenant = tenants[b.Principal]
		a.ExpiresAt = at(expires)
		a.Approvers = approvers
		f.create(a)
	}
	decide := func(id string, to store.ApprovalStatus, by string, when time.Duration) {
		t.Helper()
		if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: to, DecidedBy: by, Reason: "because", Now: at(when)}, nil); err != nil {
			t.Fatalf("DecideApproval(%s): %v", id, err)
		}
	}
	mk("apr-1", alice, time.Hour)
	decide("apr-1", store.ApprovalDenied, alice.Principal, 10*time.Minute)
	mk("apr-2", alice, time.Hour)
	decide("apr-2", store.ApprovalApproved, alice.Principal, 20*time.Minute)
	if _, err := consume(ctx, s, "apr-2", bindings["apr-2"], at(30*time.Minute)); err != nil {
		t.Fatal(err) // used later: it stays where its decision put it
	}
	mk("apr-3", alice, 5*time.Hour) // still pending: never listed
	mk("apr-4", alice, time.Hour)   // expires undecided, at the sweep
	mk("apr-5", bob, time.Hour, "grp-reviewers")
	decide("apr-5", store.ApprovalApproved, dave, 15*time.Minute)
	other := alice
	other.Tool = "other_tool"
	mk("apr-6", other, time.Hour) // revoked while pending
	if n, err := s.RevokeApprovalsAudited(ctx, "other_tool", "def-2", at(25*time.Minute), nil); err != nil || n != 1 {
		t.Fatalf("RevokeApprovalsAudited = %d, %v", n, err)
	}
	// Two decided at the same time: by id, descending.
	mk("apr-7", alice, time.Hour)
	decide("apr-7", store.ApprovalApproved, alice.Principal, 40*time.Minute) // then expires unused
	mk("apr-8", alice, time.Hour)
	decide("apr-8", store.ApprovalDenied, alice.Principal, 40*time.Minute)
	mk("apr-9", carol, time.Hour, "grp-reviewers") // the same group name, in another tenant
	decide("apr-9", store.ApprovalDenied, carol.Principal, 50*time.Minute)
	mk("apr-10", bob, time.Hour) // bob's to decide alone
	decide("apr-10", store.ApprovalDenied, bob.Principal, 45*time.Minute)
	if _, err := s.ExpireApprovals(ctx, at(2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	ids := func(list []store.Approval) []string {
		out := []string{}
		for _, a := range list {
			out = append(out, a.ID)
		}
		return out
	}
	list := func(q store.DecidedApprovals) []string {
		t.Helper()
		got, err := s.ListDecidedApprovals(ctx, q)
		if err != nil {
			t.Fatalf("ListDecidedApprovals(%+v): %v", q, err)
		}
		return ids(got)
	}
	reviewers := []string{"grp-reviewers"}
	for _, tt := range []struct {
		name string
		q    store.DecidedApprovals
		want []string
	}{
		{"alice's", store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Limit: 100},
			[]string{"apr-4", "apr-8", "apr-7", "apr-6", "apr-2", "apr-1"}},
		{"alice's, as a reviewer", store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Groups: reviewers, Limit: 100},
			[]string{"apr-4", "apr-8", "apr-7", "apr-6", "apr-2", "apr-5", "apr-1"}},
		{"alice's, as a reviewer of fabrikam", store.DecidedApprovals{Principal: alice.Principal, Tenant: "fabrikam", Groups: reviewers, Limit: 100},
			[]string{"apr-4", "apr-9", "apr-8", "apr-7", "apr-6", "apr-2", "apr-1"}},
		{"alice's, as an admin", store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Groups: []string{"grp-admins"}, Limit: 100},
			[]string{"apr-4", "apr-8", "apr-7", "apr-6", "apr-2", "apr-1"}},
		{"bob's, a reviewer too: once each", store.DecidedApprovals{Principal: bob.Principal, Tenant: "contoso", Groups: reviewers, Limit: 100},
			[]string{"apr-10", "apr-5"}},
		{"dave's, who decided one but is in no group", store.DecidedApprovals{Principal: dave, Tenant: "contoso", Limit: 100},
			[]string{}},
		{"a reviewer of no tenant", store.DecidedApprovals{Principal: dave, Groups: reviewers, Limit: 100},
			[]string{}},
		{"the newest two", store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Groups: reviewers, Limit: 2},
			[]string{"apr-4", "apr-8"}},
	} {
		if got := list(tt.q); !slices.Equal(got, tt.want) {
			t.Errorf("%s decided approvals = %v, want %v", tt.name, got, tt.want)
		}
	}

	// A page at a time, each after the last of the one before.
	all, err := s.ListDecidedApprovals(ctx, store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Groups: reviewers, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var paged []string
	q := store.DecidedApprovals{Principal: alice.Principal, Tenant: "contoso", Groups: reviewers, Limit: 3}
	for range 5 {
		page, err := s.ListDecidedApprovals(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, ids(page)...)
		q.After = store.CursorOf(page[len(page)-1])
	}
	if !slices.Equal(paged, ids(all)) {
		t.Errorf("paged = %v, want %v", paged, ids(all))
	}

	// What each shows: who decided, the outcome, when it ended.
	byID := map[string]store.Approval{}
	for _, a := range all {
		byID[a.ID] = a
	}
	for _, tt := range []struct {
		id     string
		status store.ApprovalStatus
		by     string
		ended  time.Time
	}{
		{"apr-1", store.ApprovalDenied, alice.Principal, at(10 * time.Minute)},
		{"apr-2", store.ApprovalConsumed, alice.Principal, at(20 * time.Minute)},
		{"apr-4", store.ApprovalExpired, "", at(2 * time.Hour)},
		{"apr-5", store.ApprovalExpired, dave, at(15 * time.Minute)},
		{"apr-6", store.ApprovalRevoked, "", at(25 * time.Minute)},
		{"apr-7", store.ApprovalExpired, alice.Principal, at(40 * time.Minute)},
	} {
		a := byID[tt.id]
		if a.Status != tt.status || a.DecidedBy != tt.by || !a.EndedAt().Equal(tt.ended.Truncate(time.Microsecond)) {
			t.Errorf("%s = %s by %q, ended %v; want %s by %q, ended %v", tt.id, a.Status, a.DecidedBy, a.EndedAt(), tt.status, tt.by, tt.ended)
		}
	}
	if a := byID["apr-1"]; a.DecisionReason != "because" || string(a.Arguments) != `{ "name" : "todo",  "body":"milk" }` {
		t.Errorf("apr-1's reason %q, arguments %s", a.DecisionReason, a.Arguments)
	}

	for _, tt := range []struct {
		name string
		q    store.DecidedApprovals
	}{
		{"no principal", store.DecidedApprovals{Limit: 10}},
		{"no limit", store.DecidedApprovals{Principal: alice.Principal}},
		{"a negative limit", store.DecidedApprovals{Principal: alice.Principal, Limit: -1}},
		{"a limit too large", store.DecidedApprovals{Principal: alice.Principal, Limit: store.MaxDecidedApprovals + 1}},
		{"a cursor without an id", store.DecidedApprovals{Principal: alice.Principal, Limit: 10, After: store.ApprovalCursor{EndedAt: f.now}}},
		{"a cursor out of range", store.DecidedApprovals{Principal: alice.Principal, Limit: 10, After: store.ApprovalCursor{EndedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), ID: "x"}}},
		{"a principal with a NUL", store.DecidedApprovals{Principal: "alice\x00", Limit: 10}},
	} {
		if _, err := s.ListDecidedApprovals(ctx, tt.q); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListDecidedApprovals with %s = %v, want ErrInvalid", tt.name, err)
		}
	}
}

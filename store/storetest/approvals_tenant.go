package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testListTenantApprovals: every approval of a tenant, in any state,
// newest first by creation, filtered and a page at a time; none of another
// tenant, nor of another issuer with a tenant of the same name.
func testListTenantApprovals(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	mk := func(id, principal, tenant, tool string, created time.Duration) {
		t.Helper()
		b := testBinding()
		b.Principal, b.Tool, b.ArgumentsHash = principal, tool, "args-"+id
		a := f.approval(id, b)
		a.Tenant, a.CreatedAt = tenant, f.now.Add(created)
		f.create(a)
	}
	mk("t-1", "issuer|contoso|alice", "contoso", "notes_write", 1*time.Minute)
	mk("t-2", "issuer|contoso|bob", "contoso", "notes_write", 2*time.Minute)
	mk("t-3", "issuer|contoso|alice", "contoso", "other_tool", 3*time.Minute)
	mk("t-4", "issuer|fabrikam|carol", "fabrikam", "notes_write", 4*time.Minute)
	mk("t-5", "elsewhere|contoso|eve", "contoso", "notes_write", 5*time.Minute)
	mk("t-6", "issuer|contoso|bob", "contoso", "notes_write", 2*time.Minute) // same time as t-2: by id
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "t-2", To: store.ApprovalDenied, DecidedBy: "issuer|contoso|alice", Now: f.now.Add(10 * time.Minute)}, nil); err != nil {
		t.Fatal(err)
	}
	contoso := store.TenantApprovals{Tenant: "contoso", Scope: "issuer|contoso|", Limit: 100}
	with := func(change func(*store.TenantApprovals)) store.TenantApprovals {
		q := contoso
		change(&q)
		return q
	}
	list := func(q store.TenantApprovals) []string {
		t.Helper()
		got, err := s.ListTenantApprovals(ctx, q)
		if err != nil {
			t.Fatalf("ListTenantApprovals(%+v): %v", q, err)
		}
		out := []string{}
		for _, a := range got {
			out = append(out, a.ID)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		q    store.TenantApprovals
		want []string
	}{
		{"contoso's", contoso, []string{"t-3", "t-6", "t-2", "t-1"}},
		{"fabrikam's", store.TenantApprovals{Tenant: "fabrikam", Scope: "issuer|fabrikam|", Limit: 100}, []string{"t-4"}},
		{"the other issuer's contoso", store.TenantApprovals{Tenant: "contoso", Scope: "elsewhere|contoso|", Limit: 100}, []string{"t-5"}},
		{"pending", with(func(q *store.TenantApprovals) { q.Status = store.ApprovalPending }), []string{"t-3", "t-6", "t-1"}},
		{"denied", with(func(q *store.TenantApprovals) { q.Status = store.ApprovalDenied }), []string{"t-2"}},
		{"of a tool", with(func(q *store.TenantApprovals) { q.Tool = "other_tool" }), []string{"t-3"}},
		{"of bob", with(func(q *store.TenantApprovals) { q.Principal = "issuer|contoso|bob" }), []string{"t-6", "t-2"}},
		{"of carol, in another tenant", with(func(q *store.TenantApprovals) { q.Principal = "issuer|fabrikam|carol" }), []string{}},
		{"bob's pending", with(func(q *store.TenantApprovals) { q.Principal, q.Status = "issuer|contoso|bob", store.ApprovalPending }), []string{"t-6"}},
	} {
		if got := list(tt.q); !slices.Equal(got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	var paged []string
	q := with(func(q *store.TenantApprovals) { q.Limit = 1 })
	for range 10 {
		page, err := s.ListTenantApprovals(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].ID)
		q.After = store.CreatedCursorOf(page[0])
	}
	if want := list(contoso); !slices.Equal(paged, want) {
		t.Errorf("a page at a time: %v, want %v", paged, want)
	}
	for i, bad := range []store.TenantApprovals{
		{Tenant: "contoso", Limit: 10},
		with(func(q *store.TenantApprovals) { q.Limit = 0 }),
		with(func(q *store.TenantApprovals) { q.Limit = store.MaxTenantApprovals + 1 }),
		with(func(q *store.TenantApprovals) { q.Status = "lost" }),
		with(func(q *store.TenantApprovals) { q.Tool = "a\x00b" }),
	} {
		if _, err := s.ListTenantApprovals(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: ListTenantApprovals(%+v) = %v, want ErrInvalid", fmt.Sprint(i), bad, err)
		}
	}
}

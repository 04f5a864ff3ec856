package approvals_test

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/review"
)

// A security reviewer lists every approval of their tenant with
// scope=all — another person's, in every state, filtered and a page at a
// time — and none of another tenant's or issuer's; nobody else may, and a
// malformed query is 400.
func TestTenantListing(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		reviewers, err := review.New(e.st, &review.Options{Groups: []string{"security"}})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := approvals.New(e.st, &approvals.Options{Now: e.clock.Now, IsReviewer: reviewers.IsReviewer})
		if err != nil {
			t.Fatal(err)
		}
		h := svc.Handler(nil)
		rita := person("rita", "security")
		ask := func(p identity.Principal, tool, args string) string {
			t.Helper()
			b := binding()
			b.Principal, b.Tool, b.ArgumentsHash, b.RunID = p.ID(), tool, args, ""
			a, err := svc.Request(t.Context(), approvals.Request{Binding: b, Tenant: p.Tenant, Arguments: []byte(`{}`), Reason: "r"})
			if err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			return a.ID
		}
		a1 := ask(alice, "notes_write", "a1")
		b1 := ask(bob, "notes_write", "b1")
		a2 := ask(alice, "other_tool", "a2")
		other := identity.Principal{Issuer: alice.Issuer, Tenant: "tenant-2", ObjectID: "olga"}
		ask(other, "notes_write", "o1")
		elsewhere := identity.Principal{Issuer: "https://other-idp.example.com", Tenant: alice.Tenant, ObjectID: "eve"}
		ask(elsewhere, "notes_write", "e1")
		if _, err := svc.Decide(t.Context(), b1, bob, false, "no"); err != nil {
			t.Fatal(err)
		}
		list := func(query string) ([]string, string) {
			t.Helper()
			res := serve(t, h, &rita, "GET", "/api/approvals?scope=all&"+query, "", "")
			if res.status != 200 {
				t.Fatalf("scope=all&%s = %d %v", query, res.status, res.body)
			}
			var ids []string
			items, _ := res.body["approvals"].([]any)
			for _, it := range items {
				v := it.(map[string]any)
				ids = append(ids, v["id"].(string))
				if v["can_approve"] != false || v["can_deny"] != false {
					t.Errorf("the reviewer may decide %v", v)
				}
			}
			next, _ := res.body["next_cursor"].(string)
			return ids, next
		}
		for _, c := range []struct {
			query string
			want  []string
		}{
			{"", []string{a2, b1, a1}},
			{"status=pending", []string{a2, a1}},
			{"status=denied", []string{b1}},
			{"tool=other_tool", []string{a2}},
			{"principal=" + url.QueryEscape(bob.ID()), []string{b1}},
			{"principal=" + url.QueryEscape(other.ID()), nil},
		} {
			if got, _ := list(c.query); !slices.Equal(got, c.want) {
				t.Errorf("scope=all&%s = %v, want %v", c.query, got, c.want)
			}
		}
		var paged []string
		q := "limit=1"
		for range 10 {
			ids, next := list(q)
			paged = append(paged, ids...)
			if next == "" {
				break
			}
			q = "limit=1&cursor=" + url.QueryEscape(next)
		}
		if !slices.Equal(paged, []string{a2, b1, a1}) {
			t.Errorf("a page at a time: %v", paged)
		}
		for _, p := range []*identity.Principal{&alice, &bob, &mallory} {
			if res := serve(t, h, p, "GET", "/api/approvals?scope=all", "", ""); res.status != 403 || res.code() != "reviewer_required" {
				t.Errorf("%s: scope=all = %d %v, want 403 reviewer_required", p.ObjectID, res.status, res.body)
			}
		}
		if res := serve(t, h, nil, "GET", "/api/approvals?scope=all", "", ""); res.status != 401 {
			t.Errorf("no one: scope=all = %d", res.status)
		}
		for _, query := range []string{
			"scope=mine", "scope=all&scope=all", "scope=all&bogus=1", "scope=all&status=lost", "scope=all&limit=0",
			"scope=all&limit=101", "scope=all&limit=01", "scope=all&cursor=", "scope=all&cursor=%21%21", "scope=all&tool=%ff",
			"scope=all&principal=" + strings.Repeat("p", 2000), "scope=all&state=decided", "scope=all&tool=a%00b",
		} {
			if res := serve(t, h, &rita, "GET", "/api/approvals?"+query, "", ""); res.status != 400 || res.code() != "invalid_request" {
				t.Errorf("%.80s = %d %v, want 400 invalid_request", query, res.status, res.body)
			}
		}
		// Without the reviewers' check, nobody is one.
		if res := serve(t, e.svc.Handler(nil), &rita, "GET", "/api/approvals?scope=all", "", ""); res.status != 403 {
			t.Errorf("a service without IsReviewer: scope=all = %d", res.status)
		}
	})
}

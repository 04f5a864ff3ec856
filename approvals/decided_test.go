package approvals_test

import (
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

// decidedIDs lists the ids of an answer's approvals, checking that each
// is decided.
func decidedIDs(t *testing.T, res response) []string {
	t.Helper()
	list, ok := res.body["approvals"].([]any)
	if res.status != 200 || !ok {
		t.Fatalf("the decided list = %d %v", res.status, res.body)
	}
	ids := []string{}
	for _, v := range list {
		a := v.(map[string]any)
		if a["status"] == "pending" || a["ended_at"] == nil {
			t.Errorf("approval %v in the decided list is %v, ended at %v", a["id"], a["status"], a["ended_at"])
		}
		ids = append(ids, a["id"].(string))
	}
	return ids
}

// The decided approvals: the requester's and an approver's, newest
// first, a page at a time; nobody else's, whatever the query.
func TestHTTPDecided(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		h := e.svc.Handler(nil)
		ctx := t.Context()
		mk := func(who identity.Principal, args string, approvers ...string) approvals.Approval {
			t.Helper()
			b := binding()
			b.Principal, b.ArgumentsHash = who.ID(), args
			if who.ID() != alice.ID() {
				b.RunID = ""
			}
			a, err := e.svc.Request(ctx, approvals.Request{Binding: b, Tenant: who.Tenant, Arguments: []byte(`{}`), Approvers: approvers})
			if err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			return a
		}
		decide := func(a approvals.Approval, by identity.Principal, approve bool) {
			t.Helper()
			if _, err := e.svc.Decide(ctx, a.ID, by, approve, "checked"); err != nil {
				t.Fatalf("Decide(%s) by %s: %v", a.ID, by.ObjectID, err)
			}
			e.clock.Advance(time.Second)
		}
		own := mk(alice, "args-own")
		decide(own, alice, true)
		reviewed := mk(alice, "args-reviewed", "grp-reviewers")
		decide(reviewed, bob, false)
		mk(alice, "args-pending", "grp-reviewers") // pending: not in the history
		mallorys := mk(mallory, "args-mallory")
		decide(mallorys, mallory, false)
		// The same group in another tenant is another group.
		other := identity.Principal{Issuer: alice.Issuer, Tenant: "tenant-2", ObjectID: "olga", Groups: []string{"grp-reviewers"}}
		olgas := mk(other, "args-olga", "grp-reviewers")
		decide(olgas, other, false)

		get := func(p *identity.Principal, query string) response {
			t.Helper()
			return serve(t, h, p, "GET", "/api/approvals?"+query, "", "")
		}
		for _, tt := range []struct {
			name string
			p    identity.Principal
			want []string
		}{
			{"alice", alice, []string{reviewed.ID, own.ID}},
			{"bob, a reviewer", bob, []string{reviewed.ID}},
			{"dave, a reviewer who did not decide", dave, []string{reviewed.ID}},
			{"carol", carol, []string{}},
			{"mallory", mallory, []string{mallorys.ID}},
			{"olga, a reviewer of another tenant", other, []string{olgas.ID}},
		} {
			if got := decidedIDs(t, get(&tt.p, "state=decided")); strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("%s's decided approvals = %v, want %v", tt.name, got, tt.want)
			}
		}

		// What the history shows of one: who decided, the outcome, when,
		// why.
		first := get(&alice, "state=decided").body["approvals"].([]any)[0].(map[string]any)
		if first["decided_by"] != bob.ID() || first["status"] != "denied" || first["decision_reason"] != "checked" ||
			first["ended_at"] != first["decided_at"] || first["can_approve"] != false || first["can_deny"] != false {
			t.Errorf("the newest decision = %v", first)
		}

		// A page at a time.
		page := get(&alice, "state=decided&limit=1")
		next, _ := page.body["next_cursor"].(string)
		if got := decidedIDs(t, page); len(got) != 1 || got[0] != reviewed.ID || next == "" {
			t.Fatalf("alice's first page = %v, next %q", got, next)
		}
		page = get(&alice, "state=decided&limit=1&cursor="+url.QueryEscape(next))
		if got := decidedIDs(t, page); len(got) != 1 || got[0] != own.ID || page.body["next_cursor"] != nil {
			t.Errorf("alice's second page = %v, next %v; want the last", got, page.body["next_cursor"])
		}
		// Another's cursor is a place in the list, not a key to it.
		if got := decidedIDs(t, get(&mallory, "state=decided&cursor="+url.QueryEscape(next))); len(got) != 0 {
			t.Errorf("mallory with alice's cursor sees %v", got)
		}
		// The pending list is as it was.
		if list := get(&alice, "").body["approvals"].([]any); len(list) != 1 {
			t.Errorf("alice's pending list = %v", list)
		}
		if list := get(&alice, "state=pending").body["approvals"].([]any); len(list) != 1 {
			t.Errorf("alice's pending list = %v", list)
		}

		forged := func(text string) string { return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(text))) }
		for _, query := range []string{
			"state=open",
			"state=Decided",
			"state=decided&state=pending",
			"limit=5",
			"state=pending&limit=5",
			"cursor=" + url.QueryEscape(next),
			"state=decided&limit=0",
			"state=decided&limit=-1",
			"state=decided&limit=51",
			"state=decided&limit=1000000000000000000000",
			"state=decided&limit=01",
			"state=decided&limit=+5",
			"state=decided&limit=five",
			"state=decided&limit=",
			"state=decided&limit=5&limit=6",
			"state=decided&cursor=",
			"state=decided&cursor=%25%25%25",
			"state=decided&cursor=" + url.QueryEscape(next) + "&cursor=" + url.QueryEscape(next),
			"state=decided&cursor=" + strings.Repeat("A", 400),
			"state=decided&cursor=" + forged("1234"),
			"state=decided&cursor=" + forged("x apr"),
			"state=decided&cursor=" + forged("-5 apr"),
			"state=decided&cursor=" + forged("0012 apr"),
			"state=decided&cursor=" + forged("1234 "),
			"state=decided&cursor=" + forged("1234 apr\x00"),
			"state=decided&cursor=" + forged("999999999999999999 apr"),
		} {
			if res := get(&alice, query); res.status != 400 || res.code() != "invalid_request" {
				t.Errorf("?%s = %d %s, want 400 invalid_request", query, res.status, res.code())
			}
		}
		if res := get(nil, "state=decided"); res.status != 401 {
			t.Errorf("signed out: %d, want 401", res.status)
		}
	})
}

// Decided refuses limits and cursors it does not know, and shows nobody
// anything without an identity.
func TestDecidedService(t *testing.T) {
	e := newEnv(t, storetest.NewSQLite(t))
	for _, limit := range []int{-1, approvals.MaxDecidedLimit + 1} {
		if _, _, err := e.svc.Decided(t.Context(), alice, "", limit); !errors.Is(err, approvals.ErrInvalid) {
			t.Errorf("Decided(limit %d) = %v, want ErrInvalid", limit, err)
		}
	}
	a := e.approved(t, binding())
	if list, _, err := e.svc.Decided(t.Context(), identity.Principal{ObjectID: "alice"}, "", 0); err != nil || len(list) != 0 {
		t.Errorf("Decided for an unidentified principal = %v, %v", list, err)
	}
	if list, next, err := e.svc.Decided(t.Context(), alice, "", 0); err != nil || len(list) != 1 || list[0].ID != a.ID || next != "" {
		t.Errorf("Decided = %v, %q, %v", list, next, err)
	}
}
